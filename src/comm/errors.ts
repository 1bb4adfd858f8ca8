// Typed errors of the MPI binding. The addon constructs these (binding/src/mpi/errors.cc) so that a
// failure keeps its MPI error class across the boundary.

/** An MPI call failed; `errorClass` is the MPI error class (MPI_Error_class). */
export class MpiError extends Error {
  constructor(
    message: string,
    readonly errorClass: number,
  ) {
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

/**
 * A wait ran past its deadline (a peer alive but not progressing); the comm thread revoked the
 * communicator, so the peers' calls on it fail too. `errorClass` is 0.
 */
export class CommTimeoutError extends MpiError {}

/** True for the errors that a process failure or a hang produces, whichever rank sees which. */
export function isFailure(error: unknown): error is ProcFailedError | RevokedError | CommTimeoutError {
  return error instanceof ProcFailedError || error instanceof RevokedError || error instanceof CommTimeoutError;
}
