// Seeded initialisers.

/** Caffe's "xavier" filler: uniform in [-a, a] with a = sqrt(3 / fanIn). */
export function xavier(values: Float32Array, fanIn: number, next: () => number): void {
  const a = Math.sqrt(3 / fanIn);
  for (let i = 0; i < values.length; ++i) values[i] = (next() * 2 - 1) * a;
}

/** GPT-2's embedding filler: normal with mean 0 and deviation `std` (Box-Muller over the stream's pairs). */
export function normal(values: Float32Array, std: number, next: () => number): void {
  for (let i = 0; i < values.length; ++i) {
    values[i] = std * Math.sqrt(-2 * Math.log(1 - next())) * Math.cos(2 * Math.PI * next());
  }
}
