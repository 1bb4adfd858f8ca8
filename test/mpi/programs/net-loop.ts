// A custom loop (elastic()) that trains one of ft-train's model specs with ft-train's Net and
// optimizer: the same model trainable both ways, so a test can hold the custom loop to the
// trainer's bits, failures, spares, respawned ranks and sharded state included. Its flags are the
// trainer's names for what it passes on; every rank runs it under launch/ft-run --script.
import { parseArgs } from 'node:util';
import { cpu, elastic, exitWhenDone, loadSpec, Net, type FailurePolicy } from '../../../src';

const { values: flags } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/lenet.json' },
    data: { type: 'string', default: 'datasets/fashion-mnist' },
    'run-dir': { type: 'string' },
    steps: { type: 'string', default: '10' },
    batch: { type: 'string', default: '64' },
    shards: { type: 'string' },
    lr: { type: 'string', default: '0.01' },
    seed: { type: 'string', default: '1' },
    'hang-timeout': { type: 'string', default: '5' },
    drill: { type: 'string', multiple: true, default: [] },
    'on-failure': { type: 'string', default: 'exact' },
    'optimizer-state': { type: 'string', default: 'replicated' },
    spares: { type: 'string', default: '0' },
    respawn: { type: 'boolean', default: false },
    'respawn-join': { type: 'string', default: 'ready' },
    isa: { type: 'string' },
    'join-id': { type: 'string' },
    'join-step': { type: 'string' },
  },
});

const net = new Net(loadSpec(flags.model), cpu);
const lr = Number(flags.lr);
const seed = Number(flags.seed);
const tensors = Object.fromEntries(net.params.views.map((view) => [view.name, view.shape]));

exitWhenDone(
  elastic(
    {
      data: flags.data,
      runDir: flags['run-dir']!,
      steps: Number(flags.steps),
      batch: Number(flags.batch),
      shards: flags.shards === undefined ? undefined : Number(flags.shards),
      seed,
      hangTimeout: Number(flags['hang-timeout']),
      drill: flags.drill,
      onFailure: flags['on-failure'] as FailurePolicy,
      optimizerState: flags['optimizer-state'] as 'replicated' | 'sharded',
      spares: Number(flags.spares),
      respawn: flags.respawn,
      respawnJoin: flags.respawn ? (flags['respawn-join'] as 'ready' | 'wait') : undefined,
      // the trainer's defaults for sgd
      optimizer: 'sgd',
      momentum: 0.9,
      weightDecay: 5e-4,
      model: net.spec.name,
      tensors,
      identity: { lr },
    },
    {
      init(loop) {
        net.init(seed);
        loop.state.set(net.params.data);
      },
      async train(loop) {
        while (!loop.done) {
          await loop.update(
            (batch) => {
              net.params.data.set(loop.state);
              const { loss } = net.lossAndGradient(batch.x, batch.labels, batch.rows, batch.key, batch.samples);
              loop.gradient.set(net.params.gradients);
              return loss;
            },
            { lr },
          );
          await loop.commit();
        }
        net.params.data.set(loop.state);
        await loop.evaluate((x, labels, rows) => net.evaluate(x, labels, rows));
      },
    },
  ),
);
