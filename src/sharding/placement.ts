// Where the redundancy for the sharded optimizer state lives, so that a chunk outlives its owner.
// Chunk c of the state belongs to comm rank c of N live ranks; peers keep either whole copies of it
// (replicate:M, Gemini SOSP'23: M copies in all, placed in groups, on a ring, or mixed) or a share
// of Reed-Solomon parities over a group of chunks (ec:K+M, ECHECK). This module only decides
// placement and answers which losses the survivors' memory can undo; it moves no bytes.

export type RedundancySpec =
  | { kind: 'none' }
  /** auto: group placement when copies divide the world, else mixed (Gemini's rule) */
  | { kind: 'replicate'; copies: number; placement: 'auto' | 'group' | 'ring' }
  | { kind: 'ec'; data: number; parity: number };

export interface ReplicaPlan {
  kind: 'replicate';
  placement: 'group' | 'ring' | 'mixed';
  /** copies of each chunk in all, the owner's included */
  copies: number;
  /** holders[c]: the ranks other than c that hold a replica of chunk c, ascending */
  holders: number[][];
}

export interface EcGroup {
  /** the group's chunks, which are also their owners' ranks, ascending */
  data: number[];
  /** parity row j of the group is held by rank parity[j] */
  parity: number[];
}

export interface EcPlan {
  kind: 'ec';
  /** K: data chunks per group (the last group may have fewer) */
  data: number;
  /** M: parity rows per group */
  parity: number;
  groups: EcGroup[];
}

export type RedundancyPlan = { kind: 'none' } | ReplicaPlan | EcPlan;

const ACCEPTED_FORMS =
  'accepted: none, replicate:M, replicate:M:group, replicate:M:ring (M >= 2 copies in all), ec:K+M (K >= 1 data and M >= 1 parity chunks per group)';

function badRedundancy(text: string, why: string): Error {
  return new Error(`bad redundancy '${text}': ${why}; ${ACCEPTED_FORMS}`);
}

/** Parses 'none' | 'replicate:M' | 'replicate:M:group' | 'replicate:M:ring' | 'ec:K+M'; a bad text throws one line naming it and the accepted forms. */
export function parseRedundancy(text: string): RedundancySpec {
  if (text === 'none') return { kind: 'none' };
  const wholeNumber = (digits: string): number | undefined =>
    /^\d+$/.test(digits) && Number.isSafeInteger(Number(digits)) ? Number(digits) : undefined;
  const parts = text.split(':');
  if (parts[0] === 'replicate' && (parts.length === 2 || parts.length === 3)) {
    const copies = wholeNumber(parts[1]);
    if (copies === undefined) throw badRedundancy(text, `the number of copies '${parts[1]}' is not a whole number`);
    if (copies === 1)
      throw badRedundancy(text, "1 copy is no redundancy, the owner's own copy being the only one (that is 'none'); needs M >= 2");
    if (copies < 2) throw badRedundancy(text, `M = ${copies} copies, needs M >= 2`);
    if (parts.length === 2) return { kind: 'replicate', copies, placement: 'auto' };
    const placement = parts[2];
    if (placement !== 'group' && placement !== 'ring') throw badRedundancy(text, `placement '${placement}' is neither group nor ring`);
    return { kind: 'replicate', copies, placement };
  }
  if (parts[0] === 'ec' && parts.length === 2) {
    const match = /^(\d+)\+(\d+)$/.exec(parts[1]);
    if (!match) throw badRedundancy(text, `'${parts[1]}' is not of the form K+M`);
    const data = wholeNumber(match[1]);
    const parity = wholeNumber(match[2]);
    if (data === undefined || parity === undefined) throw badRedundancy(text, 'K and M must be whole numbers');
    if (data < 1) throw badRedundancy(text, `K = ${data} data chunks per group, needs K >= 1`);
    if (parity < 1) throw badRedundancy(text, `M = ${parity} parity chunks per group is no redundancy, needs M >= 1`);
    return { kind: 'ec', data, parity };
  }
  throw badRedundancy(text, 'not understood');
}

/** The text parseRedundancy reads back as `spec`. */
export function formatRedundancy(spec: RedundancySpec): string {
  switch (spec.kind) {
    case 'none':
      return 'none';
    case 'replicate':
      return spec.placement === 'auto' ? `replicate:${spec.copies}` : `replicate:${spec.copies}:${spec.placement}`;
    case 'ec':
      return `ec:${spec.data}+${spec.parity}`;
  }
}

