// The one place the addon is loaded, and its surface typed by hand (the addon's own argument checks
// hold it to this at run time): MPI for comm/, kernels for nn/, CRC-64 for checksums.
import * as path from 'node:path';
import type { MpiSession } from './comm/communicator';
import { MpiError, NotSupportedError, ProcFailedError, RevokedError } from './comm/errors';
import type { Backend } from './nn/backend';

interface Addon {
  init(): Promise<MpiSession>;
  finalize(): Promise<void>;
  registerErrorTypes(types: Record<string, unknown>): void;
  ulfm: boolean;
  cpu: Backend;
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
  addon.registerErrorTypes({ MpiError, ProcFailedError, RevokedError, NotSupportedError });
  return addon;
}

export const addon = load();
