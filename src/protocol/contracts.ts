// What the fault-tolerance protocol and its clients (the trainer, the custom loop) agree on: the
// protocol's settings, what it asks of the training loop, what it reports, and the records of the
// failures it recovered from. The protocol's parts (manager.ts and what it calls) import this; no
// part imports the Manager.
import type { CheckpointMeta, TrainingState } from '../checkpoint/checkpoint';
import type { ShardMap } from '../data/shard-map';
import type { RunEvent, StepRecord } from '../run/records';
import type { ShardedStateConfig } from '../sharding/sharded-state';
import type { BalanceSettings } from './balance';
import type { OnCorruption } from './verification';

/** What a failure does: exact (bit-identical result), shrink (survivors keep their batch), none (the job ends). */
export type FailurePolicy = 'exact' | 'shrink' | 'none';

/** When spawned ranks join: at the first step's end once ready, or at the retried step's end, waited for. */
export type RespawnJoin = 'ready' | 'wait';

export interface ProtocolConfig {
  onFailure: FailurePolicy;
  shards: number;
  minRanks: number;
  /** repair attempts per failure */
  maxRetries: number;
  /** write a checkpoint from the survivors after each failure */
  jitCheckpoint: boolean;
  /** a checkpoint every K committed steps (0: none) */
  checkpointEvery: number;
  checkpointDir: string;
  keepCheckpoints: number;
  /** checkpoints are expected (JIT or periodic): the leader keeps a spare state file ready for them (checkpoint.ts) */
  spareCheckpoint: boolean;
  /** the settings that fix the result, recorded in checkpoints */
  identity: Record<string, unknown>;
  /** the longest a shrink may take (see liveness/hangs.ts) */
  commTimeoutMs: number;
  /** the longest a checkpoint's writes to disk may take (see liveness/hang-bounds.ts) */
  diskTimeoutMs: number;
  /** where the ranks' pid files are (to kill a rank declared dead for hanging) */
  pidsDir: string;
  /** this rank's log file: a line written at once (before a rank evicted for corruption kills itself) */
  logFile: string;
  /** exact mode: check for silent data corruption every K steps (0: never) */
  verifyEvery: number;
  /** what a corruption the check names a rank for does */
  onCorruption: OnCorruption;
  /** exact mode, --rebalance auto: how slow ranks are found, their shards moved and they evicted (absent: off) */
  rebalance?: BalanceSettings;
  /** exact mode: the length of what one shard contributes to the sum, and the add in shard order */
  sumLength: number;
  add(acc: Float32Array, x: Float32Array): void;
  /**
   * exact mode: this rank's part of the sum can overlap its backward pass, having a core for the
   * comm thread beside the compute's (comm's canOverlap). The sum goes in DDP's buckets where every
   * rank can, else in one exchange at the end.
   */
  overlap: boolean;
  /** --optimizer-state sharded (exact mode): the optimizer, parameters and redundancy it needs */
  sharded?: Omit<ShardedStateConfig, 'log' | 'initial'>;
  /** --spares: the ranks of the job beyond the working ones (the highest ids) */
  spares: number;
  /**
   * --respawn: how many ranks may be spawned in all, when they join, how long after its launch a
   * newcomer may take to be ready before it is given up, and the command a spawned rank runs given
   * its first id
   */
  respawn?: { limit: number; join: RespawnJoin; giveUpMs: number; command: string; args(firstId: number, step: number): string[] };
  /** --reserves: the launch's processes asleep until woken in place of a spawn, by MPI_COMM_WORLD rank [first, end) (a joining rank learns them at the join) */
  reserves?: { first: number; end: number };
  /** this process belongs to the launch's own job (not spawned: a woken reserve does), whose MPI_COMM_WORLD holds the reserves */
  launchJob: boolean;
  /** this process was spawned by the job's ranks: it joins them at a step's end, once ready */
  joined: boolean;
  /** a spawned rank: the step its spawners were at (its drill points' step until it joins) */
  joinStep?: number;
}

/** What the protocol and the training loops report to the run directory and the console (one observer for all). */
export interface ProtocolObserver {
  /** a committed step's record (the training loops' report) */
  step(record: StepRecord): void;
  event(record: RunEvent): void;
  /** the lowest live rank leads (logs, metrics, the final write) */
  leader(isLeader: boolean): void;
  log(message: string): void;
}

/** A training loop's data position besides the step: the epoch, and shrink mode's cursors. */
export type LoopPosition = Pick<CheckpointMeta, 'epoch' | 'shrink'>;

/** What the protocol asks of the training loop, as it stands at the current step's start. */
export interface StateSource {
  /** the training state a checkpoint holds */
  state(): TrainingState;
  /** the epoch, and shrink mode's data position */
  position(): LoopPosition;
  /** whether the run has reached its end, once the protocol's step has advanced */
  done(): boolean;
  /** whether the protocol's current step is the run's last */
  lastStep(): boolean;
  /** the rows (within each shard) the current step reads of `shards` under `map`; absent: none */
  stepRows(map: ShardMap, shards: readonly number[]): Map<number, Int32Array>;
  /** sharded state: the optimizer state at the run's start, slot k over elements [from, to) */
  initialState(slot: number, from: number, to: number, out: Float32Array): void;
  /** what a joining rank receives, as it stands at the current step's start: buffers of the same length on every rank (sent in place) */
  joinBuffers(): Float32Array[];
  /** a joining rank's training loop takes up `position` (the protocol's step is already the run's) */
  joinAt(position: LoopPosition): void;
  /** the protocol wrote into the arrays of state() or joinBuffers() (a rollback, a join's transfer) */
  stateWritten(): void;
}

/** Where a resumed run starts: the checkpoint's step and the world sizes it recorded. */
export interface ResumePoint {
  step: number;
  worldHistory: CheckpointMeta['world_history'];
}

/** A failure the run recovered from. */
export interface Failure {
  /** the step it interrupted (retried on the repaired world) */
  step: number;
  /** the world ranks lost */
  lost: number[];
  /** working ranks after the recovery */
  world: number;
}

/** The run's account of its failures and world sizes, kept by the Manager and filled by the repair. */
export interface RunHistory {
  readonly failures: Failure[];
  readonly worldHistory: CheckpointMeta['world_history'];
}

/** Where the run stands: the parts read it, only the Manager changes it. */
export interface StepPosition {
  /** the step being worked on (drills and events name it) */
  readonly step: number;
  /** training has ended: a recovery no longer reads back or checkpoints */
  readonly trainingDone: boolean;
}
