// How a vector of `length` elements is cut among n ranks: chunk c is [bounds[c], bounds[c+1]), the
// same cut for the shard-ordered sum's reduce-scatter, the sharded optimizer state and the
// checkpoint's stripes, so that a rank writes exactly the state it holds.
export function chunkBounds(length: number, n: number): number[] {
  return Array.from({ length: n + 1 }, (_, c) => Math.floor((c * length) / n));
}

/**
 * The parameters of each chunk of the step's sum, [gradient (P) | loss]: chunk c holds parameters
 * [bounds[c], bounds[c+1]) (the last chunk's loss element is not a parameter).
 */
export function parameterChunks(P: number, n: number): number[] {
  return chunkBounds(P + 1, n).map((b) => Math.min(b, P));
}
