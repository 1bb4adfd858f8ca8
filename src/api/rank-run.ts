// One rank's run, wired once for both front doors (train() and the custom loop's elastic()): the
// checks before MPI starts (run-checks.ts), the bounded start of the job, the Manager and its settings, the start and done lines, the loop, the
// final write (voted) with one summary writer, and every way the run stops (one line, one exit
// code). A front door only says what its loop is: how it checks its inputs, what fixes its result
// (the identity), and how it trains, restores and writes its state.
import * as path from 'node:path';
import { prepareStripeWriter } from '../checkpoint/checkpoint';
import { canOverlap, exitNow, type Communicator } from '../comm';
import type { Dataset } from '../data/dataset';
import type { CpuLevel, KernelSettings } from '../nn/backend';
import { cpu } from '../nn/cpu';
import { drillText, firedPoints, unfired } from '../liveness/drills';
import { inputErrorWaitMs } from '../liveness/hang-bounds';
import type { Failure, ProtocolObserver } from '../protocol/contracts';
import { Manager } from '../protocol/manager';
import { levelAsked } from '../rank/kernel-level';
import { lossesText, RankJob } from '../rank/job';
import { launcherLocalRank, launcherWorldRank, launcherWorldSize } from '../rank/launcher-env';
import { runFiles } from '../run/files';
import type { Summary } from '../run/records';
import { runSettings } from '../run/settings';
import { writeSummary } from '../run/writer';
import { formatRedundancy } from '../sharding/placement';
import { type Ranges, Optimizer } from '../solver/optimizer';
import { respawnCommand, spawnedAs, wokenAs } from './respawn';
import { InputError, openRun, type Resume, type RunInputs } from './run-checks';
import type { TrainOptions } from './train-settings';

export { InputError, type Resume } from './run-checks';

/** How a rank's run ended. */
export interface TrainOutcome<Result> {
  /** the process's exit code (0 done; see api/train.ts for the others) */
  exitCode: number;
  /** the run's result, on every rank that reached the end */
  result?: Result;
}

/** What every run reports, whichever loop trained it (summary.json and the done line). */
export interface RunResult {
  steps: number;
  /** the last step's loss (mean over its global batch) */
  finalLoss: number;
  /** on the test split at the end; null where nothing was evaluated */
  testAccuracy: number | null;
  testLoss: number | null;
  /** the test samples scored; null where nothing was evaluated */
  testSamples: number | null;
  failures: Failure[];
  /** working ranks at the start and at the end */
  worldInitial: number;
  worldFinal: number;
  /** sha256 of the state's bytes (the parameters, then the buffers) */
  paramsSha256: string;
  /** bytes of optimizer state this rank holds, and of what it keeps for peers' redundancy */
  optimizerBytes: { state: number; redundancy: number };
}

/** What a front door's loop is, for the wiring. */
export interface RankDoor<Result extends RunResult> extends RunInputs {
  /** the model's name in the summary */
  label: string;
  /** what the start line says is trained (the label, and how) */
  title: string;
  /** the compute kernels' threads per rank (absent: left as the program set them) */
  threads?: number;
  /** the optimizer the summary names */
  optimizer: string;
  /** the loop, once the job has started (the kernels are pinned) */
  loop(options: TrainOptions, dataset: Dataset, shards: number): RankLoop<Result>;
  /** a spawned rank's kernels made ready at `shards`, the kernels pinned, before it says it is ready (absent: nothing to warm up) */
  warmUp?(dataset: Dataset, shards: number): void;
}

/** A front door's loop: its state's shape for the protocol, its training, its result and files. */
export interface RankLoop<Result extends RunResult> {
  /** exact mode: the length of one shard's contribution to the sum ([gradient | statistics | loss]) */
  sumLength: number;
  /** sharded state: the parameters with one element after them (see solver/step.ts) */
  paramsWithTail: Float32Array;
  /** Where AdamW's weight decay applies (the trainer's matrices); absent: everywhere. */
  decayed?: Ranges;
  /** exact mode: the sum can overlap the backward pass, where the computation reports its progress */
  overlaps: boolean;
  /** the loop under `manager`, reporting to `observer` (before anything else is asked of it) */
  attach(manager: Manager, observer: ProtocolObserver): void;
  /** the run's steps, for the progress bar */
  totalSteps: number;
  /** trains to the end, from `resume` or the start */
  train(resume: Resume | undefined): Promise<void>;
  /** the result as it stands (the world may change during the final write) */
  result(manager: Manager): Result;
  /** the model file(s), by the leader in the final write */
  writeModel(result: Result): void;
  /** what the done line calls the result's hash: params_sha256 (a model's parameters) or state_sha256 (a custom loop's state) */
  hashName: string;
}

