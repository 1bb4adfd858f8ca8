// The one place the addon is loaded, and its surface typed by hand (the addon's own argument checks
// hold it to this at run time): MPI for comm/, kernels for nn/, CRC-64 for checksums.
import * as path from 'node:path';
import type { MpiSession } from './comm/communicator';
import { CommTimeoutError, MpiError, NotSupportedError, ProcFailedError, RevokedError } from './comm/errors';
import type { Backend } from './nn/backend';

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
  /** (Re)arms the progress watchdog: no beat() for timeoutMs and the process prints `line` and dies (0: off). */
  watchdog(timeoutMs: number, line: string): void;
  beat(): void;
  /** CRC-64 (ECMA-182, reflected; ISA-L) of the bytes, chained from `previous`; 16 hex digits. */
  crc64(bytes: ArrayBufferView, previous?: string): string;
}

const addonPath = path.resolve(__dirname, '..', '..', 'build', 'Release', 'ft_train_native.node');

function load(): Addon {
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
