// Typed errors of the MPI binding. The addon constructs these (binding/src/errors.cc) so that a
// failure keeps its MPI error class across the boundary.

/** An MPI call failed; `errorClass` is the MPI error class (MPI_Error_class). */
export class MpiError extends Error {
  /** agree() only: the value the survivors still agreed on despite the failure. */
  flag?: number;

  constructor(message: string, readonly errorClass: number) {
    super(message);
    this.name = new.target.name;
  }
}

/** A process of the communicator died (MPIX_ERR_PROC_FAILED or MPIX_ERR_PROC_FAILED_PENDING). */
export class ProcFailedError extends MpiError {}

/** The communicator was revoked by some rank (MPIX_ERR_REVOKED). */
export class RevokedError extends MpiError {}

/** The MPI build lacks the ULFM call that was asked for. */
export class NotSupportedError extends MpiError {}

/** True for the errors that a process failure produces, whichever rank sees which. */
export function isFailure(error: unknown): error is ProcFailedError | RevokedError {
  return error instanceof ProcFailedError || error instanceof RevokedError;
}
