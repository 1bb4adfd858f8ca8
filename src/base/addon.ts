// The one place the addon is loaded, and its surface typed by hand (the addon's own argument checks
// hold it to this at run time): MPI for comm/, kernels for nn/, batch gathering for data/, CRC-64
// for checksums, erasure coding and the state file's writer for checkpoint/.
import * as path from 'node:path';
import type { MpiSession } from '../comm/communicator';
import { CommTimeoutError, MpiError, NotSupportedError, ProcFailedError, RevokedError } from '../comm/errors';
import type { Backend } from '../nn/backend';

interface Addon {
  init(): Promise<MpiSession>;
  finalize(): Promise<void>;
  registerErrorTypes(types: Record<string, unknown>): void;
  ulfm: boolean;
  cpu: Backend;
  /** How long any wait on the comm thread may last before it revokes the communicator (0: no limit). */
  setCommTimeout(ms: number): void;
  /** While idle, the comm thread drives MPI's progress this often, for the failure detector's heartbeats (0: never). */
  setIdleProgress(ms: number): void;
  /** Whether the main thread computes (pending requests are then polled between naps, leaving it the core) or will wait on the comm thread. */
  setMainComputing(computing: boolean): void;
  /** (Re)arms the progress watchdog: no beat() for timeoutMs and the process prints `line` and dies (0: off). */
  watchdog(timeoutMs: number, line: string): void;
  beat(): void;
  /** CRC-64 (ECMA-182, reflected; ISA-L) of the bytes, chained from `previous`; 16 hex digits. */
  crc64(bytes: ArrayBufferView, previous?: string): string;
  /** x[i, :] = features[rows[i], :] / divisor for samples of `sampleSize` values (each quotient rounded to float32). */
  gatherRows(features: Uint8Array | Float32Array, sampleSize: number, rows: Int32Array, divisor: number, x: Float32Array): void;
  /** `features`, not yet written, will be gathered by random rows: backed by huge pages where the kernel allows. Whether the advice was taken. */
  adviseRandomRows(features: ArrayBufferView): boolean;
  /**
   * Writes byte ranges of a file and fsyncs it, off the JS thread: it creates
   * the file if needed, sets its length to `fileBytes`, and writes each view's bytes at `at`,
   * page-aligned runs straight to the disk (O_DIRECT, through staging buffers a writer allocates
   * once) where the file system allows. The views must not overlap in the file (a TypeError) nor
   * change until the Promise settles; one write at a time. I/O errors reject like Node's fs errors,
   * naming the file.
   */
  FileWriter: new () => { write(file: string, fileBytes: number, parts: { at: number; bytes: ArrayBufferView }[]): Promise<void>; fill(file: string, fileBytes: number): Promise<void> };
  /**
   * Reed-Solomon erasure coding (ISA-L, Cauchy matrix) over the raw bytes of the views: k data
   * fragments and m parity fragments (k + m <= 255), any k of which rebuild the others. Fragment i
   * < k is data fragment i, fragment k + j is parity row j. Every view holds the same number of
   * bytes; outputs overlap no other view. Synchronous, on the calling thread.
   */
  ec: {
    /** Writes parity rows `rows` (default 0 .. m-1; distinct, in [0, m)) of the k `data` fragments into `parity`, one per row. */
    encode(k: number, m: number, data: ArrayBufferView[], parity: ArrayBufferView[], rows?: number[]): void;
    /** Rebuilds fragments `wanted` (distinct, in [0, k + m)) into `outputs` from the k `fragments` numbered `present`. */
    decode(k: number, m: number, present: number[], fragments: ArrayBufferView[], wanted: number[], outputs: ArrayBufferView[]): void;
  };
}

const addonPath = path.resolve(__dirname, '..', '..', '..', 'build', 'Release', 'ft_train_native.node');

function load(): Addon {
  // OpenMP (oneDNN's threads) reads this as the addon loads: unset, it pinned the loading thread to
  // the first core it may use, so that every rank of a job mpirun does not bind to one core (more
  // ranks than cores, --bind-to none) ran on core 0 alone. setThreads(n > 1) pins the kernels'
  // threads instead, a core each (binding/src/cpu/cpu_module.cc).
  process.env.OMP_PROC_BIND ??= 'false';
  let addon: Addon;
  try {
    addon = require(addonPath) as Addon;
  } catch (error) {
    throw new Error(`cannot load the native addon ${addonPath}: ${(error as Error).message}; ` +
      'run `npm run build` (after launch/setup)');
  }
  addon.registerErrorTypes({ MpiError, ProcFailedError, RevokedError, NotSupportedError, CommTimeoutError });
  return addon;
}

export const addon = load();
