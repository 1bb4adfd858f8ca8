// One record batch of a dataset split, decoded straight from its checked bytes: arrow's Message
// parses the batch's flatbuffer metadata, and the features and labels are copied out of the body at
// the offsets it names. Going through arrow's file reader instead costs several awaits and copies
// per batch, which put most of a readback's time in decoding (3–8 ms for a retried step's 15
// batches, against well under 1 ms this way).
import { Message, MessageHeader } from 'apache-arrow';

/** Where a batch's features and labels lie within its block (the bytes the footer's block spans). */
export interface BatchLayout {
  rows: number;
  /** [rows, sampleSize] features (uint8 or little-endian float32): start within the block */
  features: number;
  /** [rows] little-endian int32 labels: start within the block */
  labels: number;
}

/**
 * Reads the layout of a record batch of the dataset schema (features: FixedSizeList[sampleSize] of
 * `valueBytes`-byte values, label: Int32, no nulls, no compression) from `block`, the batch's bytes as the footer's block
 * spans them: `metadataLength` bytes of prefix and flatbuffer metadata, then the body. Throws an
 * Error naming the problem when the metadata does not describe such a batch inside the block.
 */
export function batchLayout(block: Uint8Array, metadataLength: number, sampleSize: number, valueBytes: number): BatchLayout {
  if (metadataLength < 8 || metadataLength > block.length)
    throw new Error(`its metadata length ${metadataLength} does not fit its ${block.length} bytes`);
  const prefix = new DataView(block.buffer, block.byteOffset, 8);
  // a continuation marker (-1) and then the flatbuffer's length; pre-0.15 files have only the length
  const marked = prefix.getInt32(0, true) === -1;
  const flatbufferLength = prefix.getInt32(marked ? 4 : 0, true);
  const flatbufferStart = marked ? 8 : 4;
  if (flatbufferLength <= 0 || flatbufferStart + flatbufferLength > metadataLength)
    throw new Error(`its metadata claims ${flatbufferLength} bytes`);
  let message: Message;
  try {
    message = Message.decode(block.subarray(flatbufferStart, flatbufferStart + flatbufferLength));
  } catch (error) {
    throw new Error(`its metadata is not an Arrow message (${(error as Error).message})`, { cause: error });
  }
  if (message.headerType !== MessageHeader.RecordBatch) throw new Error(`it is not a record batch (message type ${message.headerType})`);
  const header = (message as Message<MessageHeader.RecordBatch>).header();
  if (header.compression) throw new Error('it is compressed');
  const rows = header.length;
  const bodyLength = block.length - metadataLength;
  if (message.bodyLength > bodyLength) throw new Error(`its body of ${message.bodyLength} bytes overruns its block`);
  // nodes: features, its value child, label; buffers: the validity of each node, then feature and label values
  const nodes = header.nodes;
  const expectedLengths = [rows, rows * sampleSize, rows];
  if (nodes.length !== 3 || nodes.some((node, i) => node.length !== expectedLengths[i]))
    throw new Error(`its columns are not ${rows} samples of ${sampleSize} values and ${rows} labels`);
  if (nodes.some((node) => node.nullCount !== 0)) throw new Error('it holds nulls');
  const buffers = header.buffers;
  if (buffers.length !== 5) throw new Error(`it has ${buffers.length} buffers, the schema has 5`);
  const features = buffers[2];
  const labels = buffers[4];
  const fits = (region: { offset: number; length: number }, bytes: number) =>
    region.length >= bytes && region.offset >= 0 && region.offset + bytes <= message.bodyLength;
  if (!fits(features, rows * sampleSize * valueBytes) || !fits(labels, rows * 4)) throw new Error('its buffers lie outside its body');
  return { rows, features: metadataLength + features.offset, labels: metadataLength + labels.offset };
}

/**
 * batchLayout() of a split's batches, decoded once per distinct metadata: a file's full batches
 * carry the same metadata byte for byte (the layout depends on nothing else but the block's length),
 * and arrow's decode of it cost more than the batch's read, checksum and copy together (16 batches
 * of Fashion-MNIST, a retried step's: 0.3-2.5 ms, against about 1 ms for the rest).
 */
export class BatchLayouts {
  private last?: { metadata: Buffer; blockLength: number; layout: BatchLayout };

  constructor(
    private readonly sampleSize: number,
    private readonly valueBytes: number,
  ) {}

  /** batchLayout(block, metadataLength, ...) for this split's sample size and value width. */
  of(block: Uint8Array, metadataLength: number): BatchLayout {
    const last = this.last;
    if (
      last &&
      last.blockLength === block.length &&
      last.metadata.length === metadataLength &&
      last.metadata.equals(block.subarray(0, metadataLength))
    )
      return last.layout;
    const layout = batchLayout(block, metadataLength, this.sampleSize, this.valueBytes);
    // a copy: the block's buffer is reused for the next read
    this.last = { metadata: Buffer.from(block.subarray(0, metadataLength)), blockLength: block.length, layout };
    return layout;
  }
}

/** Copies the batch in `block` (laid out as `layout` says) into `features` and `labels` from `row` on. */
export function copyBatch(
  block: Uint8Array,
  layout: BatchLayout,
  sampleSize: number,
  features: Uint8Array | Float32Array,
  labels: Int32Array,
  row: number,
): void {
  // byte-wise: the block need not be 4-aligned in memory (the host is little-endian, like the file)
  const bytes = (into: Uint8Array | Float32Array | Int32Array, first: number, count: number) =>
    new Uint8Array(into.buffer, into.byteOffset + first * into.BYTES_PER_ELEMENT, count * into.BYTES_PER_ELEMENT);
  const featureBytes = layout.rows * sampleSize * features.BYTES_PER_ELEMENT;
  bytes(features, row * sampleSize, layout.rows * sampleSize).set(block.subarray(layout.features, layout.features + featureBytes));
  bytes(labels, row, layout.rows).set(block.subarray(layout.labels, layout.labels + layout.rows * 4));
}
