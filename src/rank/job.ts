// One rank's life in a job, shared by the ft-train program, `train()` and the custom loop: its
// run-directory log, pid file and drills before MPI starts, a bounded MPI start-up, the hang guard,
// what it reports (metrics, events, progress on the leader's console), SIGTERM as a request to stop
// at a step boundary, and a bounded end: every way a run stops becomes one exit code and at most
// one line (see docs/architecture.md, the recovery protocol).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { newestCheckpoint } from '../checkpoint/checkpoint';
import { CommTimeoutError, exitNow, finalize, init, type Communicator } from '../comm';
import type { CpuLevel, KernelSettings } from '../nn/backend';
import { cpu } from '../nn/cpu';
import type { Dataset } from '../data/dataset';
import { FaultInjector, type Drill } from '../liveness/drills';
import { hangBounds, type HangBounds } from '../liveness/hang-bounds';
import { guardAgainstHangs, killDeclaredDead, killStopped, peersGone } from '../liveness/hangs';
import type { Failure, ProtocolObserver } from '../protocol/contracts';
import type { Manager } from '../protocol/manager';
import { withDeadline } from '../liveness/deadline';
import { ProtocolStop } from '../liveness/stop';
import { rankLogName, runFiles } from '../run/files';
import { claimStopLine, processStat, rankList, readPid, wasGivenUp } from '../run/pids';
import { stopLogPrefix } from '../run/records';
import { RunLog } from '../run/writer';
import { agreeKernelLevel, KernelLevelRefusal, type LevelAsked } from './kernel-level';
import { launcherWorldRank } from './launcher-env';
import { RankLogger } from './logger';
import { Progress } from './progress';

export interface JobSettings {
  runDir: string;
  hangTimeout: number;
  drills: Drill[];
  /** the run's seed (which bit a flip drill changes) */
  seed: number;
  /** set on a spawned rank (see TrainOptions.joinId) */
  joinId?: number;
  /** a woken reserve: its id is joinId (a spawned rank's, joinId + its rank among those spawned with it) */
  woken?: boolean;
  /** the launch's last processes that sleep as reserves (--reserves) */
  reserves: number;
  /** steps in all, for the progress bar (undefined: unknown) */
  steps?: number;
  /** whether SIGTERM asks for a checkpoint and a clean stop (off without fault tolerance) */
  stopOnSigterm: boolean;
  /** the step the run starts at (a resume's), where the start-up drill fires */
  startStep: number;
  /** the CPU kernels' instruction-set level the job asks for (a spawned rank: the one its job agreed on) */
  isa: LevelAsked;
  /**
   * A spawned rank's work before it says it is ready, its kernels pinned (the kernels' warm-up):
   * the ranks that spawned it go on training meanwhile, and wait for none of it in the join.
   */
  beforeReady?: () => void;
}

/** Whether a process exists and is not stopped (a SIGSTOPped rank is as good as gone). */
function running(pid: number | null): boolean {
  const state = pid === null ? undefined : processStat(pid)?.state;
  return state !== undefined && !['T', 't', 'Z', 'X'].includes(state);
}

/**
 * A spawned or woken rank that cannot join leaves as failed (the ranks that spawned or woke it go
 * on without it): a line in its log, then SIGKILL. Where its wait for them ran past its deadline
 * (`waitedOut`), the job's ranks found stopped for good on this host are killed first: hung, and
 * where they were the last of the job no detector is left to see it, and mpirun would wait for
 * them for good.
 */
export function leaveUnjoined(runDir: string, id: number, how: 'spawned' | 'woken', why: string, waitedOut: boolean): never {
  const pidsDir = path.join(runDir, runFiles.pids);
  const killed = waitedOut
    ? killStopped(
        pidsDir,
        rankList(pidsDir).filter((rank) => rank !== id),
      )
    : [];
  const hung = killed.length > 0 ? ` (killed rank(s) ${killed.join(', ')} of the job, found stopped)` : '';
  fs.appendFileSync(
    path.join(runDir, runFiles.logs, rankLogName(id)),
    `${new Date().toISOString()} rank ${id}: ${how}, but cannot join: ${why}${hung}; leaving\n`,
  );
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable');
}

/**
 * MPI did not start in time: the lowest rank still running on this host prints `line`, kills the
 * job's other ranks on this host (a stopped one would keep mpirun alive) and, once they are gone,
 * exits 1 last (mpirun returns at the first non-zero exit); every other rank leaves quietly, exit
 * 0. The first such rank of the job (claimStopLine) records the stop (`record`): launch/ft-run
 * sees by it that the run ended, where mpirun would wait for good on a host cut off while starting.
 */
