// Checkpoints: the training state at the start of a step (parameters and the optimizer's state
// slots in one safetensors file, state.safetensors) plus manifest.json (step, shards, shard map, seed, the
// settings that fix the result and their sha256, world history, a CRC-64 per stripe of the file,
// and the manifest's own sha256). The live ranks write the file in parallel stripes, rank c the
// chunk c (chunks.ts) of every tensor group, which is the part of the state it holds when the
// optimizer state is sharded; the leader
// commits by renaming the manifest in last, so a checkpoint without a manifest, or whose checksums
// fail, is never used.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { moveIntoPlace, syncPath, writeAside } from '../atomic-write';
import { crc64 } from '../checksum';
import { parameterChunks } from '../chunks';
import { addon } from '../native';
import { canonicalSha256 } from './canonical-json';
import { decodeSafetensors, safetensorsHeader, type TensorInfo } from './safetensors';

/** /2: the manifest carries manifest_sha256, and config_sha256 is over the config's canonical JSON. */
export const checkpointFormat = 'ft-train-checkpoint/2';
const stateFile = 'state.safetensors';
const manifestFile = 'manifest.json';

export interface Stripe {
  offset: number;
  length: number;
  crc64: string;
}

/** What a checkpoint records besides the tensors. */
export interface CheckpointMeta {
  step: number;
  epoch: number;
  reason: string;
  shards: number;
  shard_map: number[];
  seed: number;
  /** the settings that fix the result; a resume must match them */
  config: Record<string, unknown>;
  config_sha256: string;
  /** every random draw is a pure function of (seed, epoch, step, shard, ...): the seed is the RNG state */
  rng: { seed: number; kind: 'counter-based' };
  world_history: { step: number; world: number; lost: number[] }[];
  /** shrink mode's data position */
  shrink?: { epoch: number; cursors: number[] };
}

export interface CheckpointManifest extends CheckpointMeta {
  format: string;
  time: number;
  file: { name: string; bytes: number; stripes: Stripe[] };
  /** the sha256 of the canonical JSON (see canonical-json.ts) of every other field */
  manifest_sha256: string;
}

/** The sha256 of the settings that fix the result, as config_sha256 records it. */
export function configSha256(config: Record<string, unknown>): string {
  return canonicalSha256(config);
}

function manifestSha256(manifest: Omit<CheckpointManifest, 'manifest_sha256'>): string {
  return canonicalSha256(manifest);
}

/**
 * The state a checkpoint holds: `params`, then each optimizer state slot (SGD: velocity; AdamW:
 * exp_avg, exp_avg_sq), each laid out as `tensors`. A slot's `data` holds elements [held.from,
 * held.to) only: all of them when the state is replicated, this rank's chunk when it is sharded.
 */
export interface TrainingState {
  tensors: readonly TensorInfo[];
  params: Float32Array;
  slots: { name: string; data: Float32Array }[];
  held: { from: number; to: number };
  /** state beside the parameters that every rank holds whole (batchnorm's running statistics), laid out as its own tensors; absent or empty: none */
  buffers?: { tensors: readonly TensorInfo[]; data: Float32Array };
}

/** Throws one line naming the first setting of `mine` that the checkpoint in `dir` was written without, or with another value of. */
export function checkConfig(dir: string, manifest: CheckpointManifest, mine: Record<string, unknown>): void {
  for (const key of Object.keys(mine)) {
    const [theirs, ours] = [JSON.stringify(manifest.config[key]), JSON.stringify(mine[key])];
    if (theirs === undefined) throw new Error(`${dir}: written without ${key}, this run has ${ours.slice(0, 80)}`);
    if (theirs !== ours) throw new Error(`${dir}: written with ${key} ${theirs.slice(0, 80)}, this run has ${ours.slice(0, 80)}`);
  }
}

export function checkpointDir(root: string, step: number): string {
  return path.join(root, `step-${String(step).padStart(8, '0')}`);
}

function stateTensors(tensors: readonly TensorInfo[], slots: readonly string[], buffers: readonly TensorInfo[] = []): TensorInfo[] {
  return [
    ...['params', ...slots].flatMap((group) => tensors.map((t) => ({ name: `${group}.${t.name}`, shape: t.shape }))),
    ...buffers.map((t) => ({ name: `buffers.${t.name}`, shape: t.shape })),
  ];
}

