// Silent data corruption caught by equality: the result of every step is bit-exact whoever computes
// it, so two ranks computing the same thing must produce the same bits. Every --verify-every K steps
// the live ranks compare a 64-bit digest of the state they all hold alike (parameters, replicated
// optimizer state, buffers), and each working rank recomputes one shard another rank computed in
// that step (rotating, so that every working rank is checked at every check) and compares the
// gradients' digests. A rank whose state differs from the majority's is suspect; a gradient that
// differs is recomputed by a third rank, whose bits name the culprit. With no majority, or no third
// rank, nobody can be named. This file decides, alike on every rank from the same gathered digests,
// and keeps the state of the last step that passed a check, for the rollback (the Manager runs it).
import type { TrainingState } from '../checkpoint/checkpoint';
import { crc64 } from '../base/checksum';
import type { ShardMap } from '../data/shard-map';

/** What a confirmed corruption does: evict the suspect and repair, or stop the job. */
export type OnCorruption = 'evict' | 'stop';

/** A CRC-64 as two 32-bit halves, how it travels in an Int32Array (16 hex digits in and out). */
export function digestWords(hex: string): [number, number] {
  return [parseInt(hex.slice(0, 8), 16) | 0, parseInt(hex.slice(8, 16), 16) | 0];
}
const hexOf = (high: number, low: number): string => (high >>> 0).toString(16).padStart(8, '0') + (low >>> 0).toString(16).padStart(8, '0');

/** Which shard a working rank recomputes at the check of `step`, and whose it is. */
export interface SpotAssignment {
  checker: number;
  owner: number;
  shard: number;
}

/**
 * The check's rotation: at the c-th check (c = step / K), the i-th working rank recomputes a shard
 * of the (i + 1 + c mod (n - 1))-th, the c-th of its shards (mod their count): a permutation, so
 * every working rank is checked at every check, by another rank each check in turn.
 */
export function spotAssignments(map: ShardMap, check: number): SpotAssignment[] {
  const workers = map.ranks;
  const n = workers.length;
  if (n < 2) return [];
  const offset = 1 + (check % (n - 1));
  const out: SpotAssignment[] = [];
  for (let i = 0; i < n; ++i) {
    const owner = workers[(i + offset) % n];
    const shards = map.shardsOf(owner);
    if (shards.length > 0) out.push({ checker: workers[i], owner, shard: shards[check % shards.length] });
  }
  return out;
}

/** What one rank contributes to a check of its gradients. */
export interface GradientDigests {
  /** held shard -> crc64 of its gradient vector (gradient, statistics, weighted loss) this step */
  shards: Map<number, string>;
  /** the crc64 of the spot shard's vector as this rank recomputed it */
  spot?: string;
}

/** What one rank contributes to a check. */
export interface CheckDigests extends Omit<GradientDigests, 'spot'> {
  /** crc64 of the state every live rank holds alike */
  state: string;
  /**
   * the spot shard this rank recomputed, whose it is, and the crc64 it got: every rank judges the
   * checkers by what they say they recomputed, since a spare's shard map is not the working ranks'
   * (a rebalance changes only theirs)
   */
  spot?: SpotAssignment & { digest: string };
  /** sharded state: crc64 of each chunk it holds, by chunk (its own, and the copies it keeps for peers) */
  chunks?: Map<number, { digest: string; own: boolean }>;
}

/** The crc64 of what every rank holds alike of `state`: the parameters, the optimizer state where it is whole (`slotsWhole`: replicated), the buffers. */
export function stateDigest(state: TrainingState, slotsWhole: boolean): string {
  return crc64(state.params, ...(slotsWhole ? state.slots.map((slot) => slot.data) : []), state.buffers?.data ?? new Float32Array(0));
}

/**
 * Int32 words of a rank's record: state (2), spot (a flag word, the digest (2), its owner and
 * shard), 2 per shard of the run, then 3 per chunk of sharded state (a flag: 2 own, 1 a copy; the digest).
 */
export const recordWords = (shards: number, chunks = 0): number => shardsAt + 2 * shards + 3 * chunks;
const shardsAt = 7;

/** Chunk digests held, written from `at` on as 3 words per chunk of the layout: a flag (2 own, 1 a copy, 0 not held), the digest. */
function writeChunks(into: Int32Array, at: number, chunks: ReadonlyMap<number, { digest: string; own: boolean }>): void {
  for (const [c, { digest, own }] of chunks) {
    into[at + 3 * c] = own ? 2 : 1;
    into.set(digestWords(digest), at + 3 * c + 1);
  }
}

/** One chunk's holders by the digest of their copy, from gathered records (`ranks[i]`: the i-th's rank) of `words` words each, the chunk's 3 words at `at`. */
function chunkCopies(ranks: readonly number[], records: Int32Array, words: number, at: number): Map<string, number[]> {
  const copies = new Map<string, number[]>();
  ranks.forEach((rank, i) => {
    if (records[i * words + at] === 0) return;
    const digest = hexOf(records[i * words + at + 1], records[i * words + at + 2]);
    copies.set(digest, [...(copies.get(digest) ?? []), rank]);
  });
  return copies;
}