/** One rank's whole run with resolved options, through `door`'s loop. */
export async function runRank<Result extends RunResult>(options: TrainOptions, door: RankDoor<Result>): Promise<TrainOutcome<Result>> {
  const started = Date.now();
  // a rank spawned to replace a lost one runs this program again, told its place on the command line
  let spawned = options.respawn ? spawnedAs(process.argv) : undefined;
  if (spawned) Object.assign(options, spawned);
  const opened = await openRun(options, door);
  const { dataset } = opened;
  let { resume } = opened;
  // a reserve sleeps here, its inputs checked and its data open, until woken to replace a lost rank
  const woken = spawned ? undefined : await wokenAs(options, () => dataset.close());
  if (woken) {
    spawned = woken;
    Object.assign(options, woken);
    resume = undefined;
  }
  if (door.threads !== undefined) cpu.setThreads(door.threads);
  const job = new RankJob({
    runDir: options.runDir,
    hangTimeout: options.hangTimeout,
    drills: options.drills,
    seed: options.seed,
    joinId: options.joinId,
    woken: woken !== undefined,
    reserves: options.reserves,
    steps: options.steps,
    stopOnSigterm: options.onFailure !== 'none',
    startStep: resume?.manifest.step ?? options.joinStep ?? 0,
    isa: resume?.isa ?? levelAsked(options.isa),
    beforeReady: spawned
      ? () => {
          door.warmUp?.(dataset, spawned.shards);
          prepareStripeWriter();
        }
      : undefined,
  });
  const world = await job.start();
  const { level } = job.kernels;
  const shards = resume?.manifest.shards ?? options.shards ?? world.size - options.spares;
  const identity = door.identity(dataset, shards, level);
  const loop = door.loop(options, dataset, shards);
  const manager = newManager(options, world, job, dataset, shards, identity, loop, level);
  loop.attach(manager, job.observer);
  job.progress.setTotal(loop.totalSteps);
  job.stopWith(() => manager.requestStop());
  // started_ms: from this process's start to MPI's (a spawned rank's: to its merge with the ranks that spawned it)
  job.logger.info(job.joined ? 'joined' : 'start', { world: world.size, shards, started_ms: performance.now(), options });
  if (job.runLog.isLeader) {
    const working = world.size - options.spares;
    const plural = (n: number, what: string): string => `${n} ${what}${n > 1 ? 's' : ''}`;
    const idle = [
      options.spares > 0 ? plural(options.spares, 'spare') : '',
      options.reserves > 0 ? `${plural(options.reserves, 'reserve')} asleep` : '',
    ].filter(Boolean);
    const spares = idle.length > 0 ? ` (+${idle.join(', ')})` : '';
    job.runLog.event({
      event: 'start',
      world: working,
      spares: options.spares,
      shards,
      on_failure: options.onFailure,
      batch: options.batch,
      isa: level,
      steps: loop.totalSteps,
    });
    job.progress.line(
      `training ${door.title} on ${options.data}: ${working} ranks${spares}, ${shards} shards, global batch ${options.batch}, ` +
        `on failure: ${options.onFailure}, kernels at ${level}; run dir ${options.runDir}`,
    );
    for (const reason of resume?.skipped ?? []) job.progress.line(`${reason}; using ${resume!.dir}`);
  }
  let code = 0;
  let result: Result | undefined;
  try {
    await loop.train(resume);
    await manager.finish(() => {
      const final = loop.result(manager);
      loop.writeModel(final);
      const summary = summaryOf(options, door, shards, final, manager, started, identity, job.kernels);
      const phases = manager.shardedState?.phaseMs;
      writeSummary(options.runDir, phases ? { ...summary, sharded_state_phase_ms: roundedMs(phases) } : summary);
    });
    result = loop.result(manager);
    if (manager.world.isLeader) {
      const lost = lossesText(result.failures);
      const scored = options.evalSamples !== undefined ? ` (the first ${result.testSamples} test samples)` : '';
      const accuracy = result.testAccuracy === null ? '' : `test accuracy ${(result.testAccuracy * 100).toFixed(2)}%${scored}, `;
      job.progress.line(
        `done: ${result.steps} steps, final loss ${result.finalLoss.toFixed(4)}, ${accuracy}${result.worldFinal} of ${result.worldInitial} ranks left` +
          `${lost ? ` (lost ${lost}; ${manager.bytesReadBack} bytes read back)` : ''}, ${loop.hashName} ${result.paramsSha256.slice(0, 16)}`,
      );
      // a drill that silently did nothing would pass a fault drill off as survived
      for (const drill of unfired(options.drills, firedPoints(path.join(options.runDir, runFiles.logs))))
        job.progress.line(
          `warning: --drill ${drillText(drill)} did not fire: rank ${drill.rank} never reached phase ${drill.phase} of step ${drill.step}${drill.action === 'corrupt' ? ' or a later one' : ''}`,
        );
    }
    job.logger.info('end', { ...result });
  } catch (error) {
    const stop = await job.stopped(error, manager, options.checkpointDir, resume?.dir);
    if (stop.leave) return { exitCode: stop.code };
    code = stop.code;
  }
  return { exitCode: await job.end(code, manager, dataset), result };
}

