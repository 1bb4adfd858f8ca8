// Seeded initialisers.

/** Caffe's "xavier" filler: uniform in [-a, a] with a = sqrt(3 / fanIn). */
export function xavier(values: Float32Array, fanIn: number, next: () => number): void {
  const a = Math.sqrt(3 / fanIn);
  for (let i = 0; i < values.length; ++i) values[i] = (next() * 2 - 1) * a;
}
