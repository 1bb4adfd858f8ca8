// The one error type of the data layer: a single line that names the file and the problem.

/** A dataset file is missing, truncated, corrupt, of the wrong schema, or cannot be sharded so. */
export class DatasetError extends Error {
  constructor(
    readonly file: string,
    problem: string,
  ) {
    super(`${file}: ${problem}`);
    this.name = 'DatasetError';
  }
}
