// The run directory's pids/: each rank writes "PID HOSTNAME" there (RunLog); launchers and survivors
// read it to signal a rank of this job. A pid file only names a candidate: the process counts as that
// rank while it runs on this host and its environment still carries the job's marks (a pid file left
// by an earlier job, a recycled pid or a rank on another host does not).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** A pid file's text for this process. */
export function pidFileText(): string {
  return `${process.pid} ${os.hostname()}\n`;
}

/** The world ranks with a pid file, ascending. */
export function rankList(pidsDir: string): number[] {
  return fs.existsSync(pidsDir) ? fs.readdirSync(pidsDir).map(Number).filter(Number.isSafeInteger).sort((a, b) => a - b) : [];
}

/** The pid and host world rank `rank` wrote, or null without a readable pid file. */
export function readPidFile(pidsDir: string, rank: number): { pid: number; host: string } | null {
  let text: string;
  try {
    text = fs.readFileSync(path.join(pidsDir, String(rank)), 'utf8');
  } catch {
    return null;
  }
  const [pid, host = ''] = text.trim().split(' ');
  return Number.isSafeInteger(Number(pid)) ? { pid: Number(pid), host } : null;
}

/** The pid world rank `rank` wrote if it ran on this host, else null. */
export function readPid(pidsDir: string, rank: number): number | null {
  const file = readPidFile(pidsDir, rank);
  return file !== null && file.host === os.hostname() ? file.pid : null;
}

/** A process's environment ("NAME=value" entries), or null when it is gone or not ours to read. */
export function environOf(pid: number): string[] | null {
  try {
    return fs.readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0');
  } catch {
    return null;
  }
}

/** The pid of rank `rank` while that process runs on this host with every one of `marks` in its environment. */
export function rankProcess(pidsDir: string, rank: number, marks: readonly string[]): number | null {
  const pid = readPid(pidsDir, rank);
  const environ = pid === null ? null : environOf(pid);
  return environ !== null && marks.every((mark) => environ.includes(mark)) ? pid : null;
}

/**
 * Sends `signal` to each of `ranks` whose process runs on this host with the marks `marksOf(rank)`
 * gives; a process that ends in the meantime is skipped. The ranks signalled.
 */
export function signalRanks(pidsDir: string, ranks: readonly number[], marksOf: (rank: number) => readonly string[], signal: NodeJS.Signals): number[] {
  const signalled: number[] = [];
  for (const rank of ranks) {
    const pid = rankProcess(pidsDir, rank, marksOf(rank));
    if (pid === null) continue;
    try {
      process.kill(pid, signal);
      signalled.push(rank);
    } catch {
      // it ended between the check and the signal
    }
  }
  return signalled;
}