/** This rank's record for the gather: absent digests are flagged, never read. */
export function encodeRecord(digests: CheckDigests, shards: number, chunks = 0): Int32Array {
  const record = new Int32Array(recordWords(shards, chunks));
  writeChunks(record, shardsAt + 2 * shards, digests.chunks ?? new Map());
  record.set(digestWords(digests.state), 0);
  if (digests.spot !== undefined) {
    record[2] = 1;
    record.set(digestWords(digests.spot.digest), 3);
    record[5] = digests.spot.owner;
    record[6] = digests.spot.shard;
  }
  for (const [shard, hex] of digests.shards) record.set(digestWords(hex), shardsAt + 2 * shard);
  return record;
}

/** A gradient two ranks computed with different bits, and the third rank asked to recompute it. */
export interface Dispute {
  shard: number;
  owner: number;
  checker: number;
  third?: number;
  /** the digests: owner's, checker's */
  digests: [string, string];
}

/** What a check found: the suspects (world ranks) and what differed, or a corruption nobody can be named for. */
export interface CheckFinding {
  /** world rank -> what differed ('params' or 'gradient shard S') */
  suspects: Map<number, string>;
  /** gradient mismatches awaiting a third rank's recomputation */
  disputes: Dispute[];
  /** a corruption found, but no rank can be named: the line saying why, and the ranks involved */
  unattributable?: string;
  involved?: number[];
}

/**
 * The first round's finding, from every live rank's record (`ranks[i]`: the world rank of the
 * i-th record). State: the ranks off the majority's digest are suspect (no majority: nobody can
 * be named); so are, for each chunk of sharded state, the holders off the majority of its copies
 * (with two, nobody can be named). Gradients: each checker's digest against the owner's; a
 * mismatch between two ranks neither of which is already suspect goes to a third working rank
 * (one that recomputed a spot shard), when there is one.
 */