async function endStartup(line: string, pidsDir: string, record: () => void): Promise<never> {
  const ranks = rankList(pidsDir);
  const lowest = ranks.find((rank) => running(readPid(pidsDir, rank)));
  if (lowest !== launcherWorldRank()) process.exit(0);
  fs.writeSync(2, `${line}\n`); // console.error would be lost to process.exit
  if (claimStopLine(pidsDir)) record();
  const others = ranks.filter((rank) => rank !== lowest);
  killDeclaredDead(pidsDir, others);
  await peersGone(pidsDir, others, 5000);
  // MPI_Init may never return: leave without waiting for it
  process.exit(1);
}

/** The done line's account of the failures: "rank 2 at step 301; ranks 4, 5 at step 9" ('' without). */
export function lossesText(failures: readonly Failure[]): string {
  return failures.map((f) => `rank${f.lost.length > 1 ? 's' : ''} ${f.lost.join(', ')} at step ${f.step}`).join('; ');
}

export class RankJob {
  readonly bounds: HangBounds;
  /** under mpirun the rank is known before MPI starts: the pid file and the start-up drill need it */
  readonly launchRank: number;
  readonly runLog: RunLog;
  readonly pidsDir: string;
  readonly logger: RankLogger;
  readonly faults: FaultInjector;
  readonly progress: Progress;
  readonly observer: ProtocolObserver;
  private world?: Communicator;
  private pinned?: KernelSettings;
  private joinedRun = false;
  private stopRequested = false;
  private onStop?: () => void;
  private disarm = (): void => undefined;

  constructor(private readonly settings: JobSettings) {
    this.bounds = hangBounds(settings.hangTimeout);
    this.launchRank = (settings.joinId ?? 0) + (settings.woken ? 0 : launcherWorldRank());
    this.runLog = new RunLog(settings.runDir, this.launchRank);
    this.pidsDir = path.join(settings.runDir, runFiles.pids);
    this.logger = new RankLogger(this.runLog.logFile, this.launchRank);
    this.faults = new FaultInjector(settings.drills, this.launchRank, this.runLog.logFile, this.pidsDir, settings.seed);
    this.progress = new Progress(settings.steps);
    const { runLog, logger, progress } = this;
    this.observer = {
      step: (record) => {
        runLog.step(record);
        progress.step(record, runLog.isLeader);
      },
      event: (record) => {
        runLog.event(record);
        logger.info('event', record);
      },
      leader: (isLeader) => runLog.setLeader(isLeader),
      log: (message) => {
        logger.warn(message);
        if (runLog.isLeader) progress.line(message);
      },
    };
    // preemption: a checkpoint at the next step boundary, then a clean exit; also when it comes during start-up
    if (settings.stopOnSigterm) {
      process.on('SIGTERM', () => {
        this.stopRequested = true;
        this.onStop?.();
      });
    }
  }

  /**
   * Starts MPI, bounded (when it does not start in time, the job ends: see endStartup), then the
   * hang guard, then pins the CPU kernels' level the ranks agree on (when they cannot run one
   * alike, the job ends: one line, exit code 2). A spawned rank then does its work before it is
   * ready (beforeReady) and merges with the ranks that spawned it.
   */
  async start(): Promise<Communicator> {
    // its pid file is written (RunLog): from here on the ranks that give it up can kill it; before, they could only mark it
    if (this.settings.joinId !== undefined && wasGivenUp(this.pidsDir, this.launchRank))
      return leaveUnjoined(
        this.settings.runDir,
        this.launchRank,
        this.joinedAs,
        `the ranks that ${this.settings.woken ? 'woke' : 'spawned'} it gave it up before it started`,
        false,
      );
    this.faults.at(this.settings.startStep, 'startup');
    try {
      ({ world: this.world, joined: this.joinedRun } = await withDeadline(
        init(this.settings.reserves),
        this.bounds.startupMs,
        'MPI start-up',
      ));
    } catch (error) {
      if (this.settings.joinId !== undefined) return this.cannotJoin(error);
      return this.endStartup(error);
    }
    this.disarm = guardAgainstHangs(this.bounds, this.launchRank);
    this.faults.at(this.settings.startStep, 'kernels');
    this.pinned = await this.pinKernels(this.world);
    if (this.joinedRun) {
      this.settings.beforeReady?.();
      try {
        this.world = await this.mergeWithSpawners(this.world);
      } catch (error) {
        return this.cannotJoin(error);
      }
    }
    this.runLog.setLeader(this.world.rank === 0 && !this.joinedRun);
    return this.world;
  }

