// ft-report --serve: the report of runs still going, served on 127.0.0.1 and kept current. Every
// second the server looks at the run directories' files (metrics.jsonl and events.jsonl grow as the
// runs go, summary.json appears at the end) and renders the page again when they changed; the page
// asks for the version it shows every second and, when a newer one exists, swaps in the new body
// without a reload (html.ts). A half-written last line leaves the page as it was until the next look.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { runFiles } from '../run/files';
import { baselineRun, livePage, readRuns, type ReportInput } from './report';

/** How often the server looks at the run directories. */
const lookMs = 1000;

export interface LiveReportSettings {
  title: string;
  projection?: ReportInput['projection'];
  /** compare every run with this run directory's */
  baseline?: string;
}

export interface LiveReport {
  url: string;
  /** how many of the run directories the page shows now */
  runs(): number;
  /** stops looking and serving; resolves once every connection is closed */
  close(): Promise<void>;
}

/** The state of the run directories' files: changes whenever a run commits a step, records an event or finishes. */
export function runsVersion(dirs: string[]): string {
  const hash = createHash('sha256');
  for (const dir of dirs)
    for (const name of [runFiles.metrics, runFiles.events, runFiles.summary]) {
      const stat = fs.statSync(path.join(dir, name), { throwIfNoEntry: false });
      hash.update(`${dir}/${name}:${stat ? `${stat.size}:${stat.mtimeMs}` : '-'}\n`);
    }
  return hash.digest('hex').slice(0, 16);
}

/**
 * Serves the report of `dirs` on 127.0.0.1:`port` (0: any free port). Rejects with the listen error
 * (EADDRINUSE for a port in use) before anything is served.
 */
export async function serveReport(dirs: string[], settings: LiveReportSettings, port: number): Promise<LiveReport> {
  const server = http.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  let shown = { version: '', html: '', runs: 0 };
  let rendering = false;
  const render = async () => {
    const version = runsVersion(dirs);
    if (rendering || version === shown.version) return;
    rendering = true;
    try {
      const { runs, skipped } = readRuns(dirs);
      if (runs.length === 0) throw new Error(`no readable run directory (${skipped.join('; ')})`);
      // a runner appending a line right now: the next look reads it whole
      if (skipped.some((line) => line.includes('half-written')) && shown.version !== '') return;
      const baseline = settings.baseline === undefined ? undefined : baselineRun(runs, settings.baseline);
      const html = await livePage({ title: settings.title, runs, baseline, skipped, projection: settings.projection }, version);
      shown = { version, html, runs: runs.length };
    } finally {
      rendering = false;
    }
  };
  let failure: string | undefined;
  const look = () =>
    render().then(
      () => (failure = undefined),
      (error: Error) => {
        // a baseline that cannot be read (yet): said once, and looked at again
        if (failure !== error.message) console.error(`ft-report: ${error.message}`);
        failure = error.message;
      },
    );
  await look();
  const timer = setInterval(() => void look(), lookMs);
  server.on('request', (request, response) => {
    const url = request.url?.split('?')[0];
    const send = (status: number, type: string, body: string) => {
      response.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
      response.end(body);
    };
    if (request.method !== 'GET') send(405, 'text/plain; charset=utf-8', 'only GET\n');
    else if (url === '/') send(200, 'text/html; charset=utf-8', shown.html);
    else if (url === '/version') send(200, 'text/plain; charset=utf-8', shown.version);
    else send(404, 'text/plain; charset=utf-8', 'not found\n');
  });
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}/`,
    runs: () => shown.runs,
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(timer);
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
