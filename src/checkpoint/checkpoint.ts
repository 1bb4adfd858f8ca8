// Checkpoints: the training state at the start of a step (parameters and the optimizer's state
// slots in one safetensors file, state.safetensors) plus manifest.json (step, shards, shard map, seed, the
// settings that fix the result and their sha256, world history, a CRC-64 per stripe of the file,
// and the manifest's own sha256). The file is made of stripes, chunk c (chunks.ts) of every
// tensor group, which rank c holds when the optimizer state is sharded; the live ranks write them
// in parallel, rank c chunk c, or one rank writes them all (manager.ts: a small replicated state).
// They are written into the staging directory `step-next` beside the checkpoints; the leader adds
// the manifest and commits by renaming the whole directory to step-N, so a checkpoint is never
// seen without its manifest, and one whose checksums fail is never used.
// Between checkpoints `step-next` holds a spare: a state file whose every block is already on disk
// (written ahead, or a pruned checkpoint's), so that the stripes overwrite blocks in place and
// each writer's fdatasync is the data alone, not a journal commit of new blocks (at 3 writers of
// 3.5 MB on ext4: about 3.6 ms against 5.9).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncPath } from '../base/atomic-write';
import { crc64 } from '../base/checksum';
import { parameterChunks } from '../base/chunks';
import { addonPart } from '../base/addon';
import { canonicalSha256 } from './canonical-json';
import { decodeSafetensors, safetensorsHeader, type TensorInfo } from './safetensors';
import { makeDirectory } from '../base/make-directory';

const addon = addonPart<{
  /**
   * Writes byte ranges of a file and fsyncs it, off the JS thread: it creates
   * the file if needed, sets its length to `fileBytes`, and writes each view's bytes at `at`,
   * page-aligned runs straight to the disk (O_DIRECT, through staging buffers a writer allocates
   * once) where the file system allows. The views must not overlap in the file (a TypeError) nor
   * change until the Promise settles; one write at a time. I/O errors reject like Node's fs errors,
   * naming the file.
   */
  FileWriter: new () => {
    write(file: string, fileBytes: number, parts: { at: number; bytes: ArrayBufferView }[]): Promise<void>;
    fill(file: string, fileBytes: number): Promise<void>;
    /** A fill under way stops before its next MiB and rejects with ECANCELED. */
    cancel(): void;
  };
  /**
   * Creates or replaces `file` with a copy of `bytes`, written and made durable (fdatasync) in one
   * task off the JS thread; rejects like Node's fs errors, naming the file.
   */
  writeDurable(file: string, bytes: ArrayBufferView): Promise<void>;
}>();

/** /2: the manifest carries manifest_sha256, and config_sha256 is over the config's canonical JSON. */
export const checkpointFormat = 'ft-train-checkpoint/2';
const stateFile = 'state.safetensors';
const manifestFile = 'manifest.json';
const stagingName = 'step-next';
/** an empty file in a checkpoint root that a run made, until a checkpoint is committed there (see makeInRoot) */
const madeMark = '.made-by-run';

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

