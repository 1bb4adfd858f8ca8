// One split (train or test) of a dataset: an Arrow IPC file read with random access through its
// footer. Opening verifies the size and the footer; reading shards loads only their record batches
// (one contiguous read per shard, or per run of batches for a readback that loads them on demand),
// checks each batch's CRC-64 against the manifest, then decodes it (record-batch.ts).
import type { FileHandle } from 'node:fs/promises';
import { constants as bufferConstants } from 'node:buffer';
import * as path from 'node:path';
import { AsyncRecordBatchFileReader, RecordBatchReader } from 'apache-arrow';
import { DatasetError } from './errors';
import { expectedSchema, sampleSize, type FeatureType, type Manifest, type SplitEntry } from './manifest';
import { BatchLayouts, copyBatch } from './record-batch';
import { ShardLayout } from './shard-layout';
import { crc64 } from '../base/checksum';
import { addonPart } from '../base/addon';
import { mappedMemory } from '../base/mapped-memory';
import { sha256, VerifiedFile } from './verified-file';

const addon = addonPart<{
  /** `features`, not yet written, will be gathered by random rows: backed by huge pages where the kernel allows. Whether the advice was taken. */
  adviseRandomRows(features: ArrayBufferView): boolean;
}>();

/** Samples of one shard (or of a whole split), decoded. */
export interface ShardData {
  shard: number;
  rows: number;
  sampleSize: number;
  /** [rows, ...sampleShape] stored values (uint8 or float32) */
  features: Uint8Array | Float32Array;
  /** what each stored value is divided by to give the model's input (255 for pixels) */
  divisor: number;
  /** [rows] */
  labels: Int32Array;
}

interface Block {
  offset: number;
  length: number;
  /** the prefix and flatbuffer metadata ahead of the body */
  metadataLength: number;
}

/** The largest blocking read served from the kept buffer (a retried step's batches take far less). */
const scratchMaxBytes = 1 << 20;

export class Split {
  private readonly layouts: BatchLayouts;
  /**
   * the blocking reads' buffer, made and written through once: each read's bytes are decoded
   * before the next, and a buffer new at a readback had its pages faulted in on the recovery's path
   */
  private readonly scratch: Buffer<ArrayBuffer> = Buffer.allocUnsafeSlow(scratchMaxBytes).fill(0);

  private constructor(
    readonly name: string,
    private readonly entry: SplitEntry,
    private readonly file: VerifiedFile,
    private readonly blocks: Block[],
    readonly sampleSize: number,
    private readonly dtype: FeatureType,
    private readonly divisor: number,
    private readonly classes: number,
  ) {
    this.layouts = new BatchLayouts(sampleSize, dtype === 'float32' ? 4 : 1);
  }

  /** Opens `dir/` the split's file: size against the manifest, footer checksum, schema, batch table. */
  static async open(dir: string, name: string, manifest: Manifest, entry: SplitEntry): Promise<Split> {
    const filePath = path.join(dir, entry.file);
    const file = await VerifiedFile.open(filePath);
    try {
      if (file.size < entry.bytes) throw new DatasetError(filePath, `truncated: ${file.size} bytes, the manifest says ${entry.bytes}`);
      if (file.size > entry.bytes) throw new DatasetError(filePath, `corrupt: ${file.size} bytes, the manifest says ${entry.bytes}`);
      const tail = await file.load(entry.tail.offset, entry.bytes - entry.tail.offset);
      if (crc64(tail) !== entry.tail.crc64) throw new DatasetError(filePath, 'corrupt: its footer fails the manifest checksum');
      file.keep(entry.tail.offset, tail);
      let reader: RecordBatchReader;
      try {
        // apache-arrow needs only fd, stat and read of a FileHandle
        reader = await RecordBatchReader.from(file as unknown as FileHandle);
        await reader.open();
      } catch (error) {
        throw new DatasetError(filePath, `corrupt: not a readable Arrow IPC file (${(error as Error).message})`);
      }
      if (!(reader instanceof AsyncRecordBatchFileReader))
        throw new DatasetError(filePath, 'corrupt: not an Arrow IPC file (no file magic)');
      const expected = expectedSchema(manifest.format, manifest.sample_shape, manifest.dtype);
      const got = Object.fromEntries(reader.schema.fields.map((f) => [f.name, String(f.type)]));
      if (JSON.stringify(got) !== JSON.stringify(expected)) {
        throw new DatasetError(filePath, `wrong schema: expected ${describe(expected)}, got ${describe(got)}`);
      }
      const blocks = Split.blockTable(filePath, reader, entry);
      return new Split(name, entry, file, blocks, sampleSize(manifest.sample_shape), manifest.dtype, manifest.divisor, manifest.classes);
    } catch (error) {
      await file.close();
      throw error;
    }
  }

