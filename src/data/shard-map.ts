// Which rank holds which logical shard. Ranks are world ranks (stable across shrinks). The map is a
// pure function of the live-rank list and the history of losses, so every survivor computes the same
// one without talking: at start, contiguous blocks of shards per rank in rank order; after a loss,
// the lost ranks' shards go, lowest shard first, each to the live rank holding the fewest shards,
// whether it held any before or not (ties: lowest rank). Survivors keep their own shards, so only the
// lost shards are read back, and the per-rank shard counts stay within one of each other. Ranks
// that join (spares, respawned ranks) take a lost rank's shards whole, lowest lost rank first; where
// no lost rank's place is left (a rank spawned after the loss joins later), they take shards one at
// a time from the ranks holding the most. A rebalance (slow ranks) sets how many shards each rank
// holds: ranks above their new count give up their highest shards, which go, lowest first, to the
// ranks below theirs, in rank order.

export class ShardMap {
  /** owners[s] = world rank holding shard s */
  private constructor(readonly owners: readonly number[]) {}

  /** S shards over the live ranks: rank i (in ascending order) gets shards [iS/N, (i+1)S/N). */
  static initial(shards: number, liveRanks: readonly number[]): ShardMap {
    const ranks = uniqueSorted(liveRanks);
    if (ranks.length === 0) throw new RangeError('ShardMap.initial: expected at least one live rank');
    if (!Number.isSafeInteger(shards) || shards < 1) throw new RangeError(`ShardMap.initial: expected shards >= 1, got ${shards}`);
    return new ShardMap(Array.from({ length: shards }, (_, s) => ranks[Math.floor((s * ranks.length) / shards)]));
  }

  /** A map saved with toJSON(). */
  static fromOwners(owners: readonly number[]): ShardMap {
    if (owners.length === 0 || !owners.every((r) => Number.isSafeInteger(r) && r >= 0)) {
      throw new RangeError(`ShardMap.fromOwners: expected a non-empty list of ranks, got ${JSON.stringify(owners)}`);
    }
    return new ShardMap([...owners]);
  }

  get shardCount(): number {
    return this.owners.length;
  }

  /** The ranks holding at least one shard, ascending. */
  get ranks(): number[] {
    return uniqueSorted(this.owners);
  }

  owner(shard: number): number {
    if (!(shard >= 0 && shard < this.owners.length))
      throw new RangeError(`owner: expected a shard in [0, ${this.owners.length}), got ${shard}`);
    return this.owners[shard];
  }

  /** The shards rank holds, ascending. */
  shardsOf(rank: number): number[] {
    const held: number[] = [];
    this.owners.forEach((owner, s) => owner === rank && held.push(s));
    return held;
  }

  /**
   * The map after losing `lost`, with `live` the ranks left (every survivor passes the same list):
   * each lost shard goes to the least-loaded live rank. Throws if no rank is left, or if a shard's
   * owner is in neither list (the lists do not describe this map).
   */
  without(lost: readonly number[], live: readonly number[]): ShardMap {
    const gone = new Set(lost);
    const survivors = uniqueSorted(live);
    if (survivors.some((r) => gone.has(r)))
      throw new RangeError(`without: ranks ${JSON.stringify(survivors.filter((r) => gone.has(r)))} are both lost and live`);
    if (survivors.length === 0)
      throw new RangeError(`without: losing ranks ${JSON.stringify([...gone])} leaves no rank to hold the shards`);
    const stray = this.ranks.filter((r) => !gone.has(r) && !survivors.includes(r));
    if (stray.length > 0) throw new RangeError(`without: ranks ${JSON.stringify(stray)} hold shards but are neither lost nor live`);
    const load = new Map(survivors.map((r) => [r, this.shardsOf(r).length]));
    const owners = this.owners.map((owner) => {
      if (!gone.has(owner)) return owner;
      let target = survivors[0];
      for (const r of survivors) if (load.get(r)! < load.get(target)!) target = r;
      load.set(target, load.get(target)! + 1);
      return target;
    });
    return new ShardMap(owners);
  }

