// bench/ec-encode: Reed-Solomon erasure coding (ISA-L through the addon) on one thread, over a
// fragment set of 64 MiB of data (k fragments of 64/k MiB), for k=2, m=1 and k=2, m=2. Encode
// computes all m parity fragments; decode rebuilds m lost data fragments from the k left (the
// costliest loss). Each is timed for BENCH_SECONDS (default 2), median call. Prints a table, then
// one JSON line, rates in GB (1e9 bytes) of the set's data per second, worst of the two codes:
//   ec_encode_gbps_per_core, ec_decode_gbps_per_core, and by_code with each code's rates.
import { randomFillSync } from 'node:crypto';
import { ecDecode, ecEncode } from '../src/checkpoint/erasure';
import { median } from '../src/base/median';

const codes = [
  [2, 1],
  [2, 2],
];
const dataBytes = 64 << 20;
const seconds = Number(process.env.BENCH_SECONDS ?? 2);

/** The median seconds of `call`, repeated for `seconds` after one untimed call (page faults). */
function time(call: () => void): number {
  call();
  const times: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const start = performance.now();
    call();
    times.push((performance.now() - start) / 1000);
  }
  return median(times);
}

function main(): void {
  const rows: { k: number; m: number; encodeGbps: number; decodeGbps: number }[] = [];
  for (const [k, m] of codes) {
    const fragmentBytes = dataBytes / k;
    const fragments = Array.from({ length: k + m }, () => randomFillSync(new Uint8Array(fragmentBytes)));
    const data = fragments.slice(0, k);
    const parity = fragments.slice(k);
    const encodeS = time(() => ecEncode(k, m, data, parity));
    // the first m data fragments lost: rebuilt from the other data fragments and all the parity
    const present = Array.from({ length: k }, (_, i) => m + i);
    const lost = Array.from({ length: m }, (_, i) => i);
    const rebuilt = lost.map(() => new Uint8Array(fragmentBytes));
    const decodeS = time(() =>
      ecDecode(
        k,
        m,
        present,
        present.map((i) => fragments[i]),
        lost,
        rebuilt,
      ),
    );
    rebuilt.forEach((r, i) => {
      if (!Buffer.from(r.buffer).equals(Buffer.from(fragments[i].buffer)))
        throw new Error(`k=${k}, m=${m}: data fragment ${i} rebuilt wrong`);
    });
    rows.push({ k, m, encodeGbps: dataBytes / encodeS / 1e9, decodeGbps: dataBytes / decodeS / 1e9 });
  }
  console.log('code      data MiB  encode GB/s  decode GB/s (m data fragments lost)');
  for (const r of rows) {
    console.log(
      `k=${r.k}, m=${r.m}  ${String(dataBytes >> 20).padStart(8)}  ${r.encodeGbps.toFixed(2).padStart(11)}  ${r.decodeGbps.toFixed(2).padStart(11)}`,
    );
  }
  const round = (x: number): number => Number(x.toFixed(2));
  console.log(
    JSON.stringify({
      ec_encode_gbps_per_core: round(Math.min(...rows.map((r) => r.encodeGbps))),
      ec_decode_gbps_per_core: round(Math.min(...rows.map((r) => r.decodeGbps))),
      data_bytes: dataBytes,
      by_code: Object.fromEntries(
        rows.map((r) => [`k${r.k}_m${r.m}`, { encode_gbps: round(r.encodeGbps), decode_gbps: round(r.decodeGbps) }]),
      ),
    }),
  );
}

main();