/** The last header built per tensor list: a run's layout never changes, and a JIT checkpoint's start is on its critical path. */
const headers = new WeakMap<readonly TensorInfo[], { slots: string; buffers?: readonly TensorInfo[]; header: Buffer }>();

function headerOf(state: TrainingState): Buffer {
  const names = state.slots.map((s) => s.name);
  const slots = names.join('\n');
  const known = headers.get(state.tensors);
  if (known && known.slots === slots && known.buffers === state.buffers?.tensors) return known.header;
  const header = safetensorsHeader(stateTensors(state.tensors, names, state.buffers?.tensors));
  headers.set(state.tensors, { slots, buffers: state.buffers?.tensors, header });
  return header;
}

/** The buffers' floats (0 without). */
const bufferLength = (state: TrainingState): number => state.buffers?.data.length ?? 0;

/** The state file's size: header, then params and every slot as float32, then the buffers. */
function stateFileBytes(state: TrainingState): number {
  return headerOf(state).length + 4 * (state.params.length * (1 + state.slots.length) + bufferLength(state));
}

/**
 * The stripes of the state file written by n ranks: one per tensor group (params, then each slot)
 * and chunk, group by group; stripe g n + c is chunk c of group g (stripe 0 also holds the header).
 * The buffers, if any, are one more stripe at the end, rank 0's.
 */
export function stripeRanges(state: TrainingState, n: number): { offset: number; length: number }[] {
  const header = headerOf(state).length;
  const P = state.params.length;
  const bounds = parameterChunks(P, n);
  const groups = 1 + state.slots.length;
  const stripes = Array.from({ length: groups * n }, (_, i) => {
    const [g, c] = [Math.floor(i / n), i % n];
    const start = i === 0 ? 0 : header + 4 * (g * P + bounds[c]);
    const end = header + 4 * (g * P + bounds[c + 1]);
    return { offset: start, length: end - start };
  });
  if (bufferLength(state) > 0) stripes.push({ offset: header + 4 * groups * P, length: 4 * bufferLength(state) });
  return stripes;
}

/** Writes a process's stripes; its staging buffers are allocated once, so make one per process. */
export type StripeWriter = InstanceType<typeof addon.FileWriter>;

export function newStripeWriter(): StripeWriter {
  return new addon.FileWriter();
}

/**
 * Starts writing rank i of n's stripes of the state file into `dir` (chunk i of every group,
 * straight from the buffers, fsynced) on `writer`'s thread, and returns their CRC-64s, group by
 * group, computed here meanwhile, and `written`, settled once they are durable (`dir`'s own
 * entry is made durable by commitManifest). The state must not
 * change until then. Every writer sets the file's final length, so no longer old file (an
 * interrupted attempt, a bigger model) leaves a tail whichever writer comes last; concurrent
 * ftruncates to one length never touch bytes another writer put below it. (A fresh file renamed in
 * would need an ordering between ranks: one to create it first, one to rename it last.)
 */
export function writeStripe(dir: string, state: TrainingState, i: number, n: number, writer: StripeWriter): { digests: string[]; written: Promise<void> } {
  fs.mkdirSync(dir, { recursive: true });
  const header = headerOf(state);
  const P = state.params.length;
  const bounds = parameterChunks(P, n);
  const [from, to] = [bounds[i], bounds[i + 1]];
  const groups = [state.params, ...state.slots.map((s) => s.data)];
  const parts = groups.map((data, g) => {
    const first = g === 0 ? from : from - state.held.from;
    if (first < 0 || first + to - from > data.length) {
      throw new RangeError(`writeStripe: rank ${i} of ${n} does not hold its chunk (elements ${from}..${to}) of ${g === 0 ? 'params' : state.slots[g - 1].name}`);
    }
    const piece = { at: header.length + 4 * (g * P + from), bytes: new Uint8Array(data.buffer, data.byteOffset + 4 * first, 4 * (to - from)) };
    return g === 0 && i === 0 ? [{ at: 0, bytes: header }, piece] : [piece];
  });
  // the buffers, the same on every rank: rank 0 writes them, every rank reports their digest (the digests are gathered in equal parts)
  const buffers = state.buffers?.data;
  const bufferPart = buffers && buffers.length > 0
    ? { at: header.length + 4 * groups.length * P, bytes: new Uint8Array(buffers.buffer, buffers.byteOffset, buffers.byteLength) } : undefined;
  const written = writer.write(path.join(dir, stateFile), stateFileBytes(state), [...parts.flat(), ...(bufferPart && i === 0 ? [bufferPart] : [])]);
  const digests = [...parts, ...(bufferPart ? [[bufferPart]] : [])].map((list) => crc64(...list.map((p) => p.bytes)));
  return { digests, written };
}