  private static blockTable(filePath: string, reader: AsyncRecordBatchFileReader, entry: SplitEntry): Block[] {
    const footer = reader.footer!;
    if (footer.numRecordBatches !== entry.record_batches.length) {
      throw new DatasetError(
        filePath,
        `corrupt: ${footer.numRecordBatches} record batches, the manifest says ${entry.record_batches.length}`,
      );
    }
    let end = 0;
    return entry.record_batches.map((_, i) => {
      const block = footer.getRecordBatch(i)!;
      const offset = Number(block.offset);
      const length = block.metaDataLength + Number(block.bodyLength);
      if (offset < end || offset + length > entry.tail.offset)
        throw new DatasetError(filePath, `corrupt: record batch ${i} lies outside the data area`);
      end = offset + length;
      return { offset, length, metadataLength: block.metaDataLength };
    });
  }

  get path(): string {
    return this.file.path;
  }

  get rows(): number {
    return this.entry.rows;
  }

  /** The file's size in bytes. */
  get bytes(): number {
    return this.entry.bytes;
  }

  get recordBatchRows(): number[] {
    return this.entry.record_batches.map((b) => b.rows);
  }

  /** The largest record batch's block in bytes. */
  get largestBatchBytes(): number {
    return Math.max(...this.blocks.map((b) => b.length));
  }

  /** Bytes read from disk since open (footer included). */
  get bytesRead(): number {
    return this.file.bytesRead;
  }

  /** S logical shards over this split's record batches. */
  layout(shards: number): ShardLayout {
    return new ShardLayout(this.recordBatchRows, shards, this.path);
  }

  /** Bytes of shard s's record batches: what reading it takes from disk. */
  shardBytes(layout: ShardLayout, shard: number): number {
    const { first, end } = layout.batches(shard);
    return this.batchBytes(first, end);
  }

  /** Bytes of record batches [first, end). */
  batchBytes(first: number, end: number): number {
    return this.span(first, end).length;
  }

  /** The bytes record batches [first, end) occupy: one contiguous range of the file. */
  private span(first: number, end: number): { start: number; length: number } {
    const start = this.blocks[first].offset;
    return { start, length: this.blocks[end - 1].offset + this.blocks[end - 1].length - start };
  }

  /** Loads only the given shards' record batches. */
  async readShards(layout: ShardLayout, shards: readonly number[]): Promise<Map<number, ShardData>> {
    this.checkLayout(layout);
    const loaded = new Map<number, ShardData>();
    for (const s of shards) {
      const data = this.emptyShard(s, layout.rows(s));
      const { first, end } = layout.batches(s);
      await this.loadInto(first, end, data, 0);
      loaded.set(s, data);
    }
    return loaded;
  }

  /** The whole split as one piece (shard -1). */
  readAll(): Promise<ShardData> {
    return this.readFirst(this.rows);
  }

  /** The split's first `rows` samples as one piece (shard -1): only the record batches holding them are read. */
  async readFirst(rows: number): Promise<ShardData> {
    if (!(Number.isSafeInteger(rows) && rows >= 0 && rows <= this.rows))
      throw new RangeError(`${this.path}: expected 0 to ${this.rows} rows to read, got ${rows}`);
    const batchRows = this.recordBatchRows;
    let end = 0;
    let covered = 0;
    while (covered < rows) covered += batchRows[end++];
    const data = this.emptyShard(-1, covered);
    if (end > 0) await this.loadInto(0, end, data, 0);
    return covered === rows
      ? data
      : { ...data, rows, features: data.features.subarray(0, rows * this.sampleSize), labels: data.labels.subarray(0, rows) };
  }

  /** Hashes the whole file against the manifest (reads it all). */
  async verify(): Promise<void> {
    const bytes = await this.file.load(0, this.entry.bytes);
    if (sha256(bytes) !== this.entry.sha256) throw new DatasetError(this.path, 'corrupt: the file fails the manifest checksum');
  }

  async close(): Promise<void> {
    await this.file.close();
  }

  /** Throws unless `layout` was made over this split's record batches. */
  checkLayout(layout: ShardLayout): void {
    if (layout.batchRows.length !== this.blocks.length) throw new RangeError(`the shard layout is not one of ${this.path}`);
  }

  /** The bytes of `rows` samples' features in memory. */
  featureBytes(rows: number): number {
    return rows * this.sampleSize * (this.dtype === 'float32' ? 4 : 1);
  }

