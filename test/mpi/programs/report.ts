// What test programs use to hand results to the mocha side: one `@result <json>` line each.
export function report(value: object): void {
  process.stdout.write(`@result ${JSON.stringify(value)}\n`);
}
