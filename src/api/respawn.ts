// A rank spawned to replace a lost one (--respawn) runs the same program again: the command the
// job's ranks spawn, and how the spawned rank learns its place from the arguments appended to it.
import type { CpuLevel } from '../nn/backend';

/**
 * What a rank spawned to replace a lost one runs: this program with this rank's arguments, minus
 * --resume (it receives the run's state from the ranks instead), with the shard count and the
 * kernels' level fixed and its id given (it joins under ids that no rank had).
 */
export function respawnCommand(shards: number, level: CpuLevel): { command: string; args(firstId: number, step: number): string[] } {
  const flags: string[] = [];
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; ++i) {
    const [flag] = argv[i].split('=');
    if (['--resume', '--shards', '--isa', '--join-id', '--join-step'].includes(flag)) {
      if (!argv[i].includes('=')) i += 1;
      continue;
    }
    flags.push(argv[i]);
  }
  return {
    command: process.execPath,
    args: (firstId, step) => [
      ...process.execArgv,
      process.argv[1],
      ...flags,
      '--shards',
      String(shards),
      '--isa',
      level,
      '--join-id',
      String(firstId),
      '--join-step',
      String(step),
    ],
  };
}

/** `--shards S --isa L --join-id J --join-step K` as respawnCommand appends them, if present: this rank was spawned. */
export function spawnedAs(argv: string[]): { shards: number; isa: CpuLevel; joinId: number; joinStep: number } | undefined {
  const at = argv.lastIndexOf('--join-id');
  const stepAt = argv.lastIndexOf('--join-step');
  const shardsAt = argv.lastIndexOf('--shards');
  const isaAt = argv.lastIndexOf('--isa');
  if (at < 0 || stepAt < 0 || shardsAt < 0 || isaAt < 0) return undefined;
  return {
    shards: Number(argv[shardsAt + 1]),
    isa: argv[isaAt + 1] as CpuLevel,
    joinId: Number(argv[at + 1]),
    joinStep: Number(argv[stepAt + 1]),
  };
}
