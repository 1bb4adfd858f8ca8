// A finished job as the MPI tests see it: its run directory and what its command printed, and what
// they read back from that directory.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { CheckpointManifest } from '../../src/checkpoint/checkpoint';
import { decodeSafetensors } from '../../src/checkpoint/safetensors';
import { paramsSha256 } from '../../src/run/params-sha256';
import type { Summary } from '../../src/run/records';

export interface Run {
  dir: string;
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The run's summary.json, once its command exited 0. */
export function summaryOf(run: Run): Summary {
  assert.equal(run.code, 0, `exited ${run.code}\n${run.stdout}\n${run.stderr}`);
  return JSON.parse(fs.readFileSync(path.join(run.dir, 'summary.json'), 'utf8'));
}

/** The records of one of the run's JSON-lines files (metrics.jsonl, events.jsonl). */
export function lines<T>(run: Run, file: string): T[] {
  return fs
    .readFileSync(path.join(run.dir, file), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as T);
}

/** Every message the run's ranks logged (logs/rank-R.log: JSON lines, beside a drill's plain ones), rank by rank. */
export function logMessages(dir: string): string[] {
  const logs = path.join(dir, 'logs');
  return fs
    .readdirSync(logs)
    .sort()
    .flatMap((file) =>
      fs
        .readFileSync(path.join(logs, file), 'utf8')
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => (JSON.parse(line) as { message: string }).message),
    );
}

/**
 * The params_sha256 a run would report with the parameters (and buffers) of the checkpoint in
 * `dir`: that of a run stopped there, against the summary of one that ended there.
 */
export function checkpointParamsSha256(dir: string): string {
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as CheckpointManifest;
  const file = path.join(dir, manifest.file.name);
  const { tensors } = decodeSafetensors(fs.readFileSync(file), file);
  return paramsSha256(['params.', 'buffers.'].flatMap((group) => tensors.filter((t) => t.name.startsWith(group)).map((t) => t.data)));
}
