// Exports a model for other frameworks: DIR/model.safetensors (the parameters, then the buffers such
// as batchnorm running statistics, under their layer-qualified names, float32) and DIR/model.json
// (the spec with every default filled in). Each file is written atomically; examples/pytorch/
// load_model.py rebuilds the model in PyTorch from the pair.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeAtomically } from '../base/atomic-write';
import { encodeSafetensors, type NamedTensor } from '../checkpoint/safetensors';
import type { Net } from './net';
import { runFiles } from '../run/files';

/** Every tensor of the net: parameters, then buffers, each in layer order (views, not copies). */
export function namedTensors(net: Net): NamedTensor[] {
  return [
    ...net.params.views.map((view) => ({ name: view.name, shape: view.shape, data: net.params.param(view) })),
    ...net.bufferViews.map((view) => ({
      name: view.name,
      shape: view.shape,
      data: net.buffers.subarray(view.offset, view.offset + view.length),
    })),
  ];
}

/** The spec as model.json holds it: every default filled in. */
export function modelSpecJson(net: Net): string {
  const { name, input, classes, layers } = net.spec;
  return `${JSON.stringify({ name, input, classes, layers }, null, 1)}\n`;
}

export function exportModel(net: Net, dir: string): void {
  fs.mkdirSync(dir, { recursive: true });
  writeAtomically(path.join(dir, runFiles.model), encodeSafetensors(namedTensors(net), { format: 'ft-train', model: net.spec.name }));
  writeAtomically(path.join(dir, runFiles.modelSpec), modelSpecJson(net));
}