  /**
   * Room for `rows` samples of shard `shard`, filled by loadInto: `kept` where given (memory
   * mapped beforehand, of at least featureBytes(rows)), else new. Each step gathers rows
   * from anywhere in it, so huge pages are asked for before it is filled (gather.cc); with
   * `hugePages: 'once-filled'` the caller asks later, through adviseFilled().
   */
  emptyShard(shard: number, rows: number, hugePages: 'now' | 'once-filled' = 'now', kept?: ArrayBuffer): ShardData {
    const size = rows * this.sampleSize;
    // not zeroed: loadInto writes every row before it is read (a shard read back waits in ready()),
    // and zeroing a shard's megabytes would be most of a readback's time on the recovery's path
    // (a Buffer holds at most 4 GiB: a larger shard is zeroed)
    const bytes = this.featureBytes(rows);
    const room = kept ?? (bytes <= bufferConstants.MAX_LENGTH ? Buffer.allocUnsafeSlow(bytes).buffer : new ArrayBuffer(bytes));
    const features = this.dtype === 'float32' ? new Float32Array(room, 0, size) : new Uint8Array(room, 0, size);
    if (hugePages === 'now') addon.adviseRandomRows(features);
    return { shard, rows, sampleSize: this.sampleSize, features, divisor: this.divisor, labels: new Int32Array(rows) };
  }

  /**
   * Memory of `bytes` for a shard read later (emptyShard's `kept`), its pages mapped now, beside
   * training (mappedMemory), rather than when the shard is decoded into it. Huge pages are asked
   * first, as the shard will want them: the mapping may wait for the kernel to compact memory, and
   * a rank killed while holding it is torn down in a few large pages rather than many small.
   */
  mappedRoom(bytes: number): ArrayBuffer {
    return mappedMemory(bytes, true);
  }

  /** Huge pages for a shard made with emptyShard(..., 'once-filled'), now that it is filled (the kernel merges its pages in the background). */
  adviseFilled(data: ShardData): void {
    addon.adviseRandomRows(data.features);
  }

  /**
   * Reads record batches [first, end) in one contiguous read, checks each against the manifest's
   * checksum, then decodes them into `into` from row `row` on. Resolves to the bytes this read took
   * from disk. The disk reads of several calls overlap, unless `now`: then the read blocks (for
   * data the caller can only wait for).
   */
  async loadInto(first: number, end: number, into: ShardData, row: number, now = false): Promise<number> {
    const { start, length } = this.span(first, end);
    const bytes = now ? this.file.loadNow(start, length, this.scratchFor(length)) : await this.file.load(start, length);
    this.decodeInto(first, end, start, bytes, into, row);
    return bytes.length;
  }

  /** A buffer of at least `length` bytes for a blocking read, decoded before the next: the kept one up to scratchMaxBytes. */
  private scratchFor(length: number): Buffer<ArrayBuffer> | undefined {
    return length > scratchMaxBytes ? undefined : this.scratch;
  }

  /** Checks record batches [first, end), read from `start` on as `bytes`, and decodes them into `into` from `row` on. */
  private decodeInto(first: number, end: number, start: number, bytes: Buffer, into: ShardData, row: number): void {
    const blocks = this.blocks.slice(first, end).map(({ offset, length }) => bytes.subarray(offset - start, offset - start + length));
    for (let i = first; i < end; ++i) {
      if (crc64(blocks[i - first]) !== this.entry.record_batches[i].crc64) {
        throw new DatasetError(this.path, `corrupt: record batch ${i} fails the manifest checksum`);
      }
    }
    for (let i = first; i < end; ++i) {
      const block = blocks[i - first];
      let layout;
      try {
        layout = this.layouts.of(block, this.blocks[i].metadataLength);
      } catch (error) {
        throw new DatasetError(this.path, `corrupt: record batch ${i}: ${(error as Error).message}`);
      }
      const expectedRows = this.entry.record_batches[i].rows;
      if (layout.rows !== expectedRows)
        throw new DatasetError(this.path, `corrupt: record batch ${i} has ${layout.rows} rows, the manifest says ${expectedRows}`);
      copyBatch(block, layout, this.sampleSize, into.features, into.labels, row);
      const labels = into.labels.subarray(row, row + layout.rows);
      const bad = labels.find((label) => !(label >= 0 && label < this.classes));
      if (bad !== undefined)
        throw new DatasetError(this.path, `corrupt: record batch ${i} holds label ${bad}, outside [0, ${this.classes})`);
      row += layout.rows;
    }
  }
}

function describe(schema: Record<string, string>): string {
  return Object.entries(schema)
    .map(([name, type]) => `${name}: ${type}`)
    .join(', ');
}