function newManager(
  options: TrainOptions,
  world: Communicator,
  job: RankJob,
  dataset: Dataset,
  shards: number,
  identity: Record<string, unknown>,
  loop: RankLoop<RunResult>,
  level: CpuLevel,
): Manager {
  return new Manager(
    {
      ...options,
      shards,
      identity,
      commTimeoutMs: job.bounds.commMs,
      diskTimeoutMs: job.bounds.diskMs,
      pidsDir: job.pidsDir,
      logFile: job.runLog.logFile,
      spareCheckpoint: (options.onFailure !== 'none' && options.jitCheckpoint) || options.checkpointEvery > 0,
      sumLength: loop.sumLength,
      add: (acc, x) => cpu.addInPlace(acc, x),
      overlap: loop.overlaps && canOverlap(options.threads),
      sharded:
        options.optimizerState === 'sharded'
          ? { optimizer: new Optimizer(options.optimizer, cpu, loop.decayed), params: loop.paramsWithTail, redundancy: options.redundancy }
          : undefined,
      respawn: options.respawn
        ? {
            limit: options.respawnLimit!,
            join: options.respawnJoin,
            // a newcomer has the start-up bound of any rank; where the others wait for it in a vote
            // (--respawn-join wait), half their comm deadline
            giveUpMs: options.respawnJoin === 'wait' ? job.bounds.commMs / 2 : job.bounds.startupMs,
            ...respawnCommand(shards, level),
          }
        : undefined,
      launchJob: job.ofLaunchJob,
      // a joining rank learns of them at the join
      reserves:
        options.reserves > 0 && !job.joined ? { first: launcherWorldSize() - options.reserves, end: launcherWorldSize() } : undefined,
      joined: job.joined,
      joinStep: options.joinStep,
    },
    world,
    dataset,
    dataset.train.layout(shards),
    job.observer,
    job.faults,
  );
}

/** ms to the microsecond, for the summary. */
function roundedMs(phases: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(phases).map(([phase, ms]) => [phase, Math.round(ms * 1000) / 1000]));
}

/** summary.json of a run that reached its end (the Manager's: what every rank read back, the corruptions found). */
function summaryOf(
  options: TrainOptions,
  door: Pick<RankDoor<RunResult>, 'label' | 'optimizer'>,
  shards: number,
  result: RunResult,
  manager: Pick<Manager, 'bytesReadBack' | 'corruptionsFound'>,
  started: number,
  identity: Record<string, unknown>,
  kernels: KernelSettings,
): Summary {
  return {
    status: 'complete',
    steps: result.steps,
    final_loss: result.finalLoss,
    test_accuracy: result.testAccuracy,
    test_loss: result.testLoss,
    test_samples: result.testSamples,
    wall_s: (Date.now() - started) / 1000,
    failures: result.failures,
    ranks_lost: result.failures.reduce((n, f) => n + f.lost.length, 0),
    corruptions: manager.corruptionsFound,
    bytes_read_back: manager.bytesReadBack,
    world_initial: result.worldInitial,
    world_final: result.worldFinal,
    params_sha256: result.paramsSha256,
    model: door.label,
    data: options.data,
    shards,
    on_failure: options.onFailure,
    batch: options.batch,
    seed: options.seed,
    optimizer: door.optimizer,
    optimizer_state: options.optimizerState,
    redundancy: options.optimizerState === 'sharded' ? formatRedundancy(options.redundancy) : null,
    optimizer_state_bytes_per_rank: result.optimizerBytes.state,
    redundancy_bytes_per_rank: result.optimizerBytes.redundancy,
    settings: runSettings({ ...identity, on_failure: options.onFailure }),
    kernels,
  };
}

/**
 * Ends the process the way the ft-train program does once `outcome` settles: the exit code, and a
 * bad input's line printed by world rank 0 (and by the first rank of another host where it was
 * found in files, after a wait). After a run, the process's 'exit' listeners run, then it ends at
 * once: without exit()'s teardown, which would wait for a write still stuck on a dead disk.
 */
export function exitWhenDone(outcome: Promise<TrainOutcome<unknown>>): void {
  outcome.then(
    // the run has written all it owes and finalized: a write still pending on a stuck disk (the
    // spare checkpoint file's fill, a stripe given up on) must not keep the process alive, which
    // process.exit would (libuv joins its thread pool at exit)
    ({ exitCode }) => {
      process.exitCode = exitCode;
      process.emit('exit', exitCode);
      exitNow(exitCode);
    },
    (error: unknown) => {
      if (!(error instanceof InputError)) {
        process.exitCode = 1;
        console.error(`ft-train: ${(error as Error).stack ?? error}`);
        return;
      }
      const rank = launcherWorldRank();
      // world rank 0 prints it and gives the job its exit code; the others exit 0 at once (under
      // --with-ft ulfm mpirun ends the job at its second non-zero exit, which could come before a
      // rank 0 slower to start has printed). Found in files, another host may not find it alike
      // (a path missing there only): its first rank says what it found after a wait, so that
      // rank 0's line comes first, and exits 2, which ends the job
      if (rank === 0) console.error(error.message);
      const speaks = rank === 0 || (!error.everyHost && launcherLocalRank() === 0);
      process.exitCode = speaks ? 2 : 0;
      if (rank !== 0 && speaks)
        setTimeout(() => console.error(error.message.replace(/^ft-train: /, `ft-train: rank ${rank}: `)), inputErrorWaitMs);
    },
  );
}
