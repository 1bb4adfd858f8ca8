// bench/throughput: images/s of a full training step (forward, backward, SGD update) of every
// shipped model (models/*.json) at batch 64 on one thread, against PyTorch running the same spec,
// interleaved: per round, each model is timed here and then in a long-lived PyTorch child (the order
// alternating from round to round), and the ratio is the median of the per-round ratios, so that the
// drift of a shared machine cancels. Also real 1-rank ft-train runs of lenet and cifarnet at
// --threads 2 against --threads 1 (alternating, per round), and real ft-train runs of each model
// that has a dataset here at 1 rank (the whole step: batch, sum, vote, update, records, progress),
// each run's wall-clock time per step set against the kernel-only step's measured beside it
// (alternating order, per round; the median of the rounds' ratios). The language models (specs with
// a context: gpt-small) are timed the same way in tokens/s at batch 8 x their context, with AdamW
// on both sides (bench/model-step.ts's settings). Last line JSON:
//   gpt_vs_pytorch (gpt-small's tokens/s over PyTorch's; target >= 1.0),
//   lenet_vs_pytorch (target >= 1.5), min_model_vs_pytorch (the worst image model; target >= 1.3),
//   <model>_vs_pytorch, threads2_speedup (the worse of lenet and cifarnet; target >= 1.6),
//   step_vs_kernels_1rank (the worst model's real step / kernel-only step; target <= 1.1), models.
// With --device cuda: lenet, cifarnet and resnet8 at batch 64 and 512 on the GPU backend (the net
// and the SGD update on the GPU, as ft-train --device cuda runs them: each step uploads its batch,
// downloads its gradients and uploads them again for the update, as MPI's sum on the host would
// leave them; the parameters and the optimizer state stay on the GPU; bench/model-step.ts) against
// PyTorch on the same GPU (float32 throughout: TF32 off on both sides), the same interleaving, three
// times: PyTorch moving each step's batch from host memory as a training loop does ("host"), PyTorch
// with its batch kept on the GPU ("resident", no transfer at all), and PyTorch moving its batch and
// restricted to cuDNN's deterministic algorithms as ft-train is ("deterministic"); and the time of
// one NCCL abort and one rebuild at 1 rank. Last line JSON: min_vs_pytorch_cuda_512 (host, the worse
// of lenet and cifarnet; target >= 1.0), min_vs_pytorch_cuda_resident_512,
// min_vs_pytorch_cuda_deterministic_512 (likewise),
// <model>_<batch>_vs_pytorch_cuda[_resident|_deterministic], gpt_vs_pytorch_cuda (gpt-small's
// tokens/s at batch 32 with AdamW on the GPU over PyTorch's, its windows on the GPU), nccl_abort_ms,
// nccl_rebuild_ms, gpu, models.
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { median } from '../src/base/median';
import { languageModelAdamw, languageModelStep, modelStep, shippedModels } from './model-step';
import { cpu } from '../src/nn/cpu';
import { cudaAddon, cudaBackend } from '../src/nn/cuda';
import { modelSpecJson } from '../src/nn/export';
import { Net } from '../src/nn/net';

const batch = 64;
const seconds = Number(process.env.BENCH_SECONDS ?? 0.5);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const root = path.resolve(__dirname, '..', '..');
const python = process.env.BENCH_PYTHON ?? '/usr/bin/python3';
/** The image models; of the language models, the one the target names. */
const models = shippedModels().image;
const languageModel = 'gpt-small';
const languageBatch = Number(process.env.BENCH_GPT_BATCH ?? 8);
/** The language model's batch on a GPU (windows of its context). */
const gpuLanguageBatch = Number(process.env.BENCH_GPT_CUDA_BATCH ?? 32);
/** At least a few of gpt-small's steps (about a second each) per side and round. */
const languageSeconds = Math.max(seconds, Number(process.env.BENCH_GPT_SECONDS ?? 5));
const threadModels = ['lenet', 'cifarnet'];
/** The dataset a real run of a model with this input shape trains on. */
const datasets: Record<string, string> = { '1,28,28': 'fashion-mnist', '3,32,32': 'synthetic-cifar' };

/** Multiply-adds x 2 of one forward pass of `net` over a batch; a training step is about 3x. */
function forwardFlops(net: Net): number {
  let flops = 0;
  for (const view of net.params.views) {
    if (!view.name.endsWith('.weight')) continue;
    const layer = net.layers.find((l) => `${l.name}.weight` === view.name)!;
    const outputsPerFilter = layer.outShape.length === 3 ? layer.outShape[1] * layer.outShape[2] : 1;
    flops += 2 * view.length * outputsPerFilter * batch;
  }
  return flops;
}