  /** The job could not start (`error`): see endStartup. */
  private endStartup(error: unknown): Promise<never> {
    return endStartup(
      `ft-train: rank ${this.launchRank}: ${(error as Error).message} (a rank died or hung while starting)`,
      this.pidsDir,
      () => {
        this.runLog.setLeader(true);
        this.observer.event({ event: 'stop', step: this.settings.startStep, reason: 'startup' });
      },
    );
  }

  /** The CPU kernels' level and libraries, the same on every rank (once start() returned). */
  get kernels(): KernelSettings {
    return this.pinned!;
  }

  private async pinKernels(world: Communicator): Promise<KernelSettings> {
    const { isa } = this.settings;
    if (this.joinedRun) {
      // the job's level, which its ranks passed on: a host that cannot run it is lost like a rank that dies joining
      try {
        cpu.pinLevel(isa.level as CpuLevel);
        return cpu.kernelSettings();
      } catch (error) {
        this.logger.error((error as Error).message);
        fs.writeSync(2, `ft-train: rank ${this.launchRank}: ${(error as Error).message}\n`);
        return process.exit(1);
      }
    }
    try {
      return await agreeKernelLevel(world, isa, this.bounds.commMs, (error) => this.logger.error(error.message));
    } catch (error) {
      if (!(error instanceof KernelLevelRefusal)) {
        return this.endStartup(error);
      }
      // every rank reached this refusal alike: one line, then all leave
      if (error.printer === this.launchRank) fs.writeSync(2, `ft-train: ${error.message}\n`);
      this.disarm();
      await withDeadline(finalize(), this.bounds.commMs, 'MPI_Finalize').catch(() => undefined);
      return process.exit(2);
    }
  }

  /**
   * A spawned rank, its code loaded: it tells the ranks that spawned it, which merge with it at
   * their next step's end (bounded: they may have given it up, after a failure of theirs).
   */
  private async mergeWithSpawners(link: Communicator): Promise<Communicator> {
    this.faults.at(this.settings.startStep, 'ready');
    const merged = await withDeadline(link.merge(), this.bounds.commMs, 'the merge with the ranks that spawned it');
    await link.free();
    return merged;
  }

  /** This joining rank leaves for `error` (leaveUnjoined: past a deadline, killing the job's ranks found stopped first). */
  private cannotJoin(error: unknown): never {
    return leaveUnjoined(this.settings.runDir, this.launchRank, this.joinedAs, (error as Error).message, error instanceof CommTimeoutError);
  }

  /** How this rank came to join a running job (set only on one that does). */
  private get joinedAs(): 'spawned' | 'woken' {
    return this.settings.woken ? 'woken' : 'spawned';
  }

  /** Whether this rank was spawned into a running job. */
  get joined(): boolean {
    return this.joinedRun;
  }

  /** Whether this rank belongs to the launch's own job: started by the launch (a woken reserve too), not spawned. */
  get ofLaunchJob(): boolean {
    return !this.joinedRun || this.settings.woken === true;
  }

  /** This rank's id in the job (world rank; a spawned rank's id comes after the launch's). */
  get worldRank(): number {
    return this.world!.worldRanks[this.world!.rank];
  }

  /** `stop` runs on SIGTERM (at once, if one came already). */
  stopWith(stop: () => void): void {
    this.onStop = stop;
    if (this.stopRequested) stop();
  }

