// Child of test/unit/dataset.test.ts: a fresh process, as a rank is, reads the whole train split of
// the dataset at argv[2] as one shard and prints one JSON line: the shard's feature bytes and how
// many bytes of anonymous memory came onto huge pages meanwhile (/proc/self/smaps_rollup).
import * as fs from 'node:fs';
import { Dataset } from '../../src/data/dataset';

const hugeBytes = (): number => 1024 * Number(/AnonHugePages:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/smaps_rollup', 'utf8'))![1]);

async function main(): Promise<void> {
  const dataset = await Dataset.open(process.argv[2]);
  const before = hugeBytes();
  const shard = (await dataset.train.readShards(dataset.train.layout(1), [0])).get(0)!;
  console.log(JSON.stringify({ bytes: shard.features.byteLength, huge: hugeBytes() - before }));
  await dataset.close();
}

void main();
