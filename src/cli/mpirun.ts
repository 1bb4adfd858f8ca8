// How ft-train starts MPI jobs: the ULFM Open MPI's mpirun with fault tolerance and its hang
// detector on, oversubscribing only when there are more ranks than slots. launch/ft-run,
// launch/drill, launch/compare, the MPI tests and the benchmarks all build their command here, so
// every job runs with the same settings.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { slurmAllocation } from './slurm';
import { defaultHangTimeoutS } from '../api/train-settings';

export { defaultHangTimeoutS };

/** Prefix of the Open MPI build with ULFM (launch/setup makes it). */
export const mpiHome = process.env.FT_MPI_HOME ?? '/opt/ompi-ulfm';

/** The script every rank of an ft-train job runs. */
const ftTrainScript = path.join(__dirname, '..', '..', '..', 'launch', 'ft-train.js');

export interface MpirunOptions {
  /** Number of ranks. */
  ranks: number;
  /** The command each rank runs, e.g. [process.execPath, script, ...args]. */
  program: string[];
  /** An Open MPI hostfile: passed to mpirun, and its slots decide oversubscription. */
  hostfile?: string;
  /** An ssh client configuration (ssh -F) for reaching the hosts. */
  sshConfig?: string;
  /** Seconds a rank may stay silent before it is declared dead (default defaultHangTimeoutS). */
  hangTimeoutS?: number;
  /** Compute threads per rank (default 1). */
  threads?: number;
  /** Hot spares and reserves among the ranks (default 0): beyond the slots, ranks are then left unbound. */
  spares?: number;
}

export interface Command {
  command: string;
  args: string[];
  /** the environment to run it in: this process's, plus `envSet` */
  env: NodeJS.ProcessEnv;
  /** the variables the command needs set (launch/ft-run --dry-run prints them) */
  envSet: Record<string, string>;
  /** the hosts the ranks may be placed on (the hostfile's, the Slurm allocation's, or this one) */
  hosts: number;
}

/**
 * ULFM's heartbeat failure detector, tied to ft-train's --hang-timeout. It is off by default, and
 * then a rank that is alive but stuck (SIGSTOP, a kernel that never returns) leaves the others
 * waiting forever; on, a rank silent for `hangTimeoutS` is declared dead and the survivors repair
 * as after a kill -9 (docs/architecture.md, "Hangs and deadlines"; here a SIGSTOPped rank of 2 was
 * declared dead 1.6 s into a 2 s timeout). A heartbeat every quarter of the timeout, so one late
 * beat is no failure.
 * Beats are sent from MPI's progress, not from a thread of their own: with
 * mpi_ft_detector_thread true (which wants MPI_THREAD_MULTIPLE; the addon asks for FUNNELED) every
 * job hung in MPI_Finalize after training, at 0.5/2, 1/4 and 7.5/30 s. The cost: a rank that
 * stays out of MPI (one long kernel, a long write) for longer than the timeout is taken for hung.
 */
function detectorSettings(hangTimeoutS: number): string[] {
  return [
    '--mca',
    'mpi_ft_detector',
    'true',
    '--mca',
    'mpi_ft_detector_thread',
    'false',
    '--mca',
    'mpi_ft_detector_period',
    String(hangTimeoutS / 4),
    '--mca',
    'mpi_ft_detector_timeout',
    String(hangTimeoutS),
  ];
}

/** One host line of an Open MPI hostfile: the host, its slots (`slots=K`, else 1) and the line as written. */
export interface HostLine {
  host: string;
  slots: number;
  line: string;
}

