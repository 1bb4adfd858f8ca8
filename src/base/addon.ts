// The one place the addon is loaded. Each module that uses a part of it (MPI in comm/, the hang
// guard in liveness/, kernels in nn/, batch gathering in data/, CRC-64 here, erasure coding and the
// state file's writer in checkpoint/) types that part where it lives; the addon's own argument
// checks hold it to those types at run time. Nothing here knows the layers above.
import * as path from 'node:path';

const addonPath = path.resolve(__dirname, '..', '..', '..', 'build', 'Release', 'ft_train_native.node');

function load(): unknown {
  // OpenMP (oneDNN's threads) reads this as the addon loads: unset, it pinned the loading thread to
  // the first core it may use, so that every rank of a job mpirun does not bind to one core (more
  // ranks than cores, --bind-to none) ran on core 0 alone. setThreads(n > 1) pins the kernels'
  // threads instead, a core each (binding/src/cpu/cpu_module.cc).
  process.env.OMP_PROC_BIND ??= 'false';
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a native addon, at a path known only at run time
    return require(addonPath) as unknown;
  } catch (error) {
    throw new Error(
      `cannot load the native addon ${addonPath}: ${(error as Error).message}; ` + 'run `npm run build` (after launch/setup)',
      { cause: error },
    );
  }
}

const loaded = load();

/** The addon, as the part of it the caller uses (`Part`: that part's surface, typed by the caller). */
export function addonPart<Part>(): Part {
  return loaded as Part;
}
