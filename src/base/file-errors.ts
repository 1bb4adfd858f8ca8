// File errors that name their file. Node's errors on a descriptor ("ENOSPC: no space left on
// device, write") do not say which file, and the one line a run stops with must.
export function namingFile<T>(file: string, action: () => T): T {
  try {
    return action();
  } catch (error) {
    throw namedError(file, error);
  }
}

/** `error` as namingFile throws it: a system error that does not name `file` is reworded to. */
export function namedError(file: string, error: unknown): unknown {
  const failure = error as NodeJS.ErrnoException;
  if (failure.code === undefined || failure.message.includes(file)) return error;
  return Object.assign(new Error(`${file}: ${failure.message.replace(/, \w+$/, '')}`), { code: failure.code });
}
