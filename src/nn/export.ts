// A model as other frameworks read it: model.safetensors holds these tensors (the parameters, then
// the buffers such as batchnorm running statistics, under their layer-qualified names, float32) and
// model.json this spec (every default filled in); the run directory's writer writes the pair, and
// examples/pytorch/load_model.py rebuilds the model in PyTorch from it.
import type { NamedTensor } from '../checkpoint/safetensors';
import type { Net } from './net';

/** The model.safetensors metadata key of a language model's tokenisation (the dataset's `text`, as JSON): ft-sample decodes with it. */
export const textMetadataKey = 'text';

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
  const { name, input, classes, layers, language } = net.spec;
  const shape = language ? { context: language.context, vocab: language.vocab } : { input, classes };
  return `${JSON.stringify({ name, ...shape, layers }, null, 1)}\n`;
}
