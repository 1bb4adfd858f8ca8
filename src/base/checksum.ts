// CRC-64 of byte ranges (ISA-L in the addon): checksums of checkpoint stripes and dataset record
// batches, verified on every read, at many GB/s. Whole files keep sha256 (manifests, --verify).
import { addonPart } from './addon';

const addon = addonPart<{
  /** CRC-64 (ECMA-182, reflected; ISA-L) of the bytes, chained from `previous`; 16 hex digits. */
  crc64(bytes: ArrayBufferView, previous?: string): string;
}>();

/** The CRC-64 of the pieces' bytes, one after the other. */
export function crc64(...pieces: ArrayBufferView[]): string {
  let crc: string | undefined;
  for (const piece of pieces) crc = addon.crc64(piece, crc);
  return crc ?? addon.crc64(new Uint8Array(0));
}