/** Images/s of `step` over `seconds`. */
function imagesPerS(step: () => void): number {
  return stepsPerS(step, seconds) * batch;
}

/** Steps/s of `step` over at least `duration` seconds. */
function stepsPerS(step: () => void, duration: number): number {
  let steps = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < duration) {
    step();
    steps += 1;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  return steps / elapsed;
}

/** The PyTorch child: times a model for `seconds` when asked (a language model: tokens/s). */
function startPytorch(): {
  imagesPerS: (net: Net, on?: { batch: number; device: 'cpu' | 'cuda'; input?: 'host'; deterministic?: true }) => Promise<number>;
  tokensPerS: (net: Net, on: { batch: number; device: 'cpu' | 'cuda' }) => Promise<number>;
  stop: () => void;
} {
  const child = spawn(python, [path.join(root, 'bench', 'pytorch_throughput.py')], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, OMP_NUM_THREADS: '1' },
  });
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return {
    imagesPerS: async (net, on = { batch, device: 'cpu' }) => {
      child.stdin.write(`${JSON.stringify({ spec: JSON.parse(modelSpecJson(net)), ...on, seconds })}\n`);
      const answer = await lines.next();
      if (answer.done) throw new Error(`the PyTorch child (${python}) ended without answering for ${net.spec.name}`);
      return (JSON.parse(answer.value) as { images_per_s: number }).images_per_s;
    },
    tokensPerS: async (net, on) => {
      const request = {
        spec: JSON.parse(modelSpecJson(net)),
        ...on,
        seconds: languageSeconds,
        lr: languageModelAdamw.lr,
        weight_decay: languageModelAdamw.weightDecay,
      };
      child.stdin.write(`${JSON.stringify(request)}\n`);
      const answer = await lines.next();
      if (answer.done) throw new Error(`the PyTorch child (${python}) ended without answering for ${net.spec.name}`);
      return (JSON.parse(answer.value) as { tokens_per_s: number }).tokens_per_s;
    },
    stop: () => child.stdin.end(),
  };
}

/** Wall-clock ms per step from step 30 on of a real 1-rank ft-train run of `name` (batch 64). */
function realStepMs(name: string, dataset: string, threads: number, steps: number): number {
  const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-step-'));
  fs.rmdirSync(runDir);
  try {
    const result = spawnSync(
      path.join(root, 'launch', 'ft-run'),
      [
        '-n',
        '1',
        '--',
        '--model',
        path.join(root, 'models', `${name}.json`),
        '--data',
        path.join(root, 'datasets', dataset),
        '--steps',
        String(steps),
        '--batch',
        String(batch),
        '--threads',
        String(threads),
        '--run-dir',
        runDir,
      ],
      { encoding: 'utf8', timeout: 300_000 },
    );
    if (result.status !== 0) throw new Error(`ft-train run of ${name} failed:\n${result.stderr}`);
    // wall-clock per step from step 30 on: the whole loop, records and progress included (a step's
    // own step_ms leaves out what follows its commit)
    const records = fs
      .readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { step: number; time: number });
    const [first, last] = [records[30], records[records.length - 1]];
    return (last.time - first.time) / (last.step - first.step);
  } finally {
    fs.rmSync(runDir, { recursive: true, force: true });
  }
}

/** The language model's tokens/s in ft-train and in PyTorch, per round. */
interface LanguageRace {
  batch: number;
  context: number;
  ours: number[];
  theirs: number[];
  ratios: number[];
}

/**
 * The language model's whole training step (AdamW) on `on.device`, in ft-train and in PyTorch (its
 * windows on the same device), alternating per round; `where` names the device in the progress lines.
 */
async function raceLanguageModel(
  pytorch: ReturnType<typeof startPytorch>,
  on: { batch: number; device: 'cpu' | 'cuda' },
  where: string,
): Promise<LanguageRace> {
  const gpt = languageModelStep(languageModel, on.batch, on.device === 'cuda' ? cudaBackend() : cpu);
  const context = gpt.net.spec.language!.context;
  const ours: number[] = [];
  const theirs: number[] = [];
  for (let round = 0; round < rounds; ++round) {
    process.stderr.write(`[bench] round ${round + 1}/${rounds}${where}: ${languageModel} in ft-train and PyTorch, alternating ...\n`);
    const mine = (): number => on.batch * context * stepsPerS(gpt.step, languageSeconds);
    if (round % 2 === 0) {
      ours.push(mine());
      theirs.push(await pytorch.tokensPerS(gpt.net, on));
    } else {
      theirs.push(await pytorch.tokensPerS(gpt.net, on));
      ours.push(mine());
    }
  }
  return { batch: on.batch, context, ours, theirs, ratios: ours.map((rate, k) => rate / theirs[k]) };
}

