// Reed-Solomon erasure coding of checkpoint state (ISA-L in the addon): the raw bytes of Float32
// buffers, no serialization. k data fragments and m parity fragments, k + m <= 255; any k of them
// rebuild the others bit for bit. Fragment i < k is data fragment i, fragment k + j is parity row j.
import { addon } from '../base/addon';

/**
 * Writes parity rows `rows` (default all m, in order) of the k equal-length `data` fragments into
 * `parity`, one view per row, each as long as a data fragment.
 */
export function ecEncode(k: number, m: number, data: ArrayBufferView[], parity: ArrayBufferView[], rows?: number[]): void {
  addon.ec.encode(k, m, data, parity, rows);
}

/**
 * Rebuilds the fragments numbered `wanted` (data or parity) into `outputs` from k fragments, the
 * views `fragments` numbered `present`.
 */
export function ecDecode(k: number, m: number, present: number[], fragments: ArrayBufferView[], wanted: number[], outputs: ArrayBufferView[]): void {
  addon.ec.decode(k, m, present, fragments, wanted, outputs);
}
