// Canonical JSON, so that whoever writes a checksum over a JSON value and whoever verifies it
// later (after a parse, or in another tool) serialize it to the same bytes whatever the key order.
import { createHash } from 'node:crypto';

/**
 * The canonical form, in the manner of RFC 8785: no whitespace; object keys sorted by UTF-16 code
 * units (JavaScript's default sort), keys whose value is undefined left out; array items in order,
 * undefined as null; strings and numbers as JSON.stringify writes them.
 */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item ?? null)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined);
    return `{${entries
      .map(([k]) => k)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The sha256 (hex) of a value's canonical JSON. */
export function canonicalSha256(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}
