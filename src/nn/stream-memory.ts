// Parameter-sized vectors that the optimizer's update reads together, element by element: the
// parameters, the gradients and the optimizer's state. Each is a buffer of its own, and glibc
// places buffers this large at the top of 64 MiB-aligned holes, so two of the same size often start
// a multiple of 256 MiB apart. AMD's L1 way predictor tags lines by a hash of address bits 12-27
// and cannot hold both streams' lines at once: the update then misses L1 on every access (6x
// slower; mlp-wide's real step at 1 rank took 92 ms against 60). So every such vector is allocated
// with the same slack and starts at its own skew into it, a page and a cache line per kind apart.

/** The kinds of vector an update streams together; optimizer state slot k is `state + k`. */
export const Stream = { parameters: 0, gradients: 1, state: 2 } as const;

/** Optimizer state has at most two slots (AdamW's moments). */
const kinds = 4;
const skewFloats = (4096 + 64) / Float32Array.BYTES_PER_ELEMENT;

/** The floats streamVector asks its memory for, to give a vector of `length` its skew. */
export function streamVectorFloats(length: number): number {
  return length + (kinds - 1) * skewFloats;
}

/**
 * A zeroed vector of `length` floats for stream kind `kind`, skewed apart from the other kinds', in
 * memory that `memory` makes (default: a plain Float32Array).
 */
export function streamVector(
  length: number,
  kind: number,
  memory: (floats: number) => Float32Array = (floats) => new Float32Array(floats),
): Float32Array {
  if (!Number.isInteger(kind) || kind < 0 || kind >= kinds)
    throw new RangeError(`streamVector: kind ${kind} is not one of 0..${kinds - 1}`);
  const skew = kind * skewFloats;
  let vector: Float32Array;
  try {
    vector = memory(streamVectorFloats(length));
  } catch (error) {
    // worded as the engine words it, for the length asked for (the slack is this module's business)
    if (error instanceof RangeError) throw new RangeError(`Invalid typed array length: ${length}`, { cause: error });
    throw error;
  }
  return vector.subarray(skew, skew + length);
}
