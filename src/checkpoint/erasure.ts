// Reed-Solomon erasure coding of checkpoint state (ISA-L in the addon): the raw bytes of Float32
// buffers, no serialization. k data fragments and m parity fragments, k + m <= 255; any k of them
// rebuild the others bit for bit. Fragment i < k is data fragment i, fragment k + j is parity row j.
import { addonPart } from '../base/addon';

const addon = addonPart<{
  /**
   * Reed-Solomon erasure coding (ISA-L, Cauchy matrix) over the raw bytes of the views: k data
   * fragments and m parity fragments (k + m <= 255), any k of which rebuild the others. Fragment i
   * < k is data fragment i, fragment k + j is parity row j. Every view holds the same number of
   * bytes; outputs overlap no other view. Synchronous, on the calling thread.
   */
  ec: {
    /** Writes parity rows `rows` (default 0 .. m-1; distinct, in [0, m)) of the k `data` fragments into `parity`, one per row. */
    encode(k: number, m: number, data: ArrayBufferView[], parity: ArrayBufferView[], rows?: number[]): void;
    /** Rebuilds fragments `wanted` (distinct, in [0, k + m)) into `outputs` from the k `fragments` numbered `present`. */
    decode(k: number, m: number, present: number[], fragments: ArrayBufferView[], wanted: number[], outputs: ArrayBufferView[]): void;
  };
}>();

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
export function ecDecode(
  k: number,
  m: number,
  present: number[],
  fragments: ArrayBufferView[],
  wanted: number[],
  outputs: ArrayBufferView[],
): void {
  addon.ec.decode(k, m, present, fragments, wanted, outputs);
}