/** The race's line in the table. */
function languageLine(race: LanguageRace): string {
  return `${languageModel}: ft-train ${median(race.ours).toFixed(0)} tokens/s, PyTorch ${median(race.theirs).toFixed(0)} tokens/s, ratio ${median(race.ratios).toFixed(3)} (batch ${race.batch} x context ${race.context})`;
}

/** The race's record in the JSON line. */
function languageRecord(race: LanguageRace): Record<string, unknown> {
  return {
    batch: race.batch,
    context: race.context,
    tokens_per_s: +median(race.ours).toFixed(1),
    pytorch_tokens_per_s: +median(race.theirs).toFixed(1),
    vs_pytorch_rounds: race.ratios.map((r) => +r.toFixed(3)),
  };
}

/** --device cuda: the GPU backend against PyTorch on the same GPU (see the top of this file). */
async function gpuMain(): Promise<void> {
  const nccl = cudaAddon();
  const gpu = nccl.gpu().name;
  const cases = ['lenet', 'cifarnet', 'resnet8'].flatMap((model) =>
    [64, 512].map((size) => ({ model, size, ...modelStep(model, size, cudaBackend()) })),
  );
  const peers = ['host', 'resident', 'deterministic'] as const;
  const pytorch = startPytorch();
  const samples = (): number[] => [];
  const ours = new Map(cases.map((c) => [c, samples()]));
  const perPeer = () => ({ host: samples(), resident: samples(), deterministic: samples() });
  const theirs = new Map(cases.map((c) => [c, perPeer()]));
  const ratios = new Map(cases.map((c) => [c, perPeer()]));
  for (let round = 0; round < rounds; ++round) {
    process.stderr.write(`[bench] round ${round + 1}/${rounds} on ${gpu}: ft-train and PyTorch, alternating ...\n`);
    for (const c of cases) {
      const mine = (): number => stepsPerS(c.step, seconds) * c.size;
      const peer = (kind: (typeof peers)[number]): Promise<number> =>
        pytorch.imagesPerS(c.net, {
          batch: c.size,
          device: 'cuda',
          ...(kind === 'resident' ? {} : { input: 'host' }),
          ...(kind === 'deterministic' ? { deterministic: true } : {}),
        });
      let rate: number;
      const peerRates = { host: 0, resident: 0, deterministic: 0 };
      if (round % 2 === 0) {
        rate = mine();
        for (const kind of peers) peerRates[kind] = await peer(kind);
      } else {
        for (const kind of peers) peerRates[kind] = await peer(kind);
        rate = mine();
      }
      ours.get(c)!.push(rate);
      for (const kind of peers) {
        theirs.get(c)![kind].push(peerRates[kind]);
        ratios.get(c)![kind].push(rate / peerRates[kind]);
      }
    }
  }
  // the language model with AdamW on the GPU, against PyTorch's with its windows on the GPU
  const gpt = await raceLanguageModel(pytorch, { batch: gpuLanguageBatch, device: 'cuda' }, ` on ${gpu}`);
  pytorch.stop();
  // NCCL at 1 rank, after a warm-up: one abort, and one rebuild (a new unique id, a new communicator)
  const values = new Float32Array(1 << 16);
  let comm = nccl.ncclInit(nccl.ncclUniqueId(), 1, 0, 10_000);
  const abortMs: number[] = [];
  const rebuildMs: number[] = [];
  const since = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;
  for (let i = 0; i < 12; ++i) {
    nccl.ncclAllReduce(comm, values, 10_000);
    const start = process.hrtime.bigint();
    nccl.ncclAbort(comm);
    const aborted = process.hrtime.bigint();
    comm = nccl.ncclInit(nccl.ncclUniqueId(), 1, 0, 10_000);
    if (i >= 2) {
      abortMs.push(Number(aborted - start) / 1e6);
      rebuildMs.push(since(aborted));
    }
  }
  nccl.ncclAbort(comm);
  const summary: Record<string, number> = {};
  const perCase: Record<string, unknown> = {};
  console.log(
    `on ${gpu}\nmodel      batch  ft-train img/s  PyTorch img/s (host, resident, deterministic)  ratio (host, resident, deterministic)`,
  );
  const suffixes = { host: '', resident: '_resident', deterministic: '_deterministic' };
  for (const c of cases) {
    const name = `${c.model}_${c.size}`;
    const ratio = Object.fromEntries(peers.map((kind) => [kind, median(ratios.get(c)![kind])])) as Record<(typeof peers)[number], number>;
    const peer = Object.fromEntries(peers.map((kind) => [kind, median(theirs.get(c)![kind])])) as Record<(typeof peers)[number], number>;
    const record: Record<string, unknown> = { images_per_s: +median(ours.get(c)!).toFixed(1) };
    for (const kind of peers) {
      summary[`${name}_vs_pytorch_cuda${suffixes[kind]}`] = +ratio[kind].toFixed(3);
      record[`pytorch${suffixes[kind]}_images_per_s`] = +peer[kind].toFixed(1);
      record[`vs_pytorch${suffixes[kind]}_rounds`] = ratios.get(c)![kind].map((r) => +r.toFixed(3));
    }
    perCase[name] = record;
    console.log(
      `${c.model.padEnd(10)} ${String(c.size).padStart(5)} ${median(ours.get(c)!).toFixed(0).padStart(15)} ` +
        `${peers
          .map((kind) => peer[kind].toFixed(0))
          .join(', ')
          .padStart(46)} ${peers
          .map((kind) => ratio[kind].toFixed(3))
          .join(', ')
          .padStart(38)}`,
    );
  }
  console.log(languageLine(gpt));
  console.log(
    `NCCL at 1 rank: abort ${median(abortMs).toFixed(2)} ms, rebuild ${median(rebuildMs).toFixed(2)} ms (medians of ${abortMs.length})`,
  );
  // the headline's models (resnet8's figures are printed beside them)
  const at512 = (suffix: string): number =>
    Math.min(...['lenet', 'cifarnet'].map((model) => summary[`${model}_512_vs_pytorch_cuda${suffix}`]));
  console.log(
    JSON.stringify({
      min_vs_pytorch_cuda_512: at512(''),
      min_vs_pytorch_cuda_resident_512: at512('_resident'),
      min_vs_pytorch_cuda_deterministic_512: at512('_deterministic'),
      ...summary,
      gpt_vs_pytorch_cuda: +median(gpt.ratios).toFixed(3),
      nccl_abort_ms: +median(abortMs).toFixed(3),
      nccl_rebuild_ms: +median(rebuildMs).toFixed(3),
      gpu,
      libraries: nccl.libraries(),
      rounds,
      seconds_per_round: seconds,
      models: { ...perCase, [languageModel]: languageRecord(gpt) },
    }),
  );
}

