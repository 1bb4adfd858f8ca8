// The safetensors format (8-byte little-endian header length, JSON header, raw little-endian
// tensor bytes), float32 only: final models and checkpoints that other frameworks can load.

export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/** Name and shape of a float32 tensor, without its data. */
export interface TensorInfo {
  name: string;
  shape: number[];
}

/** The bytes before the data: 8-byte header length and the JSON header (padded to 8 bytes). */
export function safetensorsHeader(tensors: readonly TensorInfo[], metadata: Record<string, string> = {}): Buffer {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of tensors) {
    const bytes = 4 * t.shape.reduce((a, b) => a * b, 1);
    header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8); // data starts 8-byte aligned
  const out = Buffer.alloc(8 + Buffer.byteLength(json));
  out.writeBigUInt64LE(BigInt(out.length - 8), 0);
  out.write(json, 8);
  return out;
}

export function encodeSafetensors(tensors: readonly NamedTensor[], metadata: Record<string, string> = {}): Buffer {
  const header = safetensorsHeader(tensors, metadata);
  return Buffer.concat([header, ...tensors.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength))]);
}

/** Parses a float32 safetensors buffer; throws one line naming `file` on any inconsistency. */
export function decodeSafetensors(bytes: Buffer, file: string): { tensors: NamedTensor[]; metadata: Record<string, string> } {
  const fail = (problem: string): never => {
    throw new Error(`${file}: not a valid safetensors file: ${problem}`);
  };
  if (bytes.length < 8) fail('shorter than its 8-byte header length');
  const headerLength = Number(bytes.readBigUInt64LE(0));
  if (8 + headerLength > bytes.length) fail(`header of ${headerLength} bytes runs past the end (${bytes.length} bytes)`);
  let header: Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  try {
    header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8'));
  } catch (error) {
    return fail(`header is not JSON (${(error as Error).message})`);
  }
  const dataStart = 8 + headerLength;
  const metadata = (header.__metadata__ ?? {}) as unknown as Record<string, string>;
  const tensors: NamedTensor[] = [];
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (entry.dtype !== 'F32') fail(`tensor ${name} has dtype ${entry.dtype}, expected F32`);
    const [begin, end] = entry.data_offsets;
    const count = entry.shape.reduce((a, b) => a * b, 1);
    if (end - begin !== count * 4 || dataStart + end > bytes.length)
      fail(`tensor ${name} has offsets [${begin}, ${end}] for shape [${entry.shape}] in ${bytes.length} bytes`);
    const data = new Float32Array(count);
    Buffer.from(data.buffer).set(bytes.subarray(dataStart + begin, dataStart + end));
    tensors.push({ name, shape: entry.shape, data });
  }
  return { tensors, metadata };
}
