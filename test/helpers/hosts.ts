// Test hosts for multi-host jobs, for the tests and bench/recovery: launch/netns-hosts makes them
// (network and UTS namespaces on this machine, an sshd each) and removes them, also when a test
// fails. It needs root, ip and sshd; without them the caller skips with the reason this gives.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { repoRoot } from './mpi-job';

const netnsHosts = path.join(repoRoot, 'launch', 'netns-hosts');
const dir = process.env.FT_NETNS_DIR ?? '/run/ft-netns-hosts';

export interface Hosts {
  /** host1..hostN, slots=2 each */
  hostfile: string;
  sshConfig: string;
  /** the command prefix that runs a command on `host` */
  on(host: string): string[];
  /** brings `host`'s link back up after a cut */
  mend(host: string): void;
}

/** Why multi-host tests cannot run here, or undefined when they can. */
export function hostsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'not root (network namespaces need it)';
  if (!fs.existsSync('/usr/sbin/sshd')) return 'no sshd (launch/setup installs openssh-server)';
  return undefined;
}

export function hostsUp(count: number): Hosts {
  execFileSync(netnsHosts, ['up', String(count)], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60_000 });
  return {
    hostfile: path.join(dir, 'hostfile'),
    sshConfig: path.join(dir, 'ssh_config'),
    on: (host) => [netnsHosts, 'exec', host],
    mend: (host) => execFileSync(netnsHosts, ['mend', host], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60_000 }),
  };
}

export function hostsDown(): void {
  execFileSync(netnsHosts, ['down'], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60_000 });
}