/** A manifest written aside (not yet durable nor in place): see prepareManifest. */
export interface PreparedManifest {
  manifest: CheckpointManifest;
  partial: string;
  file: string;
}

/**
 * The leader's commit, first half: the manifest written aside, which needs only the stripes'
 * digests (`digests[c]`: what rank c's writeStripe returned), so it can go while they are still
 * being written. Nothing names the checkpoint complete until commitManifest.
 */
export function prepareManifest(dir: string, meta: CheckpointMeta, state: TrainingState, digests: string[][]): PreparedManifest {
  const manifest = sealManifest(meta, state, digests);
  const file = path.join(dir, manifestFile);
  return { manifest, partial: writeAside(file, JSON.stringify(manifest, null, 1) + '\n'), file };
}

function sealManifest(meta: CheckpointMeta, state: TrainingState, digests: string[][]): CheckpointManifest {
  const n = digests.length;
  const ranges = stripeRanges(state, n);
  const unsealed = {
    format: checkpointFormat,
    time: Date.now(),
    ...meta,
    // (the buffers' stripe, index groups n, is rank 0's last digest)
    file: { name: stateFile, bytes: stateFileBytes(state), stripes: ranges.map((r, i) => ({ ...r, crc64: digests[i % n][Math.floor(i / n)] })) },
  };
  return { ...unsealed, manifest_sha256: manifestSha256(unsealed) };
}

/**
 * Readies the checkpoint path before a failure needs it: builds `state`'s header, and compiles the
 * manifest's code by sealing one (a JIT checkpoint runs once, right after a failure, where
 * compiling that code cost about 1.5 ms of its critical path).
 */
export function readyCheckpoints(meta: CheckpointMeta, state: TrainingState, ranks: number): void {
  const stripes = stripeRanges(state, ranks).length;
  sealManifest(meta, state, Array.from({ length: ranks }, () => Array.from({ length: Math.ceil(stripes / ranks) }, () => '0'.repeat(16))));
}

/** The leader's commit, second half, once every rank's stripe is durable: the manifest renamed in. */
export function commitManifest(prepared: PreparedManifest): CheckpointManifest {
  moveIntoPlace(prepared.partial, prepared.file);
  // the step directory's own entry, which every writer's mkdir made: once, here, after the
  // stripes' fsyncs (a directory fsync racing them waited for a journal commit of its own: up to
  // 3 ms) and before any older checkpoint is pruned
  syncPath(path.dirname(path.dirname(prepared.file)));
  return prepared.manifest;
}

/** Removes all but the newest `keep` complete checkpoints, and unfinished ones older than those. */
export function pruneCheckpoints(root: string, keep: number): void {
  const steps = listSteps(root);
  const complete = steps.filter((d) => fs.existsSync(path.join(root, d, manifestFile)));
  const kept = new Set(complete.slice(-keep));
  const oldestKept = complete.slice(-keep)[0];
  for (const d of steps) if (!kept.has(d) && (oldestKept === undefined || d < oldestKept)) fs.rmSync(path.join(root, d), { recursive: true, force: true });
}

function listSteps(root: string): string[] {
  return fs.existsSync(root) ? fs.readdirSync(root).filter((d) => /^step-\d{8}$/.test(d)).sort() : [];
}