function checkSpec(spec: RedundancySpec): void {
  const bad = (why: string) => new Error(`redundancy ${JSON.stringify(spec)}: ${why}`);
  if (spec.kind === 'replicate') {
    if (!Number.isSafeInteger(spec.copies) || spec.copies < 2) throw bad('copies must be a whole number >= 2');
    if (!['auto', 'group', 'ring'].includes(spec.placement)) throw bad('placement must be auto, group or ring');
  } else if (spec.kind === 'ec') {
    if (!Number.isSafeInteger(spec.data) || spec.data < 1) throw bad('data must be a whole number >= 1');
    if (!Number.isSafeInteger(spec.parity) || spec.parity < 1) throw bad('parity must be a whole number >= 1');
  } else if (spec.kind !== 'none') {
    throw bad('unknown kind');
  }
}

function checkWorldSize(n: number): void {
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`redundancy placement needs a world of at least 1 rank, got ${n}`);
}

const ranksText = (n: number): string => `${n} rank${n === 1 ? '' : 's'}`;

/**
 * What the spec becomes on a world of n ranks, which after losses may be too small for it:
 * replicate keeps as many copies as there are ranks; ec keeps its M parities (its tolerance) and
 * shrinks K, or when not even K = 1 fits keeps K = 1 with M = n-1; one rank holds nothing for others.
 */
function fitToWorld(spec: RedundancySpec, n: number): RedundancySpec {
  if (spec.kind === 'replicate' && n < spec.copies) {
    return n === 1 ? { kind: 'none' } : { ...spec, copies: n };
  }
  if (spec.kind === 'ec' && n < spec.data + spec.parity) {
    if (n === 1) return { kind: 'none' };
    return n - spec.parity >= 1 ? { ...spec, data: n - spec.parity } : { kind: 'ec', data: 1, parity: n - 1 };
  }
  return spec;
}

function ranksNeeded(spec: RedundancySpec): number {
  return spec.kind === 'replicate' ? spec.copies : spec.kind === 'ec' ? spec.data + spec.parity : 1;
}

/** The M-1 ranks after each member along the ring of `members`, for each member's chunk. */
function ringHolders(members: readonly number[], copies: number, holders: number[][]): void {
  members.forEach((owner, i) => {
    holders[owner] = Array.from({ length: copies - 1 }, (_, step) => members[(i + 1 + step) % members.length]).sort((a, b) => a - b);
  });
}

/** Every member holds the chunks of all the others. */
function groupHolders(members: readonly number[], holders: number[][]): void {
  for (const owner of members) holders[owner] = members.filter((r) => r !== owner);
}

const rankRange = (first: number, count: number): number[] => Array.from({ length: count }, (_, i) => first + i);

function planReplicas(copies: number, placement: 'auto' | 'group' | 'ring', n: number): ReplicaPlan {
  const holders: number[][] = new Array(n);
  if (placement === 'ring') {
    ringHolders(rankRange(0, n), copies, holders);
    return { kind: 'replicate', placement: 'ring', copies, holders };
  }
  if (n % copies === 0) {
    for (let first = 0; first < n; first += copies) groupHolders(rankRange(first, copies), holders);
    return { kind: 'replicate', placement: 'group', copies, holders };
  }
  // Group placement needs copies | n (an explicit 'group' too: the world shrinks under us). Gemini's
  // mixed placement keeps whole groups where it can and puts the remaining copies + (n mod copies)
  // ranks, too many for one group and too few for two, on a ring of their own.
  const wholeGroups = Math.floor(n / copies) - 1;
  for (let g = 0; g < wholeGroups; ++g) groupHolders(rankRange(g * copies, copies), holders);
  ringHolders(rankRange(wholeGroups * copies, n - wholeGroups * copies), copies, holders);
  return { kind: 'replicate', placement: 'mixed', copies, holders };
}

function planEc(data: number, parity: number, n: number): EcPlan {
  const groups: EcGroup[] = [];
  for (let first = 0; first < n; first += data) {
    const size = Math.min(data, n - first);
    // the M ranks right after the group: outside it, since size + M <= K + M <= n
    groups.push({ data: rankRange(first, size), parity: Array.from({ length: parity }, (_, j) => (first + size + j) % n) });
  }
  return { kind: 'ec', data, parity, groups };
}

/** The placement for n live ranks; `degraded` says, in one line, how the spec was cut down when the world is too small for it. */
export function planRedundancy(spec: RedundancySpec, n: number): { plan: RedundancyPlan; degraded?: string } {
  checkSpec(spec);
  checkWorldSize(n);
  const fitted = fitToWorld(spec, n);
  const degraded =
    fitted === spec
      ? undefined
      : `${formatRedundancy(spec)} needs ${ranksText(ranksNeeded(spec))}; on ${ranksText(n)} using ${formatRedundancy(fitted)}`;
  const plan: RedundancyPlan =
    fitted.kind === 'replicate'
      ? planReplicas(fitted.copies, fitted.placement, n)
      : fitted.kind === 'ec'
        ? planEc(fitted.data, fitted.parity, n)
        : { kind: 'none' };
  return degraded === undefined ? { plan } : { plan, degraded };
}