/** The host lines of an Open MPI hostfile; one line for a file it cannot read or a line it cannot parse. */
export function readHostfile(file: string): HostLine[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new Error(`${file}: cannot read the hostfile (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, {
      cause: error,
    });
  }
  const hosts: HostLine[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const [host, ...settings] = line.split(/\s+/);
    const bad = () => new Error(`${file}:${index + 1}: expected "HOST [slots=K] [key=value ...]" with K an integer >= 1, got "${line}"`);
    if (host.includes('=')) throw bad();
    let slots = 1;
    for (const setting of settings) {
      const match = /^([\w-]+)=(\S+)$/.exec(setting);
      if (!match) throw bad();
      if (match[1] !== 'slots') continue; // max_slots and the like: mpirun's business
      if (!/^[1-9]\d*$/.test(match[2])) throw bad();
      slots = Number(match[2]);
    }
    hosts.push({ host, slots, line });
  });
  if (hosts.length === 0) throw new Error(`${file}: the hostfile names no host`);
  return hosts;
}

/** A hostfile's distinct hosts and its slots in all. */
function hostfileSlots(file: string): { hosts: number; slots: number } {
  const lines = readHostfile(file);
  return { hosts: new Set(lines.map((l) => l.host)).size, slots: lines.reduce((sum, l) => sum + l.slots, 0) };
}

/**
 * Where a job's ranks go: the hostfile's hosts and slots; else, inside a Slurm allocation, its
 * nodes and slots (mpirun reads the allocation itself; more ranks than it holds are refused here,
 * in one line, rather than by mpirun); else this machine's cores.
 */
function placesOf(options: MpirunOptions): { hosts: number; slots: number } {
  if (options.hostfile !== undefined) return hostfileSlots(options.hostfile);
  const allocation = slurmAllocation(process.env);
  if (allocation === undefined) return { hosts: 1, slots: os.availableParallelism() };
  const slots = allocation.reduce((sum, node) => sum + node.slots, 0);
  if (options.ranks > slots)
    throw new Error(
      `the Slurm allocation (job ${process.env.SLURM_JOB_ID}) has ${slots} slot(s) on ${allocation.length} node(s) (${allocation.map((n) => `${n.host}: ${n.slots}`).join(', ')}), fewer than -n ${options.ranks}`,
    );
  return { hosts: allocation.length, slots };
}

/** The variables that mark a job's processes (job-processes.ts): mpirun passes them to ranks on other hosts too. */
const jobMarkers = ['FT_RUN_JOB', 'FT_TEST_JOB', 'FT_BENCH_JOB'];

/**
 * What a job across hosts needs (docs/drills.md, "Several hosts"), set for every job since a batch
 * scheduler spreads one without a hostfile:
 * - --prefix: the daemons that ssh starts find prted and MPI's libraries where this mpirun lives;
 * - coll ^han: the hierarchical collectives, chosen only with more than one host, are not fault
 *   tolerant (an allreduce that lost a rank returned wrong sums as MPI_SUCCESS; shrink hung);
 * - mpi_add_procs_cutoff: every peer's connection data is fetched at start-up, not lazily in the
 *   middle of a shrink, where the PMIx lookup of a dead host's rank hung;
 * - mpi_ft_propagator_with_rbcast: a failure is spread by the ranks themselves, so the far side of
 *   a cut link learns of it (without, the ranks there never heard);
 * - the markers of the job, passed to ranks that ssh starts with a bare environment;
 * - ssh through `sshConfig`, when given.
 */
function clusterSettings(sshConfig: string | undefined): string[] {
  return [
    '--prefix',
    mpiHome,
    '--mca',
    'coll',
    '^han',
    '--mca',
    'mpi_add_procs_cutoff',
    '1024',
    '--mca',
    'mpi_ft_propagator_with_rbcast',
    'true',
    ...jobMarkers.flatMap((name) => ['-x', name]),
    ...(sshConfig !== undefined ? ['--prtemca', 'plm_ssh_agent', `ssh -F ${sshConfig}`] : []),
  ];
}

/**
 * libnbc's ring for MPI_Iallreduce (the comm thread's allreduce is non-blocking, so that a wait can
 * be bounded): its default for an in-place call, a binomial reduce then broadcast, took 2.1 ms for
 * 4 MiB at 2 ranks here, against 0.55 ms for the blocking MPI_Allreduce and 0.42 ms for the ring.
 */
const collectiveSettings = ['--mca', 'coll_libnbc_iallreduce_algorithm', 'ring'];

/**
 * How often MPI's progress runs its event loop: every 1 ms rather than Open MPI's 10 ms. The
 * runtime's notice of a dead rank reaches a survivor as an event there, so on one host (shared
 * memory, no socket to see close) a rank waiting in a call learnt of a kill up to 10 ms after the
 * notice came. Drills at 4 ranks on 2 cores (kill -9 mid-step, 12 each): the first failure seen
 * 12 ms after the kill (median) against 18. The loop's poll costs one system call per tick.
 */
const progressSettings = ['--mca', 'mpi_event_tick_rate', '1000'];

/**
 * Where a rank's threads may run. mpirun binds each rank to one core by default (at up to 2 ranks),
 * and a rank's compute threads and comm thread then share that core. Where the slots allow, each
 * rank gets T + 1 cores of its own, T for its T compute threads and one for its comm thread (which
 * exact mode then overlaps with backward: see comm's canOverlap); else T cores; else, with T > 1,
 * the cores are left to the OS. Ranks of one thread beyond the slots are still bound a core each,
 * several to a core: a rank's comm thread then hands back to its main thread on the same core
 * (at 4 ranks on 2 cores a 4 KiB allreduce took 57 us so, against 85 unbound). Not so with hot
 * spares or reserves (`spares`, which counts both): mpirun binds in blocks of consecutive ranks, and a spare takes a lost rank's
 * place on whatever core it was given, so working ranks bound side by side stay so, where the OS
 * would spread them (lenet, 4 working ranks and a spare on 2 cores: a step took 17.0 ms bound, 3
 * working ranks sharing core 0, against 11.9 unbound; after a kill the spare covered, 9.6-10.0 ms
 * bound where two working ranks were left to a core, 17.2 where three, against 9.6-10.1 unbound).
 *
 * Across hosts the ranks are dealt to them in turn (rank r on host r mod H while every host has
 * slots left), not a host's slots filled first. ULFM's detector watches a ring of the ranks, each
 * rank its neighbour, and finds a silent rank only after the one before it in the ring: a host cut
 * off with its K ranks side by side took K hang timeouts to be declared lost (6 ranks on 3 hosts,
 * 2 s: 5.8 s), dealt out each is watched from another host. Placement groups of consecutive
 * ranks (sharded state's replicas) then also span hosts.
 */
function bindingSettings(ranks: number, threads: number, spares: number, { hosts, slots }: { hosts: number; slots: number }): string[] {
  const order = hosts > 1 ? 'node' : 'slot';
  if (ranks * (threads + 1) <= slots) return ['--map-by', `${order}:PE=${threads + 1}`];
  const map = hosts > 1 ? ['--map-by', order] : [];
  if (threads <= 1) return ranks <= slots ? map : [...map, '--bind-to', spares > 0 ? 'none' : 'core:overload-allowed'];
  return ranks * threads <= slots ? ['--map-by', `${order}:PE=${threads}`] : [...map, '--bind-to', 'none'];
}

/**
 * A SIGTERM is the ranks' to answer (ft-train checkpoints and stops on it), not the runtime's: a
 * scheduler's stop (Slurm's requeue, preemption, time limit or scancel; systemd's) signals every
 * process of the job, and PRRTE ends the job on it (SIGCONT, SIGTERM 250 ms later, SIGKILL 250 ms
 * after that), cutting the ranks' checkpoint short. So mpirun, and under Slurm its daemons (srun
 * starts them in a job step, which the signal reaches too), start with SIGTERM blocked: a blocked
 * signal stays blocked across exec, and PRRTE unblocks every signal for the ranks it starts. SIGINT
 * still ends the job (runtimeStopSignal).
 */
const sigtermBlocked = ['env', '--block-signal=TERM'];

/** The signal that makes mpirun end the job: its SIGTERM is blocked (sigtermBlocked). */
export const runtimeStopSignal = 'SIGINT';

/**
 * `env --block-signal=TERM mpirun --with-ft ulfm [--oversubscribe] -n N [--hostfile F] <binding> <cluster> [<daemons under Slurm>] <collectives> <progress> <detector> <program>`: without
 * --with-ft a dead rank ends the whole job; oversubscription (more ranks than slots: this machine's
 * cores, or the hostfile's slots) lets tests and drills run 4 or 8 ranks on a laptop; root needs
 * Open MPI's explicit consent.
 */
export function mpirunCommand(options: MpirunOptions): Command {
  const { hosts, slots } = placesOf(options);
  const inSlurm = process.env.SLURM_JOB_ID !== undefined;
  const envSet: Record<string, string> = {
    ...(process.getuid?.() === 0 ? { OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' } : {}),
    // inside Slurm, mpirun starts its daemons with srun: their step may share CPUs with others, since
    // the step of a job that lost a node stays until that node answers, holding its CPUs on the nodes
    // still there, and a restart's daemons would wait for them
    ...(inSlurm ? { SLURM_OVERLAP: '1' } : {}),
  };
  const [command, ...blocking] = sigtermBlocked;
  return {
    command,
    args: [
      ...blocking,
      path.join(mpiHome, 'bin', 'mpirun'),
      '--with-ft',
      'ulfm',
      ...(options.ranks > slots ? ['--oversubscribe'] : []),
      '-n',
      String(options.ranks),
      ...(options.hostfile !== undefined ? ['--hostfile', options.hostfile] : []),
      ...bindingSettings(options.ranks, options.threads ?? 1, options.spares ?? 0, { hosts, slots }),
      ...clusterSettings(options.sshConfig),
      ...(inSlurm ? ['--prtemca', 'prte_launch_agent', [...sigtermBlocked, 'prted'].join(' ')] : []),
      ...collectiveSettings,
      ...progressSettings,
      ...detectorSettings(options.hangTimeoutS ?? defaultHangTimeoutS),
      ...options.program,
    ],
    env: { ...process.env, ...envSet },
    envSet,
    hosts,
  };
}

/** The value of ft-train's `--name` in `args` as its parser reads it (`--name V`, `--name=V`, camelCase); the last counts. */
export function trainFlag(args: string[], name: string): string | undefined {
  const camel = name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
  let value: string | undefined;
  args.forEach((arg, at) => {
    for (const flag of [`--${name}`, `--${camel}`]) {
      if (arg === flag && at + 1 < args.length) value = args[at + 1];
      else if (arg.startsWith(`${flag}=`)) value = arg.slice(flag.length + 1);
    }
  });
  return value;
}

/** ft-train's --hang-timeout in `trainArgs` (defaultHangTimeoutS when absent); one line if it is no number > 0. */
export function hangTimeoutOf(trainArgs: string[]): number {
  const text = trainFlag(trainArgs, 'hang-timeout');
  if (text === undefined) return defaultHangTimeoutS;
  const seconds = Number(text);
  if (!(Number.isFinite(seconds) && seconds > 0)) throw new Error(`--hang-timeout expects seconds > 0, got "${text}"`);
  return seconds;
}

/** ft-train's whole-number flag `--name` in `trainArgs`, at least `least` (`least` when absent or not one: ft-train itself refuses it in one line). */
function wholeFlagOf(trainArgs: string[], name: string, least: number): number {
  const value = Number(trainFlag(trainArgs, name) ?? least);
  return Number.isSafeInteger(value) && value >= least ? value : least;
}

/**
 * Node's flags on every rank: V8's garbage collector on the main thread only. A rank's heap is
 * small, and past start-up only a recovery allocates much (the lost shards' buffers); a collection
 * then lands in the JIT checkpoint, where the collector's helper threads share the rank's core with
 * the main thread, which waits on each of them in turn (lenet at 2 ranks: the checkpoint's median
 * 14 ms with them, 7 without).
 */
const rankNodeFlags = ['--single-threaded-gc'];

/**
 * mpirun running ft-train (or `script`, a program over the library) with `trainArgs` on `ranks`
 * ranks; the hang detector follows its --hang-timeout, the ranks' cores its --threads.
 */
export function trainCommand(
  ranks: number,
  trainArgs: string[],
  hosts: { hostfile?: string; sshConfig?: string } = {},
  script = ftTrainScript,
): Command {
  return mpirunCommand({
    ranks,
    ...hosts,
    hangTimeoutS: hangTimeoutOf(trainArgs),
    threads: wholeFlagOf(trainArgs, 'threads', 1),
    // a woken reserve, too, takes a lost rank's place on the core it was given
    spares: wholeFlagOf(trainArgs, 'spares', 0) + wholeFlagOf(trainArgs, 'reserves', 0),
    program: [process.execPath, ...rankNodeFlags, script, ...trainArgs],
  });
}

/** Throws one line unless mpiHome holds an Open MPI whose ompi_info reports "FT MPI support: yes". */
export function checkUlfm(): void {
  const ompiInfo = path.join(mpiHome, 'bin', 'ompi_info');
  let info: string;
  try {
    info = execFileSync(ompiInfo, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 30_000 });
  } catch {
    throw new Error(`${ompiInfo} does not run: no Open MPI with ULFM in ${mpiHome}; launch/setup builds one (or set FT_MPI_HOME)`);
  }
  if (!/FT MPI support:\s*yes/.test(info))
    throw new Error(
      `the Open MPI in ${mpiHome} has no ULFM (ompi_info lacks "FT MPI support: yes"); launch/setup builds one (or set FT_MPI_HOME)`,
    );
}

/**
 * Open MPI 5.0's non-blocking collectives (libnbc) print "NBC_Progress: an error N was found during
 * schedule ... - aborting the schedule" on every rank whose collective a failure interrupts, and
 * its libevent "[warn] Epoll ADD(4) on fd N failed. ..." where a peer on another host died, with no
 * setting to silence either. ft-train reports each failure in its own line, so the launchers pass
 * the job's stderr on without those lines (and the blank line after the first).
 */
export function forwardJobStderr(stderr: NodeJS.ReadableStream, to: NodeJS.WritableStream = process.stderr): void {
  let pending = '';
  let dropBlank = false;
  stderr.setEncoding('utf8');
  stderr.on('data', (chunk: string) => {
    const lines = (pending + chunk).split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      if (
        /^NBC_Progress: an error \d+ was found during schedule /.test(line) ||
        /^\[warn\] Epoll ADD\(\d+\) on fd \d+ failed\./.test(line)
      ) {
        dropBlank = true;
        continue;
      }
      if (!(dropBlank && line === '')) to.write(`${line}\n`);
      dropBlank = false;
    }
  });
  stderr.on('end', () => {
    // a last line without its newline (PRRTE's banners end in a space): the launcher's own lines start fresh
    if (pending) to.write(`${pending}\n`);
  });
}
