// Per-feature mean and standard deviation of a stream of rows, in float64 (Welford's update), for
// standardizing a dataset's features with its train split's statistics.
export class FeatureStats {
  count = 0;
  private readonly mean: Float64Array;
  private readonly m2: Float64Array;

  constructor(readonly size: number) {
    this.mean = new Float64Array(size);
    this.m2 = new Float64Array(size);
  }

  add(values: ArrayLike<number>): void {
    this.count += 1;
    for (let j = 0; j < this.size; ++j) {
      const delta = values[j] - this.mean[j];
      this.mean[j] += delta / this.count;
      this.m2[j] += delta * (values[j] - this.mean[j]);
    }
  }

  /** Means, and population standard deviations (a constant feature's is taken as 1, so it stays finite: 0). */
  result(): { mean: number[]; std: number[] } {
    const std = Array.from(this.m2, (m2) => Math.sqrt(m2 / Math.max(1, this.count)) || 1);
    return { mean: Array.from(this.mean), std };
  }
}