/** Where the next checkpoint under `root` is written before its commit names it (see the top). */
export function stagingDir(root: string): string {
  return path.join(root, stagingName);
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
export function stateFileBytes(state: TrainingState): number {
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

/** a writer made ahead (prepareStripeWriter), which the next newStripeWriter() returns */
let prepared: StripeWriter | undefined;

/**
 * Makes the writer the next newStripeWriter() returns now: its staging buffers written through
 * take a few tens of ms, which a rank joining a run spends before it says it is ready rather than
 * in the join, where the others wait for it.
 */
export function prepareStripeWriter(): void {
  prepared ??= new addon.FileWriter();
}

export function newStripeWriter(): StripeWriter {
  const writer = prepared ?? new addon.FileWriter();
  prepared = undefined;
  return writer;
}

/**
 * Chunk i of n's pieces of the state file, group by group (chunk i of each; chunk 0's first also
 * holds the header), and the buffers' piece, written with chunk 0 (the same on every rank). Throws,
 * naming `caller`, if the state lacks chunk i.
 */
function stripeParts(
  caller: string,
  state: TrainingState,
  i: number,
  n: number,
): { groups: { at: number; bytes: Uint8Array }[][]; buffers?: { at: number; bytes: Uint8Array } } {
  const header = headerOf(state);
  const P = state.params.length;
  const bounds = parameterChunks(P, n);
  const [from, to] = [bounds[i], bounds[i + 1]];
  const data = [state.params, ...state.slots.map((s) => s.data)];
  const groups = data.map((group, g) => {
    const first = g === 0 ? from : from - state.held.from;
    if (first < 0 || first + to - from > group.length) {
      throw new RangeError(
        `${caller}: the state does not hold chunk ${i} of ${n} (elements ${from}..${to}) of ${g === 0 ? 'params' : state.slots[g - 1].name}`,
      );
    }
    const piece = {
      at: header.length + 4 * (g * P + from),
      bytes: new Uint8Array(group.buffer, group.byteOffset + 4 * first, 4 * (to - from)),
    };
    return g === 0 && i === 0 ? [{ at: 0, bytes: header }, piece] : [piece];
  });
  const buffers = state.buffers?.data;
  return buffers && buffers.length > 0
    ? {
        groups,
        buffers: { at: header.length + 4 * data.length * P, bytes: new Uint8Array(buffers.buffer, buffers.byteOffset, buffers.byteLength) },
      }
    : { groups };
}

/**
 * Starts writing the stripes of `chunks` (of n: chunk c of every group) of the state file into
 * `dir`, straight from the buffers, made durable, on `writer`'s thread; settles once they are
 * durable (`dir`'s own entry is made durable by commitManifest). The state must not change until
 * then. Every writer sets the file's final length, so no longer old file (an interrupted attempt, a
 * spare of a bigger model) leaves a tail whichever writer comes last; concurrent ftruncates to one
 * length never touch bytes another writer put below it. (A fresh file renamed in would need an
 * ordering between ranks: one to create it first, one to rename it last.)
 */
export function writeStripes(dir: string, state: TrainingState, chunks: readonly number[], n: number, writer: StripeWriter): Promise<void> {
  const parts = chunks.flatMap((c) => {
    const { groups, buffers } = stripeParts('writeStripes', state, c, n);
    return [...groups.flat(), ...(buffers && c === 0 ? [buffers] : [])];
  });
  makeInRoot(dir);
  return writer.write(path.join(dir, stateFile), stateFileBytes(state), parts);
}

/**
 * The CRC-64s of chunk i of n's stripes, group by group, then the buffers' (every chunk reports
 * theirs, so that each rank's list is as long). Any rank holding chunk i can compute them.
 */
export function stripeDigests(state: TrainingState, i: number, n: number): string[] {
  const { groups, buffers } = stripeParts('stripeDigests', state, i, n);
  return [...groups, ...(buffers ? [[buffers]] : [])].map((list) => crc64(...list.map((p) => p.bytes)));
}

/** A manifest written into the staging directory, not yet committed: see prepareManifest. */
export interface PreparedManifest {
  manifest: CheckpointManifest;
  staging: string;
  /** settled once the manifest is durable (rejects with an error naming it) */
  durable: Promise<void>;
}

/**
 * The leader's commit, first half: the manifest written into `staging` (where the stripes are
 * being written) and made durable on libuv's pool meanwhile. It needs only the stripes' digests
 * (`digests[c]`: stripeDigests of rank c), so it goes while they are still being
 * written. Nothing names the checkpoint complete until commitManifest.
 */
export function prepareManifest(staging: string, meta: CheckpointMeta, state: TrainingState, digests: string[][]): PreparedManifest {
  const manifest = sealManifest(meta, state, digests);
  const file = path.join(staging, manifestFile);
  makeInRoot(staging);
  // opened, written and synced in one task off the JS thread: a stuck disk holds neither the event
  // loop nor its watchdog, and the checkpoint waits for one hand-off, not three
  const durable = addon.writeDurable(file, new TextEncoder().encode(JSON.stringify(manifest, null, 1) + '\n'));
  return { manifest, staging, durable };
}

function sealManifest(meta: CheckpointMeta, state: TrainingState, digests: string[][]): CheckpointManifest {
  const n = digests.length;
  const ranges = stripeRanges(state, n);
  const unsealed = {
    format: checkpointFormat,
    time: Date.now(),
    ...meta,
    // (the buffers' stripe, index groups n, is rank 0's last digest)
    file: {
      name: stateFile,
      bytes: stateFileBytes(state),
      stripes: ranges.map((r, i) => ({ ...r, crc64: digests[i % n][Math.floor(i / n)] })),
    },
  };
  return { ...unsealed, manifest_sha256: manifestSha256(unsealed) };
}

/**
 * Readies the checkpoint path before a failure needs it: builds `state`'s header, and runs the
 * leader's work on it (the digests of rank `rank` of `ranks`, undefined for a rank that writes no
 * stripe; a manifest sealed and serialized) a few times, as after a failure, so that V8 has
 * compiled it for these shapes: a JIT checkpoint runs once, right after a failure, where that
 * compiling cost about 2 ms of its critical path.
 */
export function readyCheckpoints(meta: CheckpointMeta, state: TrainingState, rank: number | undefined, ranks: number): void {
  const failed = { ...meta, world_history: [...meta.world_history, { step: meta.step, world: ranks, lost: [ranks] }] };
  const perRank = Math.ceil(stripeRanges(state, ranks).length / ranks);
  for (let round = 0; round < 3; round++) {
    const digests = rank === undefined ? Array.from({ length: perRank }, () => '0'.repeat(16)) : stripeDigests(state, rank, ranks);
    JSON.stringify(
      sealManifest(
        failed,
        state,
        Array.from({ length: ranks }, () => digests),
      ),
      null,
      1,
    );
  }
}

/**
 * The leader's commit, second half, once every rank's stripe and the manifest are durable: the
 * staging directory renamed to `dir` (replacing what an interrupted commit of the same step, or an
 * older run, left there), and the new name made durable.
 */
export function commitManifest(prepared: PreparedManifest, dir: string): CheckpointManifest {
  // a leader frozen past its peers' retry would find another attempt's files, or a spare, there
  const staged = path.join(prepared.staging, manifestFile);
  if (
    !fs.existsSync(staged) ||
    (JSON.parse(fs.readFileSync(staged, 'utf8')) as CheckpointManifest).manifest_sha256 !== prepared.manifest.manifest_sha256
  ) {
    throw new Error(`${prepared.staging}: does not hold the manifest this commit prepared: not committed`);
  }
  const root = path.dirname(dir);
  // an older copy of the step is set aside whole, not deleted, until the new one is in place
  const replaced = fs.existsSync(dir) ? path.join(root, `${stagingName}.partial-${process.pid}-replaced`) : undefined;
  if (replaced) {
    fs.rmSync(replaced, { recursive: true, force: true });
    fs.renameSync(dir, replaced);
  }
  try {
    fs.renameSync(prepared.staging, dir);
  } catch (error) {
    // after the vote the staging directory holds a complete checkpoint, maybe the only one: keep it
    if (replaced) fs.renameSync(replaced, dir);
    throw new CommitError(
      `${dir}: the checkpoint of step ${prepared.manifest.step} could not be put in place (${(error as Error).message}); ` +
        `it is complete in ${prepared.staging}, kept there (rename that directory to ${path.basename(dir)} to resume from it)`,
    );
  }
  syncPath(dir);
  syncPath(root);
  if (replaced) fs.rmSync(replaced, { recursive: true, force: true });
  // the root holds a checkpoint from now on: it stays, and needs no mark
  fs.rmSync(path.join(root, madeMark), { force: true });
  return prepared.manifest;
}

/** A voted checkpoint that could not be renamed into place: its staging directory holds it, and must be kept. */
export class CommitError extends Error {}

/**
 * Removes all but the newest `keep` complete checkpoints, and unfinished ones older than those. The
 * newest removed one's state file becomes the spare when there is none (see the top).
 */
export function pruneCheckpoints(root: string, keep: number): void {
  const steps = listSteps(root);
  const complete = steps.filter((d) => fs.existsSync(path.join(root, d, manifestFile)));
  const kept = new Set(complete.slice(-keep));
  const oldestKept = complete.slice(-keep)[0];
  const removed = steps.filter((d) => !kept.has(d) && (oldestKept === undefined || d < oldestKept));
  const recyclable = removed
    .map((d) => path.join(root, d, stateFile))
    .filter((f) => fs.existsSync(f))
    .pop();
  if (recyclable && !fs.existsSync(path.join(stagingDir(root), stateFile))) {
    try {
      placeSpare(recyclable, root);
    } catch {
      // the spare only saves time: without it the next checkpoint writes a new file
    }
  }
  for (const d of removed) fs.rmSync(path.join(root, d), { recursive: true, force: true });
}

/**
 * Removes the checkpoints of steps after `step`: they hold state that a later check found corrupt.
 * The manifest goes first, so that a removal cut short leaves an incomplete checkpoint, never one
 * that passes for complete.
 */
export function removeCheckpointsAfter(root: string, step: number): string[] {
  const removed = listSteps(root).filter((d) => d > path.basename(checkpointDir(root, step)));
  for (const d of removed) {
    fs.rmSync(path.join(root, d, manifestFile), { force: true });
    fs.rmSync(path.join(root, d), { recursive: true, force: true });
  }
  return removed.map((d) => path.join(root, d));
}

/**
 * Makes a spare of `bytes` under `root` with `writer` (a writer of its own: this runs beside
 * training) unless the staging directory already holds a state file, or the disk has room for
 * less than twice its size. Resolves once it is in place, or was not needed; a checkpoint that
 * starts meanwhile writes a new file as before, and the spare then stays out (placeSpare).
 */
export async function readySpare(root: string, bytes: number, writer: StripeWriter): Promise<void> {
  if (fs.existsSync(path.join(stagingDir(root), stateFile))) return;
  removeEntries(root, (name) => name.startsWith(`${stagingName}.partial-`));
  const partial = path.join(root, `${stagingName}.partial-${process.pid}`);
  makeInRoot(partial);
  try {
    // never the disk's last bytes: a spare that filled it would make the run's own writes fail
    const { bavail, bsize } = fs.statfsSync(root);
    if (bavail * bsize < 2 * bytes)
      throw new Error(`${root}: ${bavail * bsize} bytes free, too few for a spare of ${bytes} and as much again`);
    await writer.fill(path.join(partial, stateFile), bytes);
    placeSpare(path.join(partial, stateFile), root);
  } finally {
    fs.rmSync(partial, { recursive: true, force: true });
  }
}

/**
 * Removes the staging directory (the spare, or an attempt that was never committed) and any partial
 * one; then `root` itself if that left nothing in it but the mark of a run having made it (for the
 * spare alone: a run that wrote no checkpoint leaves no directory).
 */
export async function removeStaging(root: string): Promise<void> {
  // asynchronous: on a stuck disk these calls never return, and the caller bounds them
  const names = await fs.promises.readdir(root).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  const staging = names.filter((name) => name === stagingName || name.startsWith(`${stagingName}.partial-`));
  for (const name of staging) await fs.promises.rm(path.join(root, name), { recursive: true, force: true });
  const left = names.filter((name) => !staging.includes(name));
  if (left.length === 1 && left[0] === madeMark) await fs.promises.rm(root, { recursive: true });
}

/**
 * Makes `dir`, a directory in the checkpoint root, and the root if need be. Whichever rank makes
 * the root marks it (`madeMark`), so that any rank that leads at the end, a spawned one included,
 * knows the run made it, which no rank's memory of the start can tell alike everywhere.
 */
function makeInRoot(dir: string): void {
  const root = path.dirname(dir);
  if (makeDirectory(root) !== undefined) fs.writeFileSync(path.join(root, madeMark), '');
  makeDirectory(dir);
}

/** Removes the entries of `root` (if it exists) whose names `which` picks. */
function removeEntries(root: string, which: (name: string) => boolean): void {
  for (const name of fs.existsSync(root) ? fs.readdirSync(root) : []) {
    if (which(name)) fs.rmSync(path.join(root, name), { recursive: true, force: true });
  }
}

/**
 * The state file `file` linked into the staging directory as the spare, unless a state file is
 * there, and unlinked from where it was. A link never replaces: a checkpoint's writers (who may
 * have made the directory and be opening the file) either all open the spare or all keep the file
 * one of them created, and the directory they opened is never swapped under them.
 */
function placeSpare(file: string, root: string): void {
  const staging = stagingDir(root);
  makeInRoot(staging);
  try {
    fs.linkSync(file, path.join(staging, stateFile));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  fs.rmSync(file, { force: true });
}

function listSteps(root: string): string[] {
  return fs.existsSync(root)
    ? fs
        .readdirSync(root)
        .filter((d) => /^step-\d{8}$/.test(d))
        .sort()
    : [];
}

/** Checks a checkpoint directory completely: the manifest's own checksum and its config's, file size, every stripe's CRC-64. */
export function verifyCheckpoint(dir: string): CheckpointManifest {
  const manifestPath = path.join(dir, manifestFile);
  if (!fs.existsSync(manifestPath)) throw new Error(`${dir}: incomplete: no ${manifestFile}`);
  let manifest: CheckpointManifest;
  try {
    manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'));
  } catch (error) {
    throw new Error(`${manifestPath}: not valid JSON (${(error as Error).message})`, { cause: error });
  }
  if (manifest.format !== checkpointFormat)
    throw new Error(`${manifestPath}: format ${JSON.stringify(manifest.format)}, expected "${checkpointFormat}"`);
  const { manifest_sha256: sealed, ...unsealed } = manifest;
  if (sealed !== manifestSha256(unsealed)) throw new Error(`${manifestPath}: corrupt: the manifest fails its own checksum (edited?)`);
  if (manifest.config_sha256 !== configSha256(manifest.config))
    throw new Error(`${manifestPath}: corrupt: config_sha256 is not the sha256 of its config`);
  const file = path.join(dir, manifest.file?.name ?? stateFile);
  if (!fs.existsSync(file)) throw new Error(`${file}: missing`);
  const size = fs.statSync(file).size;
  if (size !== manifest.file.bytes)
    throw new Error(
      `${file}: ${size < manifest.file.bytes ? 'truncated' : 'corrupt'}: ${size} bytes, the manifest says ${manifest.file.bytes}`,
    );
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

/**
 * The newest complete checkpoint a job can go back to: its own under `checkpointDir`, else the one
 * it resumed from (`resumedFrom`, its --resume), where it ended before writing one; the error is
 * its own directory's.
 */
export function findJobCheckpoint(checkpointDir: string, resumedFrom: string | undefined): ReturnType<typeof findCheckpoint> {
  try {
    return findCheckpoint(checkpointDir);
  } catch (error) {
    if (resumedFrom === undefined) throw error;
    try {
      return findCheckpoint(resumedFrom);
    } catch {
      throw error;
    }
  }
}

/** Where a job that stopped can go on from, in words: see findJobCheckpoint. */
export function newestCheckpoint(checkpointDir: string, resumedFrom: string | undefined): string {
  try {
    const { dir } = findJobCheckpoint(checkpointDir, resumedFrom);
    return `the newest complete checkpoint is ${dir} (continue with --resume ${dir})`;
  } catch {
    return 'no complete checkpoint to go back to';
  }
}

/**
 * Loads a verified checkpoint's tensors into `params` and each of `slots` (the optimizer's state,
 * whole), laid out as `tensors`.
 */
export function loadCheckpoint(
  dir: string,
  manifest: CheckpointManifest,
  tensors: readonly TensorInfo[],
  params: Float32Array,
  slots: { name: string; data: Float32Array }[],
  buffers?: TrainingState['buffers'],
): void {
  const file = path.join(dir, manifest.file.name);
  const { tensors: stored } = decodeSafetensors(fs.readFileSync(file), file);
  const expected = stateTensors(
    tensors,
    slots.map((s) => s.name),
    buffers?.tensors,
  );
  const names = (list: readonly TensorInfo[]) => list.map((t) => `${t.name}[${t.shape}]`).join(', ');
  if (names(stored) !== names(expected))
    throw new Error(`${file}: holds ${names(stored).slice(0, 120)}..., not this model's ${names(expected).slice(0, 120)}...`);
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
