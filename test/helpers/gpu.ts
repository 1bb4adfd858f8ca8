// The GPU tests' gate: where the addon has no GPU backend (every CI machine) they skip with one
// line; with FT_GPU_REQUIRED=1 (launch/gpu-bundle check, on a GPU machine) they fail instead.
import { gpuMissing } from '../../src/nn/cuda';

let said = false;

/** In a describe's before(): skips the suite, saying why once, unless the GPU is required. */
export function requireGpu(context: Mocha.Context): void {
  if (!gpuMissing) return;
  if (process.env.FT_GPU_REQUIRED === '1') throw new Error(`FT_GPU_REQUIRED=1 but ${gpuMissing}`);
  if (!said) console.log(`    GPU tests skipped: ${gpuMissing}`);
  said = true;
  context.skip();
}
