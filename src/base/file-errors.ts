// File errors that name their file. Node's errors on a descriptor ("ENOSPC: no space left on
// device, write") do not say which file, and the one line a run stops with must.
export function namingFile<T>(file: string, action: () => T): T {
  try {
    return action();
  } catch (error) {
    throw namedError(file, error);
  }
}

/**
 * `error` as namingFile throws it: a system error that does not name `file` is reworded to, the
 * call and paths Node ends its message with dropped (", write"; ", open '/x/.y.partial-1'": a
 * temporary file's name, which the user never gave).
 */
export function namedError(file: string, error: unknown): unknown {
  const failure = error as NodeJS.ErrnoException;
  if (failure.code === undefined || failure.message.includes(`'${file}'`) || failure.message.startsWith(`${file}: `)) return error;
  const message = failure.message.replace(/, \w+(?: '[^']*'(?: -> '[^']*')?)?$/, '');
  return Object.assign(new Error(`${file}: ${message}`), { code: failure.code });
}
