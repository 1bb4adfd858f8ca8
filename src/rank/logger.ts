// Per-rank log files (winston) in the run directory: logs/rank-R.log, one JSON line per entry.
import * as winston from 'winston';

export function rankLogger(file: string, worldRank: number): winston.Logger {
  return winston.createLogger({
    level: 'info',
    defaultMeta: { rank: worldRank, pid: process.pid },
    format: winston.format.combine(winston.format.timestamp(), winston.format.json()),
    transports: [new winston.transports.File({ filename: file })],
  });
}

/** Resolves once everything logged so far is on disk. */
export function closeLogger(logger: winston.Logger): Promise<void> {
  return new Promise((resolve) => {
    logger.on('finish', () => resolve());
    logger.end();
  });
}
