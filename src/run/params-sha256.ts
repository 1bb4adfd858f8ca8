// summary.json's params_sha256: how a run's final parameters and buffers are hashed, for the
// trainer that reports it and for whoever recomputes it from a checkpoint's tensors.
import { createHash } from 'node:crypto';

/** sha256 of `parts`' bytes in order: the parameters, then the buffers (none for a net without batchnorm). */
export function paramsSha256(parts: readonly ArrayBufferView[]): string {
  const hash = createHash('sha256');
  for (const part of parts) hash.update(Buffer.from(part.buffer, part.byteOffset, part.byteLength));
  return hash.digest('hex');
}
