// Memory made ready for a later first write, beside training: a recovery's sum blocks and the room
// for shards it would take over (see binding/src/data/pages.cc). Fresh zero pages of their own,
// mapped on libuv's pool without being written where the kernel can, so the JS thread goes on at
// once and may use the memory meanwhile; elsewhere the JS thread writes them through, as before.
import { addonPart } from './addon';

const addon = addonPart<{
  canPopulate(): boolean;
  mapMemory(bytes: number, hugePages: boolean): { memory: ArrayBuffer; mapped: Promise<boolean> };
}>();

/** the mappings under way, so that a caller can wait for them all (mappedAll) */
const underWay = new Set<Promise<unknown>>();

/**
 * `bytes` of zeros whose pages get mapped now (huge pages asked first where `hugePages`). A
 * mapping that fails on the pool (the kernel short of memory) leaves the pages to their first write.
 */
export function mappedMemory(bytes: number, hugePages: boolean): ArrayBuffer {
  const { memory, mapped } = addon.mapMemory(bytes, hugePages);
  // never written on a later turn: by then the caller may have written into it
  if (!addon.canPopulate()) new Uint8Array(memory).fill(0);
  const done = mapped.finally(() => underWay.delete(done));
  underWay.add(done);
  return memory;
}

/** Resolves once every mapping begun so far has ended (for tests and measurements). */
export async function mappedAll(): Promise<void> {
  await Promise.all([...underWay]);
}
