// What a recovery must read back from the dataset, worked out from the dataset's layout: the tests
// compare it with what the runs report.
import { Dataset } from '../../src/data/dataset';
import { MicroBatches } from '../../src/data/micro-batches';

/**
 * What reading back `lost` (of S shards) takes from disk (in ft-train's default setup, --batch 64,
 * seed 1): all of their record batches, each once, and, before step `retried` is retried, only
 * the batches holding that step's rows of them.
 */
export async function readbackBytes(S: number, lost: number[], retried: number): Promise<{ total: number; beforeRetry: number }> {
  const dataset = await Dataset.open('datasets/fashion-mnist');
  const layout = dataset.train.layout(S);
  const plan = new MicroBatches(layout, 64, 1);
  let [total, beforeRetry] = [0, 0];
  for (const s of lost) {
    total += dataset.train.shardBytes(layout, s);
    const rows = plan.rows(s, Math.floor(retried / plan.stepsPerEpoch), retried % plan.stepsPerEpoch);
    for (const b of new Set(Array.from(rows, (row) => layout.batchOf(s, row)))) beforeRetry += dataset.train.batchBytes(b, b + 1);
  }
  await dataset.close();
  return { total, beforeRetry };
}