async function main(): Promise<void> {
  const device = process.argv.indexOf('--device');
  if (device >= 0 && process.argv[device + 1] !== 'cpu') {
    if (process.argv[device + 1] !== 'cuda')
      throw new Error(`bench/throughput: --device expects cpu or cuda, got ${process.argv[device + 1]}`);
    return gpuMain();
  }
  cpu.setThreads(1);
  const steps = new Map(models.map((model) => [model, modelStep(model, batch)]));
  const pytorch = startPytorch();
  const ours = new Map<string, number[]>(models.map((m) => [m, []]));
  const theirs = new Map<string, number[]>(models.map((m) => [m, []]));
  const ratios = new Map<string, number[]>(models.map((m) => [m, []]));
  for (let round = 0; round < rounds; ++round) {
    process.stderr.write(`[bench] round ${round + 1}/${rounds}: ft-train and PyTorch, alternating ...\n`);
    for (const model of models) {
      const { net, step } = steps.get(model)!;
      let mine: number, peer: number;
      if (round % 2 === 0) {
        mine = imagesPerS(step);
        peer = await pytorch.imagesPerS(net);
      } else {
        peer = await pytorch.imagesPerS(net);
        mine = imagesPerS(step);
      }
      ours.get(model)!.push(mine);
      theirs.get(model)!.push(peer);
      ratios.get(model)!.push(mine / peer);
    }
  }
  // the language model: tokens/s of a whole training step, alternating with PyTorch per round
  const gpt = await raceLanguageModel(pytorch, { batch: languageBatch, device: 'cpu' }, '');
  pytorch.stop();

  // threads: real 1-rank runs (ft-run places a rank's threads on cores of their own), 1 and 2 alternating
  const threadRatios = new Map<string, number[]>(threadModels.map((m) => [m, []]));
  for (let round = 0; round < rounds; ++round) {
    process.stderr.write(`[bench] round ${round + 1}/${rounds}: real runs at --threads 1 and 2, alternating ...\n`);
    for (const model of threadModels) {
      const dataset = datasets[steps.get(model)!.net.spec.input.join(',')];
      const ms = (threads: number): number => realStepMs(model, dataset, threads, 150);
      let one: number, two: number;
      if (round % 2 === 0) {
        one = ms(1);
        two = ms(2);
      } else {
        two = ms(2);
        one = ms(1);
      }
      threadRatios.get(model)!.push(one / two);
    }
  }

  // the whole step: a real 1-rank run of each model with a dataset here against its kernel-only step
  // measured right after or before it (alternating), per round; the ratio is the median of the rounds'
  const realModels = models.filter((model) => {
    const dataset = datasets[steps.get(model)!.net.spec.input.join(',')];
    return dataset !== undefined && fs.existsSync(path.join(root, 'datasets', dataset));
  });
  const real = new Map<string, number[]>(realModels.map((m) => [m, []]));
  const stepRatios = new Map<string, number[]>(realModels.map((m) => [m, []]));
  for (let round = 0; round < rounds; ++round) {
    process.stderr.write(`[bench] round ${round + 1}/${rounds}: real 1-rank runs and kernel-only steps, alternating ...\n`);
    for (const model of realModels) {
      const { net, step } = steps.get(model)!;
      const dataset = datasets[net.spec.input.join(',')];
      const kernelMs = (): number => (1000 * batch) / imagesPerS(step);
      // about 1.5 s of steps after the 30 left out (at least 200 steps), so that the run's own
      // start (its spare checkpoint file, the first records) weighs little in a fast model's time
      const realSteps = Math.max(200, 30 + Math.ceil(1500 / ((1000 * batch) / median(ours.get(model)!))));
      let realMs: number, kernel: number;
      if (round % 2 === 0) {
        realMs = realStepMs(model, dataset, 1, realSteps);
        kernel = kernelMs();
      } else {
        kernel = kernelMs();
        realMs = realStepMs(model, dataset, 1, realSteps);
      }
      real.get(model)!.push(realMs);
      stepRatios.get(model)!.push(realMs / kernel);
    }
  }

  const summary: Record<string, unknown> = {};
  const perModel: Record<string, unknown> = {};
  console.log('model      ft-train img/s  GFLOP/s  PyTorch img/s  ratio  kernel ms  real step ms');
  for (const model of models) {
    const { net } = steps.get(model)!;
    const rate = median(ours.get(model)!);
    const peer = median(theirs.get(model)!);
    const ratio = median(ratios.get(model)!);
    const kernelMs = (1000 * batch) / rate;
    const realMs = real.has(model) ? median(real.get(model)!) : undefined;
    summary[`${model}_vs_pytorch`] = +ratio.toFixed(3);
    const gflops = (3 * forwardFlops(net) * rate) / batch / 1e9;
    perModel[model] = {
      images_per_s: +rate.toFixed(1),
      gflops: +gflops.toFixed(2),
      pytorch_images_per_s: +peer.toFixed(1),
      vs_pytorch_rounds: ratios.get(model)!.map((r) => +r.toFixed(3)),
      kernel_step_ms: +kernelMs.toFixed(3),
      ...(realMs !== undefined
        ? {
            real_step_ms_1rank: +realMs.toFixed(3),
            step_vs_kernels_rounds: stepRatios.get(model)!.map((r) => +r.toFixed(3)),
          }
        : {}),
    };
    console.log(
      `${model.padEnd(10)} ${rate.toFixed(0).padStart(14)} ${gflops.toFixed(2).padStart(8)} ${peer.toFixed(0).padStart(14)} ` +
        `${ratio.toFixed(3).padStart(6)} ${kernelMs.toFixed(2).padStart(10)} ${(realMs?.toFixed(2) ?? '-').padStart(13)}`,
    );
  }
  console.log(languageLine(gpt));
  const threads2 = Object.fromEntries(threadModels.map((m) => [m, +median(threadRatios.get(m)!).toFixed(3)]));
  console.log(`2 threads / 1 thread: ${threadModels.map((m) => `${m} ${threads2[m]}x`).join(', ')}`);
  console.log(
    JSON.stringify({
      gpt_vs_pytorch: +median(gpt.ratios).toFixed(3),
      lenet_vs_pytorch: summary.lenet_vs_pytorch,
      min_model_vs_pytorch: Math.min(...models.map((m) => summary[`${m}_vs_pytorch`] as number)),
      threads2_speedup: Math.min(...Object.values(threads2)),
      ...summary,
      step_vs_kernels_1rank: +Math.max(...realModels.map((m) => median(stepRatios.get(m)!))).toFixed(3),
      batch,
      threads: 1,
      rounds,
      seconds_per_round: seconds,
      threads2_speedup_by_model: threads2,
      models: perModel,
      [languageModel]: languageRecord(gpt),
    }),
  );
}

main().catch((error: Error) => {
  console.error(error.message);
  process.exit(1);
});
