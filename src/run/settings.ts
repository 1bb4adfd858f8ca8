// summary.json's `settings`: every setting that changes a run's result, flat (one value per name)
// so that reports can compare runs setting by setting. Built from the identity a resume is checked
// against: nested parts become a name and a sha256 of their canonical JSON (keys sorted).
import { createHash } from 'node:crypto';

/** One value per setting; null where the setting was not given (e.g. steps when epochs were). */
export type RunSettings = Record<string, string | number | boolean | null>;

/** JSON with every object's keys sorted, so that equal values give equal text. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const object = value as Record<string, unknown>;
    return `{${Object.keys(object)
      .sort()
      .filter((key) => object[key] !== undefined)
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function isScalar(value: unknown): value is string | number | boolean | null {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value);
}

/**
 * The flat settings of an identity: scalars as they are; `model` as its name and model_sha256;
 * `data` as data_train_sha256 and data_test_sha256; `optimizer` as its name and its fields;
 * `lr_schedule` as spelled on the command line; any other nested value as NAME_sha256.
 */
export function runSettings(identity: Record<string, unknown>): RunSettings {
  const settings: RunSettings = {};
  for (const [key, value] of Object.entries(identity)) {
    if (isScalar(value)) settings[key] = value;
    else if (key === 'model' && typeof value === 'object' && typeof (value as { name?: unknown }).name === 'string') {
      settings.model = (value as { name: string }).name;
      settings.model_sha256 = sha256(canonicalJson(value));
    } else if (key === 'data' && typeof value === 'object') {
      for (const [split, hash] of Object.entries(value as Record<string, unknown>)) settings[`data_${split}_sha256`] = String(hash);
    } else if (key === 'optimizer' && typeof value === 'object') {
      for (const [field, setting] of Object.entries(value as Record<string, unknown>))
        settings[field === 'name' ? 'optimizer' : field] = isScalar(setting) ? setting : canonicalJson(setting);
    } else if (key === 'lr_schedule' && typeof value === 'object') {
      const schedule = value as { kind: string; every?: number; gamma?: number };
      settings.lr_schedule = schedule.kind === 'step' ? `step:${schedule.every}:${schedule.gamma}` : schedule.kind;
    } else settings[`${key}_sha256`] = sha256(canonicalJson(value));
  }
  return settings;
}
