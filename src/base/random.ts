// Counter-based randomness: every draw is a pure function of its keys (seed, layer, epoch, step,
// shard, index), never of the rank or of how many draws came before, so that any rank that
// recomputes a shard's micro-batch draws the same numbers.

/** A 32-bit hash of a list of non-negative integers (murmur3's finalizer over a running mix). */
export function hashKeys(...keys: number[]): number {
  let h = 0x9e3779b9;
  for (const key of keys) {
    h = Math.imul(h ^ (key >>> 0), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

/** Uniform in [0, 1) from the keys. */
export function uniform(...keys: number[]): number {
  return hashKeys(...keys) / 4294967296;
}

/** A seeded stream of uniforms in [0, 1) (mulberry32), for initialisers. */
export function stream(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
