// File errors that name their file. Node's errors on a descriptor ("ENOSPC: no space left on
// device, write") do not say which file, and the one line a run stops with must.
export function namingFile<T>(file: string, action: () => T): T {
  try {
    return action();
  } catch (error) {
    const failure = error as NodeJS.ErrnoException;
    if (failure.code === undefined || failure.message.includes(file)) throw error;
    throw Object.assign(new Error(`${file}: ${failure.message.replace(/, \w+$/, '')}`), { code: failure.code });
  }
}