  /**
   * The run stopped with `error` (a ProtocolStop, or this rank's own error, which the Manager turns
   * into a stop of every rank): the stop's one line, and its exit code. `checkpointDir`, or else
   * `resumedFrom` (the checkpoint the run resumed from): where the lines point a user to resume from.
   */
  async stopped(
    error: unknown,
    manager: Manager,
    checkpointDir: string,
    resumedFrom: string | undefined,
  ): Promise<{ code: number; leave: boolean }> {
    this.progress.endBar(); // the stop's lines print below the bar, which stays where the run stopped
    const stop = error instanceof ProtocolStop ? error : await this.stopForError(error as Error, manager);
    this.logger.warn(`${stopLogPrefix(stop.reason)}${stop.message}`);
    // every stop but the minority's is recorded (sigterm and min-ranks by the Manager): launch/ft-run
    // sees by it that the run ended, and bounds its wait for an mpirun that waits on a host it cannot reach
    if ((stop.reason === 'error' || stop.reason === 'state-lost' || stop.reason === 'corruption') && manager.world.isLeader)
      this.observer.event({
        event: 'stop',
        step: manager.step,
        reason: stop.reason,
        ...(stop.reason === 'error' ? { ranks: stop.erred } : {}),
      });
    if (stop.reason === 'minority') {
      // the other side trains on and owns the run directory: one line from this side's lowest rank, nothing written
      if (this.worldRank === manager.world.liveRanks[0]) console.error(`ft-train: rank ${this.worldRank}: ${stop.message}`);
      this.disarm();
      return { code: stop.exitCode, leave: true };
    }
    if (stop.reason === 'unrecoverable') {
      // MPI cannot be trusted to finish, nor to say which rank prints: as at a failed start-up, the
      // first survivor to claim the line prints it, kills the job's other ranks on this host (a
      // stopped one would keep mpirun alive) and, once they are gone, exits with the code last
      // (mpirun returns at the first non-zero exit); the others leave quietly, exit 0. Survivors
      // that each killed the other left mpirun nothing but signals, and it exited 0.
      this.disarm();
      if (!claimStopLine(this.pidsDir)) return { code: 0, leave: true };
      console.error(`ft-train: rank ${this.worldRank}: ${stop.message}`);
      // the rank that claimed the line records the stop, leader or not (the others write nothing more)
      this.runLog.setLeader(true);
      this.observer.event({ event: 'stop', step: manager.step, reason: 'unrecoverable' });
      const others = this.world!.worldRanks.filter((r) => r !== this.worldRank);
      killDeclaredDead(this.pidsDir, others);
      await peersGone(this.pidsDir, others, this.bounds.commMs);
      return { code: stop.exitCode, leave: true };
    }
    if (manager.world.isLeader && stop.reason === 'corruption') this.progress.line(stop.message);
    else if (manager.world.isLeader && stop.reason === 'state-lost')
      this.progress.line(`${stop.message}; stopping: ${newestCheckpoint(checkpointDir, resumedFrom)}`);
    else if (manager.world.isLeader && stop.reason !== 'error')
      this.progress.line(`${stop.message}; continue with --resume ${stop.checkpoint ?? checkpointDir}`);
    return { code: stop.exitCode, leave: false };
  }

  /** The bounded end of a run that reached its end or a clean stop: the process's exit code. */
  async end(code: number, manager: Manager, dataset: Dataset): Promise<number> {
    await dataset.close();
    // armed until here: the comm thread's idle progress sends the failure detector's heartbeats
    // while the leader removes the spare checkpoint file (bounded by the disk deadline)
    await withDeadline(manager.close(), this.bounds.commMs, 'MPI_Comm_free').catch(() => undefined);
    this.disarm();
    this.runLog.close();
    const finalized = await withDeadline(finalize(), this.bounds.commMs, 'MPI_Finalize').then(
      () => true,
      () => false,
    );
    // a finalize that never returns would keep the process alive: every rank has agreed on the end already
    if (!finalized) exitNow(code);
    return code === 0 ? 0 : this.exitLast(code, manager);
  }

  /**
   * This rank met an error of its own after MPI started: every survivor must reach the same
   * decision in bounded time, so the Manager makes them all stop; the lowest rank that erred prints
   * its error as the job's one line.
   */
  private async stopForError(error: Error, manager: Manager): Promise<ProtocolStop> {
    this.logger.error(error.stack ?? String(error));
    const stop = await manager
      .reportError()
      .catch((failure: unknown) => new ProtocolStop('unrecoverable', `the job could not stop together: ${(failure as Error).message}`));
    if (stop.erred[0] === this.worldRank || stop.reason !== 'error') console.error(`ft-train: rank ${this.worldRank}: ${error.message}`);
    return stop;
  }

  /**
   * The exit code of a job that stops with `code`. Under --with-ft ulfm, mpirun returns as soon as
   * one rank exits non-zero, leaving the others to finish on their own: so the other ranks exit 0
   * and the leader, last, with `code` once they are gone from this host (mpirun waits for ranks
   * that exit 0, on any host).
   */
  private async exitLast(code: number, manager: Manager): Promise<number> {
    if (!manager.world.isLeader) return 0;
    await peersGone(
      this.pidsDir,
      manager.world.liveRanks.filter((rank) => rank !== manager.world.worldRank),
      this.bounds.commMs,
    );
    return code;
  }
}
