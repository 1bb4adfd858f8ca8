// The median: the summary statistic robust to the odd slow run or step (the benchmarks' figures,
// and a rank's time per shard when slow ranks are looked for).
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}
