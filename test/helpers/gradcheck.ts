// Central finite differences against analytic gradients, and seeded test tensors.
import { strict as assert } from 'node:assert';
import { stream } from '../../src/base/random';

/** n values uniform in [-1, 1). */
export function randomTensor(n: number, seed: number): Float32Array {
  const next = stream(seed);
  return Float32Array.from({ length: n }, () => next() * 2 - 1);
}

/** sum_i y_i r_i in double: a scalar loss whose gradient with respect to y is r. */
export function dot(y: Float32Array, r: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < y.length; ++i) sum += y[i] * r[i];
  return sum;
}

/**
 * Checks analytic[i] against (loss(x + eps) - loss(x - eps)) / (the step actually taken in float32)
 * at `samples` indices spread over x (all of them if x is smaller).
 */
export function checkGradient(
  name: string,
  x: Float32Array,
  analytic: Float32Array,
  loss: () => number,
  { eps = 1e-2, tolerance = 1e-3, samples = 40 } = {},
): void {
  const stride = Math.max(1, Math.floor(x.length / samples));
  for (let i = 0; i < x.length; i += stride) {
    const original = x[i];
    x[i] = original + eps;
    const up = x[i];
    const lossUp = loss();
    x[i] = original - eps;
    const down = x[i];
    const lossDown = loss();
    x[i] = original;
    const numeric = (lossUp - lossDown) / (up - down);
    const error = Math.abs(numeric - analytic[i]);
    assert.ok(
      error <= tolerance * Math.max(1, Math.abs(numeric)),
      `${name}[${i}]: analytic ${analytic[i]} vs finite difference ${numeric}`,
    );
  }
}