  /**
   * The map once the owners missing from `live` are replaced: the lost owners, ascending, hand
   * their shards whole to `joiners` (ranks in `live` holding none), in order, while joiners last;
   * the shards of the others go as in without().
   */
  handOver(live: readonly number[], joiners: readonly number[]): ShardMap {
    const alive = new Set(live);
    const lost = this.ranks.filter((r) => !alive.has(r));
    const taken = joiners.filter((r) => this.owners.includes(r) || !alive.has(r));
    if (taken.length > 0) throw new RangeError(`handOver: joiners ${JSON.stringify(taken)} hold shards already or are not live`);
    const heir = new Map(lost.slice(0, joiners.length).map((r, i) => [r, joiners[i]]));
    const replaced = new ShardMap(this.owners.map((owner) => heir.get(owner) ?? owner));
    const workers = uniqueSorted([...replaced.ranks.filter((r) => alive.has(r)), ...joiners.slice(0, lost.length)]);
    return replaced.without(lost.slice(joiners.length), workers).sharedWith(joiners.slice(lost.length));
  }

  /**
   * The map once `joiners` (holding none), with no lost rank's place to take, share the others'
   * shards: in turn, each takes the highest shard of the rank holding the most (ties: the highest
   * rank) while that rank holds more than the joiner will. A joiner left without any holds none.
   */
  private sharedWith(joiners: readonly number[]): ShardMap {
    const owners = [...this.owners];
    const held = (rank: number): number => owners.filter((owner) => owner === rank).length;
    for (let given = 0; ; given = 0) {
      for (const joiner of joiners) {
        const ranks = uniqueSorted(owners);
        const richest = ranks.reduce((best, r) => (held(r) >= held(best) ? r : best), ranks[0]);
        if (held(richest) <= held(joiner) + 1) continue;
        owners[owners.lastIndexOf(richest)] = joiner;
        given += 1;
      }
      if (given === 0) return new ShardMap(owners);
    }
  }

  /** How many shards each rank holding any holds, by rank (ascending). */
  counts(): Map<number, number> {
    return new Map(this.ranks.map((r) => [r, this.shardsOf(r).length]));
  }

  /**
   * The map with `counts` shards on each rank (the same ranks as this map's, at least one each,
   * summing to the shard count), moving as few shards as possible: each rank keeps its lowest
   * shards up to its count; the rest go, lowest first, to the ranks short of theirs, in rank order.
   */
  withCounts(counts: ReadonlyMap<number, number>): ShardMap {
    const ranks = this.ranks;
    const given = [...counts.keys()].sort((a, b) => a - b);
    const total = [...counts.values()].reduce((a, b) => a + b, 0);
    if (given.join() !== ranks.join() || total !== this.shardCount || [...counts.values()].some((n) => !Number.isSafeInteger(n) || n < 1))
      throw new RangeError(
        `withCounts: expected a count >= 1 for each of ranks ${JSON.stringify(ranks)} summing to ${this.shardCount}, got ${JSON.stringify([...counts])}`,
      );
    const owners = [...this.owners];
    const freed: number[] = [];
    for (const r of ranks) freed.push(...this.shardsOf(r).slice(counts.get(r)));
    freed.sort((a, b) => a - b);
    for (const r of ranks) for (let n = this.shardsOf(r).length; n < counts.get(r)!; ++n) owners[freed.shift()!] = r;
    return new ShardMap(owners);
  }

  /** The shards whose owner differs in `next`, grouped by their new owner. */
  movedTo(next: ShardMap): Map<number, number[]> {
    const moved = new Map<number, number[]>();
    next.owners.forEach((owner, s) => {
      if (owner !== this.owners[s]) moved.set(owner, [...(moved.get(owner) ?? []), s]);
    });
    return moved;
  }

  toJSON(): number[] {
    return [...this.owners];
  }
}

function uniqueSorted(ranks: readonly number[]): number[] {
  return [...new Set(ranks)].sort((a, b) => a - b);
}