/** Checks a checkpoint directory completely: the manifest's own checksum and its config's, file size, every stripe's CRC-64. */
export function verifyCheckpoint(dir: string): CheckpointManifest {
  const manifestPath = path.join(dir, manifestFile);
  if (!fs.existsSync(manifestPath)) throw new Error(`${dir}: incomplete: no ${manifestFile}`);
  let manifest: CheckpointManifest;
  try {
    manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'));
  } catch (error) {
    throw new Error(`${manifestPath}: not valid JSON (${(error as Error).message})`);
  }
  if (manifest.format !== checkpointFormat) throw new Error(`${manifestPath}: format ${JSON.stringify(manifest.format)}, expected "${checkpointFormat}"`);
  const { manifest_sha256: sealed, ...unsealed } = manifest;
  if (sealed !== manifestSha256(unsealed)) throw new Error(`${manifestPath}: corrupt: the manifest fails its own checksum (edited?)`);
  if (manifest.config_sha256 !== configSha256(manifest.config)) throw new Error(`${manifestPath}: corrupt: config_sha256 is not the sha256 of its config`);
  const file = path.join(dir, manifest.file?.name ?? stateFile);
  if (!fs.existsSync(file)) throw new Error(`${file}: missing`);
  const size = fs.statSync(file).size;
  if (size !== manifest.file.bytes) throw new Error(`${file}: ${size < manifest.file.bytes ? 'truncated' : 'corrupt'}: ${size} bytes, the manifest says ${manifest.file.bytes}`);
  const bytes = fs.readFileSync(file);
  manifest.file.stripes.forEach((s, i) => {
    if (crc64(bytes.subarray(s.offset, s.offset + s.length)) !== s.crc64) {
      throw new Error(`${file}: corrupt: stripe ${i} (bytes ${s.offset}..${s.offset + s.length}) fails the manifest checksum`);
    }
  });
  return manifest;
}

/**
 * The checkpoint `target` names: a checkpoint directory, or a directory of them (a run directory's
 * ckpt/ is looked in too), newest complete one first. `skipped` says why newer ones were passed over.
 */
export function findCheckpoint(target: string): { dir: string; manifest: CheckpointManifest; skipped: string[] } {
  if (!fs.existsSync(target)) throw new Error(`${target}: no such checkpoint or directory`);
  if (fs.existsSync(path.join(target, manifestFile)) || fs.existsSync(path.join(target, stateFile))) {
    return { dir: target, manifest: verifyCheckpoint(target), skipped: [] };
  }
  const root = listSteps(target).length === 0 && fs.existsSync(path.join(target, 'ckpt')) ? path.join(target, 'ckpt') : target;
  const skipped: string[] = [];
  for (const d of listSteps(root).reverse()) {
    try {
      return { dir: path.join(root, d), manifest: verifyCheckpoint(path.join(root, d)), skipped };
    } catch (error) {
      skipped.push((error as Error).message);
    }
  }
  throw new Error(`${target}: no complete checkpoint${skipped.length ? ` (${skipped.join('; ')})` : ''}`);
}

/** Where a run that stopped can go on from, in words: the newest complete checkpoint under `root`. */
export function newestCheckpoint(root: string): string {
  try {
    const { dir } = findCheckpoint(root);
    return `the newest complete checkpoint is ${dir} (continue with --resume ${dir})`;
  } catch {
    return 'no complete checkpoint to go back to';
  }
}

/**
 * Loads a verified checkpoint's tensors into `params` and each of `slots` (the optimizer's state,
 * whole), laid out as `tensors`.
 */
export function loadCheckpoint(dir: string, manifest: CheckpointManifest, tensors: readonly TensorInfo[], params: Float32Array, slots: { name: string; data: Float32Array }[],
  buffers?: TrainingState['buffers']): void {
  const file = path.join(dir, manifest.file.name);
  const { tensors: stored } = decodeSafetensors(fs.readFileSync(file), file);
  const expected = stateTensors(tensors, slots.map((s) => s.name), buffers?.tensors);
  const names = (list: readonly TensorInfo[]) => list.map((t) => `${t.name}[${t.shape}]`).join(', ');
  if (names(stored) !== names(expected)) throw new Error(`${file}: holds ${names(stored).slice(0, 120)}..., not this model's ${names(expected).slice(0, 120)}...`);
  [params, ...slots.map((s) => s.data)].forEach((target, g) => {
    let at = 0;
    for (const t of stored.slice(g * tensors.length, (g + 1) * tensors.length)) {
      target.set(t.data, at);
      at += t.data.length;
    }
  });
  let at = 0;
  for (const t of stored.slice((1 + slots.length) * tensors.length)) {
    buffers!.data.set(t.data, at);
    at += t.data.length;
  }
}
