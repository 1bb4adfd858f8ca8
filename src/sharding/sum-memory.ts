// Memory for the shard-ordered sums a job builds, one per world. A recovery's new sum is built on
// the retried step's path, and buffers allocated then are fresh pages that the kernel maps on their
// first write, during that step: at 4 ranks of lenet on 2 cores, about 5 ms of a 20 ms retry. So a
// replaced sum's buffers come back here for the next sum to take, and at a step's end after the world
// changed, blocks for what a recovery from it would take are made and their pages mapped beside
// training (mappedMemory).
import { mappedMemory } from '../base/mapped-memory';

/** Above this, the blocks kept ready are not worth their memory: a model this large recomputes a lost shard for far longer. */
export const reserveBelowBytes = 256 << 20;

export class SumMemory {
  /** blocks whose pages are mapped (or being mapped): each a whole buffer, lent out at most once */
  private free: ArrayBuffer[] = [];

  /** The bytes of the free blocks. */
  get freeBytes(): number {
    return this.free.reduce((n, block) => n + block.byteLength, 0);
  }

  /** A zeroed vector of `floats`: in the smallest free block that holds it, else in new memory. */
  take(floats: number): Float32Array {
    const block = this.takeBlock(floats);
    return block ? new Float32Array(block, 0, floats).fill(0) : new Float32Array(floats);
  }

  /** `vectors` are no longer used: their blocks are free (a block given twice counts once). */
  give(vectors: Float32Array[]): void {
    for (const { buffer } of vectors) if (buffer instanceof ArrayBuffer && !this.free.includes(buffer)) this.free.push(buffer);
  }

  /**
   * Makes the free blocks fit `sizes` (in floats): each size gets the smallest free block that
   * holds it, or a new one whose pages are mapped now; the blocks no size needs are let go. None at all
   * where they would come to reserveBelowBytes or more.
   */
  reserve(sizes: number[]): void {
    const bytes = sizes.reduce((n, floats) => n + floats, 0) * Float32Array.BYTES_PER_ELEMENT;
    const kept: ArrayBuffer[] = [];
    if (bytes < reserveBelowBytes) {
      for (const floats of [...sizes].sort((a, b) => b - a)) {
        // a new block's pages are mapped now, beside training, rather than on a recovery's path
        kept.push(this.takeBlock(floats) ?? mappedMemory(floats * Float32Array.BYTES_PER_ELEMENT, false));
      }
    }
    this.free = kept;
  }

  /** The smallest free block of at least `floats`, no longer free. */
  private takeBlock(floats: number): ArrayBuffer | undefined {
    const bytes = floats * Float32Array.BYTES_PER_ELEMENT;
    let best = -1;
    this.free.forEach((block, i) => {
      if (block.byteLength >= bytes && (best < 0 || block.byteLength < this.free[best].byteLength)) best = i;
    });
    return best < 0 ? undefined : this.free.splice(best, 1)[0];
  }
}