export function firstRound(ranks: readonly number[], records: Int32Array, shards: number, what: string, chunks = 0): CheckFinding {
  const words = recordWords(shards, chunks);
  const at = (rank: number): number => ranks.indexOf(rank) * words;
  const suspects = new Map<number, string>();
  const counts = new Map<string, number[]>();
  for (const rank of ranks) {
    const state = hexOf(records[at(rank)], records[at(rank) + 1]);
    counts.set(state, [...(counts.get(state) ?? []), rank]);
  }
  if (counts.size > 1) {
    const [, majority] = [...counts].sort((a, b) => b[1].length - a[1].length)[0];
    if (2 * majority.length <= ranks.length) {
      const groups = [...counts.values()].map((g) => g.join(', ')).join(' | ');
      return {
        suspects,
        disputes: [],
        unattributable: `the ranks' ${what} digests differ with no majority (ranks ${groups})`,
        involved: [...ranks].sort((a, b) => a - b),
      };
    }
    for (const rank of ranks) if (!majority.includes(rank)) suspects.set(rank, what);
  }
  for (let c = 0; c < chunks; ++c) {
    const at = shardsAt + 2 * shards + 3 * c;
    const copies = chunkCopies(ranks, records, words, at);
    if (copies.size < 2) continue;
    const holders = ranks.filter((_, i) => records[i * words + at] !== 0);
    const owner = holders.find((rank) => records[ranks.indexOf(rank) * words + at] === 2);
    const label = `optimizer state of chunk ${c}${owner === undefined ? '' : ` (rank ${owner}'s)`}`;
    const [, majority] = [...copies].sort((a, b) => b[1].length - a[1].length)[0];
    if (2 * majority.length <= holders.length) {
      const involved = [...holders].sort((a, b) => a - b);
      return {
        suspects,
        disputes: [],
        unattributable: `ranks ${involved.join(' and ')} hold the ${label} with different bits, and no majority of copies can tell which is wrong`,
        involved,
      };
    }
    for (const rank of holders) if (!majority.includes(rank)) suspects.set(rank, label);
  }
  const checkers = ranks.filter((rank) => records[at(rank) + 2] === 1);
  const disputes: Dispute[] = [];
  for (const checker of checkers) {
    const mine = at(checker);
    const [owner, shard] = [records[mine + 5], records[mine + 6]];
    if (suspects.has(checker) || suspects.has(owner) || !ranks.includes(owner)) continue;
    const theirs = at(owner) + shardsAt + 2 * shard;
    const digests: [string, string] = [hexOf(records[theirs], records[theirs + 1]), hexOf(records[mine + 3], records[mine + 4])];
    if (digests[0] !== digests[1]) disputes.push({ shard, owner, checker, digests });
  }
  const workers = [...checkers].sort((a, b) => a - b);
  for (const dispute of disputes) {
    dispute.third = workers.find((r) => r !== dispute.owner && r !== dispute.checker && !suspects.has(r) && !involved(disputes, r));
    dispute.third ??= workers.find((r) => r !== dispute.owner && r !== dispute.checker && !suspects.has(r));
    if (dispute.third === undefined) {
      const pair = [dispute.owner, dispute.checker].sort((a, b) => a - b);
      return {
        suspects,
        disputes,
        unattributable: `ranks ${pair[0]} and ${pair[1]} computed shard ${dispute.shard}'s gradient with different bits, and no third rank can tell which is wrong`,
        involved: pair,
      };
    }
  }
  return { suspects, disputes };
}

const involved = (disputes: readonly Dispute[], rank: number): boolean => disputes.some((d) => d.owner === rank || d.checker === rank);

/**
 * The second round: each dispute's third rank recomputed the shard (`thirds[i]`: the i-th
 * dispute's digest, as gathered). The rank the third one disagrees with is suspect; a third
 * digest that matches neither names nobody.
 */
export function secondRound(finding: CheckFinding, thirds: readonly string[]): CheckFinding {
  const suspects = new Map(finding.suspects);
  for (const [i, dispute] of finding.disputes.entries()) {
    const third = thirds[i];
    const [owner, checker] = dispute.digests;
    if (third === owner) suspects.set(dispute.checker, `gradient of shard ${dispute.shard}`);
    else if (third === checker) suspects.set(dispute.owner, `gradient of shard ${dispute.shard}`);
    else {
      const trio = [dispute.owner, dispute.checker, dispute.third!].sort((a, b) => a - b);
      return {
        suspects,
        disputes: [],
        unattributable: `ranks ${trio.join(', ')} computed shard ${dispute.shard}'s gradient with three different results`,
        involved: trio,
      };
    }
  }
  return { suspects, disputes: [] };
}

/** The gathered digest at `word` of every record, as hex. */
export function gatheredDigest(records: Int32Array, index: number, words: number, word: number): string {
  return hexOf(records[index * words + word], records[index * words + word + 1]);
}

/**
 * A rank's digests of the chunks of sharded state it holds (its own, and its copies of peers'), as
 * 3 Int32 words per chunk of the layout (a flag, the digest), for the comparison before a
 * recovery's rebuild: `chunkCopiesDiffer` of every rank's gathered.
 */
export function encodeChunkCopies(digests: ReadonlyMap<number, { digest: string; own: boolean }>, chunks: number): Int32Array {
  const words = new Int32Array(3 * chunks);
  writeChunks(words, 0, digests);
  return words;
}

/** The chunks whose holders, in `records` (encodeChunkCopies of each rank, one after another), hold them with different bits. */
export function chunkCopiesDiffer(records: Int32Array, chunks: number): number[] {
  const indices = Array.from({ length: records.length / (3 * chunks) }, (_, i) => i);
  return Array.from({ length: chunks }, (_, c) => c).filter((c) => chunkCopies(indices, records, 3 * chunks, 3 * c).size > 1);
}

/** The state of the last step that passed a check: copies of what every rank holds, allocated once. */
export class VerifiedState {
  /** `slotsWhole`: the optimizer state is replicated, and kept here too (sharded state keeps its own: ShardedState.keepVerified) */
  constructor(private readonly slotsWhole: boolean) {}

  /** copies of live()'s arrays, in its order (none until the first keep or join) */
  private copies: Float32Array[] = [];
  /** the step whose start it is (-1: none kept) */
  step = -1;

  /** Keeps `state`, the state at the start of `step` (its optimizer state where it is whole: sharded state keeps its own). */
  keep(state: TrainingState, step: number): void {
    const live = this.live(state);
    this.allocate(live);
    live.forEach((array, i) => this.copies[i].set(array));
    this.step = step;
  }

  /**
   * What a join sends of it, in place: the kept copies; a rank that has none (it is joining)
   * allocates them like `state()`'s arrays, and receives the run's last verified state with the
   * run's state.
   */
  joinBuffers(state: () => TrainingState): Float32Array[] {
    if (this.copies.length === 0) this.allocate(this.live(state()));
    return this.copies;
  }

  /** Puts the kept state back into `state`'s arrays; the step it is the start of. */
  restore(state: TrainingState): number {
    if (this.step < 0 || this.copies.length === 0) throw new Error('no verified state to roll back to');
    this.live(state).forEach((array, i) => array.set(this.copies[i]));
    return this.step;
  }

  /** What is kept of `state`: the parameters, the optimizer state where it is whole, the buffers where there are any. */
  private live(state: TrainingState): Float32Array[] {
    const buffers = state.buffers?.data;
    return [
      state.params,
      ...(this.slotsWhole ? state.slots.map((slot) => slot.data) : []),
      ...(buffers && buffers.length > 0 ? [buffers] : []),
    ];
  }

  private allocate(live: Float32Array[]): void {
    if (this.copies.length === 0) this.copies = live.map((array) => new Float32Array(array.length));
  }
}