/** How many ranks the plan was made for; undefined for 'none', which fits any world. */
function planWorldSize(plan: RedundancyPlan): number | undefined {
  if (plan.kind === 'replicate') return plan.holders.length;
  if (plan.kind === 'ec') return plan.groups.reduce((n, group) => n + group.data.length, 0);
  return undefined;
}

function checkRank(plan: RedundancyPlan, rank: number, n: number, what: string): void {
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= n)
    throw new Error(`${what} ${rank} is not a rank of the ${ranksText(n)} of the ${plan.kind} plan`);
}

/** The chunks that the survivors' memory cannot rebuild when the comm ranks in `lost` fail together, ascending (empty: all recoverable). */
export function unrecoverableChunks(plan: RedundancyPlan, n: number, lost: readonly number[]): number[] {
  checkWorldSize(n);
  const planned = planWorldSize(plan);
  if (planned !== undefined && planned !== n) throw new Error(`the ${plan.kind} plan is for ${ranksText(planned)}, not ${n}`);
  for (const rank of lost) checkRank(plan, rank, n, 'lost rank');
  const isLost = new Array<boolean>(n).fill(false);
  for (const rank of lost) isLost[rank] = true;
  const gone: number[] = [];
  if (plan.kind === 'none') {
    for (let c = 0; c < n; ++c) if (isLost[c]) gone.push(c);
  } else if (plan.kind === 'replicate') {
    for (let c = 0; c < n; ++c) if (isLost[c] && plan.holders[c].every((r) => isLost[r])) gone.push(c);
  } else {
    for (const group of plan.groups) {
      // any kg of a group's fragments (its data chunks and its parities) rebuild all kg data chunks
      const surviving = [...group.data, ...group.parity].filter((r) => !isLost[r]).length;
      if (surviving < group.data.length) gone.push(...group.data.filter((c) => isLost[c]));
    }
    gone.sort((a, b) => a - b);
  }
  return gone;
}

/** What `rank` holds for others: replicas of their chunks (ascending) and parity rows of groups. */
export function heldBy(plan: RedundancyPlan, rank: number): { replicas: number[]; parities: { group: number; row: number }[] } {
  if (plan.kind === 'none') {
    if (!Number.isSafeInteger(rank) || rank < 0) throw new Error(`rank ${rank} is not a rank`);
    return { replicas: [], parities: [] };
  }
  checkRank(plan, rank, planWorldSize(plan)!, 'rank');
  if (plan.kind === 'replicate') {
    const replicas = plan.holders.flatMap((holders, chunk) => (holders.includes(rank) ? [chunk] : []));
    return { replicas, parities: [] };
  }
  const parities: { group: number; row: number }[] = [];
  plan.groups.forEach((group, g) => group.parity.forEach((holder, row) => holder === rank && parities.push({ group: g, row })));
  return { replicas: [], parities };
}

/** C(n, k), exact while it stays below 2^53. */
function binomial(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let c = 1;
  for (let i = 0; i < Math.min(k, n - k); ++i) c = (c * (n - i)) / (i + 1);
  return c;
}

/**
 * Gemini's probability that k simultaneous failures, a uniformly random set of k of the n ranks, lose
 * no chunk under group placement of m copies (m | n): 1 for k < m, 1 - n C(n-m, k-m) / (m C(n, k)) for
 * m <= k < 2m. Computed as the inclusion-exclusion count of k-sets containing no whole group over
 * C(n, k), whose first term is that closed form and which stays exact for k >= 2m as well.
 */
export function geminiRecoveryProbability(n: number, m: number, k: number): number {
  if (!Number.isSafeInteger(n) || !Number.isSafeInteger(m) || !Number.isSafeInteger(k) || m < 1 || n < m || n % m !== 0 || k < 0 || k > n) {
    throw new Error(`geminiRecoveryProbability(${n}, ${m}, ${k}): needs whole numbers with m | n, m >= 1 and 0 <= k <= n`);
  }
  const groups = n / m;
  let recoverable = 0;
  for (let wholeGroupsLost = 0; wholeGroupsLost * m <= k; ++wholeGroupsLost) {
    recoverable +=
      (wholeGroupsLost % 2 === 0 ? 1 : -1) * binomial(groups, wholeGroupsLost) * binomial(n - wholeGroupsLost * m, k - wholeGroupsLost * m);
  }
  return recoverable / binomial(n, k);
}
