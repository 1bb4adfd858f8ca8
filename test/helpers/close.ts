// Float32Arrays compared with a tolerance: another backend's results against a reference computed
// in another order (the GPU's kernels against the CPU's, a net on the GPU's memory model against the
// CPU net).
import { strict as assert } from 'node:assert';

/** Every value of `got` within tolerance x the largest magnitude of `want` (which must not be all zero). */
export function assertClose(name: string, got: Float32Array, want: Float32Array, tolerance: number): void {
  assert.equal(got.length, want.length, `${name}: length`);
  let largest = 0;
  for (const v of want) largest = Math.max(largest, Math.abs(v));
  assert.ok(largest > 0, `${name}: the reference is all zero`);
  for (let i = 0; i < want.length; ++i) {
    assert.ok(
      Math.abs(got[i] - want[i]) <= tolerance * largest,
      `${name}[${i}]: ${got[i]} against the reference's ${want[i]} (largest ${largest})`,
    );
  }
}
