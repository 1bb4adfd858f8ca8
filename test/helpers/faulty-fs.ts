// A FUSE mount of test/helpers/faulty_fs.py over a scratch directory: a real file system whose
// writes can be made to stall (a stuck disk; or only a spare checkpoint file's refill), and whose renames onto a checkpoint's name
// can fail, switched by the faults written to its control file; it records every write.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { repoRoot } from './mpi-job';

export type DiskFault = 'stall' | 'stall-refill' | 'fail-rename';

export interface FaultyFs {
  /** where the file system is mounted */
  mountpoint: string;
  /** what is stored under it */
  backing: string;
  /** from now on, these faults and no others */
  set(faults: DiskFault[]): void;
  /** every write so far, in order: the path (from the mount's root) and its bytes */
  writes(): { path: string; bytes: number }[];
  /** lifts every fault, unmounts and ends the file system's process */
  unmount(): Promise<void>;
}

const python = '/usr/bin/python3';

/** Why a faulty file system cannot be mounted here, or undefined. */
export function faultyFsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'mounting a FUSE file system needs root';
  if (!fs.existsSync('/dev/fuse')) return 'no /dev/fuse';
  try {
    execFileSync(python, ['-c', 'import fuse'], { stdio: 'ignore' });
    execFileSync('fusermount', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'python3-fuse (and fuse) not installed: launch/setup installs them';
  }
  return undefined;
}

const mounted = (dir: string): boolean => fs.readFileSync('/proc/mounts', 'utf8').includes(` ${dir} fuse`);

/** Mounts a faulty file system in `dir` (made), with `faults` from the start. */
export async function mountFaultyFs(dir: string, faults: DiskFault[] = []): Promise<FaultyFs> {
  const [mountpoint, backing, control] = ['mnt', 'backing', 'control'].map((name) => path.join(dir, name));
  fs.mkdirSync(mountpoint, { recursive: true });
  fs.mkdirSync(backing, { recursive: true });
  const set = (list: DiskFault[]): void => fs.writeFileSync(control, list.join('\n') + '\n');
  set(faults);
  const daemon: ChildProcess = spawn(
    python,
    [path.join(repoRoot, 'test', 'helpers', 'faulty_fs.py'), mountpoint, '-f', '-o', `root=${backing},control=${control}`],
    { stdio: 'ignore' },
  );
  for (const deadline = Date.now() + 10_000; !mounted(mountpoint);) {
    if (Date.now() > deadline || daemon.exitCode !== null) {
      daemon.kill('SIGKILL');
      throw new Error(`faulty_fs.py did not mount ${mountpoint} within 10 s`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    mountpoint,
    backing,
    set,
    writes: () =>
      (fs.existsSync(`${control}.writes`) ? fs.readFileSync(`${control}.writes`, 'utf8').trim().split('\n') : [])
        .filter(Boolean)
        .map((line) => {
          const at = line.lastIndexOf(' ');
          return { path: line.slice(0, at), bytes: Number(line.slice(at + 1)) };
        }),
    async unmount() {
      set([]);
      execFileSync('fusermount', ['-u', '-z', mountpoint]);
      const ended = new Promise((resolve) => daemon.once('exit', resolve));
      daemon.kill('SIGTERM');
      await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, 5000))]);
      if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
    },
  };
}

/** Runs `body` with a faulty file system mounted in `dir` (unmounted after), or skips `test` with one line where none can be mounted. */
export async function withFaultyFs(
  test: Mocha.Context,
  dir: string,
  faults: DiskFault[],
  body: (disk: FaultyFs) => Promise<void>,
): Promise<void> {
  const why = faultyFsUnavailable();
  if (why) {
    console.log(`      skipped: ${why}`);
    test.skip();
  }
  const disk = await mountFaultyFs(dir, faults);
  try {
    await body(disk);
  } finally {
    await disk.unmount();
  }
}
