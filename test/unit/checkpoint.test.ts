// Checkpoint files without MPI: stripes written separately make one safetensors file that other
// tools can read, also over a longer file left in the directory; a spare file is written over in
// place and a pruned checkpoint's file becomes the next spare; the manifest's checksums catch a
// flipped byte and a truncated file, and its own checksum an edited manifest; the newest complete
// checkpoint is found, passing over broken, edited or unfinished ones with the reason.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  checkpointDir,
  commitManifest,
  configSha256,
  findCheckpoint,
  loadCheckpoint,
  newStripeWriter,
  prepareManifest,
  pruneCheckpoints,
  readySpare,
  removeStaging,
  stagingDir,
  stripeDigests,
  stripeRanges,
  verifyCheckpoint,
  writeStripes,
  type CheckpointManifest,
  type CheckpointMeta,
  type TrainingState,
} from '../../src/checkpoint/checkpoint';
import { decodeSafetensors } from '../../src/checkpoint/safetensors';
import { crc64 } from '../../src/base/checksum';
import { randomTensor } from '../helpers/gradcheck';

const tensors = [
  { name: 'fc.weight', shape: [7, 5] },
  { name: 'fc.bias', shape: [7] },
  { name: 'out.weight', shape: [3, 7] },
];
const P = 35 + 7 + 21;

function state(seed: number): TrainingState {
  return {
    tensors,
    params: randomTensor(P, seed),
    slots: [{ name: 'velocity', data: randomTensor(P, seed + 100) }],
    held: { from: 0, to: P },
  };
}

const config = { lr: 0.01, model: 'tiny' };

function meta(step: number): CheckpointMeta {
  return {
    step,
    epoch: 0,
    reason: 'test',
    shards: 4,
    shard_map: [0, 1, 2, 3],
    seed: 1,
    config,
    config_sha256: configSha256(config),
    rng: { seed: 1, kind: 'counter-based' },
    world_history: [{ step: 0, world: 4, lost: [] }],
  };
}

/** One writer per simulated rank (a process has one). */
const writers = Array.from({ length: 7 }, () => newStripeWriter());

/** Rank i of n's stripes, written and durable; their digests, as rank i computes them. */
async function stripe(dir: string, s: TrainingState, i: number, n: number): Promise<string[]> {
  await writeStripes(dir, s, [i], n, writers[i]);
  return stripeDigests(s, i, n);
}

/** Writes a checkpoint as `n` ranks would, each its stripe, all at once, into the staging directory, and commits it. */
async function write(root: string, step: number, s: TrainingState, n: number, m: CheckpointMeta = meta(step)): Promise<string> {
  const dir = checkpointDir(root, step);
  const staging = stagingDir(root);
  // started in reverse order, as ranks come in any order
  const digests = await Promise.all(Array.from({ length: n }, (_, k) => n - 1 - k).map((i) => stripe(staging, s, i, n)));
  const prepared = prepareManifest(staging, m, s, digests.reverse());
  await prepared.durable;
  commitManifest(prepared, dir);
  return dir;
}

const inode = (file: string): number => fs.statSync(file).ino;

/** Rewrites a checkpoint's manifest.json after `edit`, as a person with an editor would. */
function editManifest(dir: string, edit: (manifest: CheckpointManifest) => object | void): string {
  const file = path.join(dir, 'manifest.json');
  const manifest = JSON.parse(fs.readFileSync(file, 'utf8'));
  fs.writeFileSync(file, JSON.stringify(edit(manifest) ?? manifest, null, 2));
  return file;
}

describe('checkpoints', () => {
  let root: string;
  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-ckpt-'));
  });
  afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

  it('stripes from any number of writers make the same safetensors file, loaded back bit for bit', async () => {
    const s = state(1);
    const files: Buffer[] = [];
    for (const n of [1, 3, 7]) files.push(fs.readFileSync(path.join(await write(path.join(root, `n${n}`), 10, s, n), 'state.safetensors')));
    assert.ok(files[0].equals(files[1]) && files[0].equals(files[2]));
    // one writer of every chunk of 3 (a small replicated state's checkpoint): the same file, and the
    // same manifest's stripes verify it
    const one = path.join(root, 'one');
    await writeStripes(stagingDir(one), s, [0, 1, 2], 3, writers[0]);
    const sealed = prepareManifest(
      stagingDir(one),
      meta(10),
      s,
      [0, 1, 2].map((c) => stripeDigests(s, c, 3)),
    );
    await sealed.durable;
    commitManifest(sealed, checkpointDir(one, 10));
    assert.ok(fs.readFileSync(path.join(checkpointDir(one, 10), 'state.safetensors')).equals(files[0]));
    assert.equal(verifyCheckpoint(checkpointDir(one, 10)).file.stripes.length, 3 * 2);
    const decoded = decodeSafetensors(files[0], 'state.safetensors');
    assert.deepEqual(
      decoded.tensors.map((t) => t.name),
      ['params.fc.weight', 'params.fc.bias', 'params.out.weight', 'velocity.fc.weight', 'velocity.fc.bias', 'velocity.out.weight'],
    );
    const dir = path.join(root, 'n3', 'step-00000010');
    const manifest = verifyCheckpoint(dir);
    assert.equal(manifest.file.stripes.length, 3 * 2); // a stripe per rank and tensor group
    assert.deepEqual(
      manifest.file.stripes.map((x) => x.length).reduce((a, b) => a + b),
      files[0].length,
    );
    const params = new Float32Array(P);
    const velocity = new Float32Array(P);
    loadCheckpoint(dir, manifest, tensors, params, [{ name: 'velocity', data: velocity }]);
    assert.deepEqual([params, velocity], [s.params, s.slots[0].data]);
    const ranges = stripeRanges(s, 2);
    assert.deepEqual(
      ranges.map((r) => r.offset + r.length),
      [...ranges.slice(1).map((r) => r.offset), files[0].length],
    );
  });

  it('a manifest prepared while the stripes are written names nothing complete until the commit renames the staging directory', async () => {
    const s = state(2);
    const older = await write(root, 10, s, 2);
    const dir = checkpointDir(root, 20);
    const staging = stagingDir(root);
    const stripes = [0, 1].map((i) => writeStripes(staging, s, [i], 2, writers[i]));
    const prepared = prepareManifest(
      staging,
      meta(20),
      s,
      [0, 1].map((i) => stripeDigests(s, i, 2)),
    );
    // (neither file may exist yet: they are created off the JS thread)
    assert.equal(findCheckpoint(root).dir, older);
    await Promise.all([...stripes, prepared.durable]);
    assert.deepEqual(fs.readdirSync(staging).sort(), ['manifest.json', 'state.safetensors']);
    assert.deepEqual(JSON.parse(fs.readFileSync(path.join(staging, 'manifest.json'), 'utf8')), prepared.manifest);
    assert.equal(findCheckpoint(root).dir, older);
    assert.deepEqual(commitManifest(prepared, dir), verifyCheckpoint(dir));
    assert.deepEqual(fs.readdirSync(dir).sort(), ['manifest.json', 'state.safetensors']);
    assert.deepEqual(fs.readdirSync(root).sort(), ['step-00000010', 'step-00000020']);
    assert.equal(findCheckpoint(root).dir, dir);
    // the same tensors with another optimizer's slots: another header, not the one remembered
    const adamw: TrainingState = { ...s, slots: ['exp_avg', 'exp_avg_sq'].map((name, k) => ({ name, data: randomTensor(P, 60 + k) })) };
    const loaded = adamw.slots.map((x) => ({ name: x.name, data: new Float32Array(P) }));
    const third = await write(root, 30, adamw, 3);
    loadCheckpoint(third, verifyCheckpoint(third), tensors, new Float32Array(P), loaded);
    assert.deepEqual(loaded, adamw.slots);
  });

  it('a commit refuses a staging directory that does not hold the manifest it prepared (a leader frozen past a retry)', async () => {
    const older = await write(root, 10, state(1), 2);
    const staging = stagingDir(root);
    await Promise.all([0, 1].map((i) => writeStripes(staging, state(2), [i], 2, writers[i])));
    const prepared = prepareManifest(
      staging,
      meta(10),
      state(2),
      [0, 1].map((i) => stripeDigests(state(2), i, 2)),
    );
    await prepared.durable;
    fs.rmSync(path.join(staging, 'manifest.json')); // another leader committed it meanwhile; this is a spare
    assert.throws(() => commitManifest(prepared, older), {
      message: `${staging}: does not hold the manifest this commit prepared: not committed`,
    });
    assert.equal(verifyCheckpoint(older).step, 10);
    assert.deepEqual(fs.readdirSync(root).sort(), ['step-00000010', 'step-next']);
  });

  it('a commit of a step already on disk (an interrupted commit, an older run) replaces it whole', async () => {
    const dir = await write(root, 10, state(1), 3);
    fs.writeFileSync(path.join(dir, 'stray'), 'left by an older run');
    const s = state(2);
    await write(root, 10, s, 2);
    assert.deepEqual(fs.readdirSync(dir).sort(), ['manifest.json', 'state.safetensors']);
    const params = new Float32Array(P);
    loadCheckpoint(dir, verifyCheckpoint(dir), tensors, params, [{ name: 'velocity', data: new Float32Array(P) }]);
    assert.deepEqual(params, s.params);
  });

  it("a spare is written over in place (its blocks, no new file) and cut to the state's length; a pruned checkpoint's file becomes the next spare", async () => {
    const spareWriter = newStripeWriter();
    const s = state(4);
    const spare = path.join(stagingDir(root), 'state.safetensors');
    // a spare larger than the state, as a bigger model's would be
    await readySpare(root, 3 * 4096 + 17, spareWriter);
    assert.equal(fs.statSync(spare).size, 3 * 4096 + 17);
    assert.equal(fs.statSync(spare).blocks * 512, 4 * 4096, 'every block of the spare is on disk');
    const spareInode = inode(spare);
    await readySpare(root, 5, spareWriter); // one is in place: nothing to do
    assert.equal(inode(spare), spareInode);
    const first = await write(root, 10, s, 3);
    assert.equal(inode(path.join(first, 'state.safetensors')), spareInode);
    const manifest = verifyCheckpoint(first);
    assert.equal(fs.statSync(path.join(first, 'state.safetensors')).size, manifest.file.bytes);
    assert.ok(!fs.existsSync(stagingDir(root)));
    const second = await write(root, 20, state(5), 3);
    pruneCheckpoints(root, 1);
    assert.deepEqual(fs.readdirSync(root).sort(), ['step-00000020', 'step-next']);
    assert.equal(inode(spare), spareInode);
    const third = await write(root, 30, s, 2);
    assert.equal(inode(path.join(third, 'state.safetensors')), spareInode);
    const params = new Float32Array(P);
    loadCheckpoint(third, verifyCheckpoint(third), tensors, params, [{ name: 'velocity', data: new Float32Array(P) }]);
    assert.deepEqual(params, s.params);
    assert.equal(verifyCheckpoint(second).step, 20);
    // a spare finished once a checkpoint's writer has created the state file stays out (the
    // writer's file is untouched); one finished after a writer's mkdir alone goes in beside it
    const filling = readySpare(root, 4096, spareWriter);
    fs.mkdirSync(stagingDir(root));
    fs.writeFileSync(spare, "a writer's");
    const created = inode(spare);
    await filling;
    assert.deepEqual([inode(spare), fs.readFileSync(spare, 'utf8')], [created, "a writer's"]);
    assert.deepEqual(fs.readdirSync(root).sort(), ['step-00000020', 'step-00000030', 'step-next']);
    await removeStaging(root);
    fs.mkdirSync(stagingDir(root));
    await readySpare(root, 4096, spareWriter);
    assert.equal(fs.statSync(spare).size, 4096);
    // at the end of a run: the spare goes; the directory stays while it holds checkpoints
    await removeStaging(root);
    assert.deepEqual(fs.readdirSync(root).sort(), ['step-00000020', 'step-00000030']);
    // a run that wrote none removes the directory it made for the spare alone (whichever rank
    // made it: the mark says so), never one it found
    for (const made of [false, true]) {
      const fresh = path.join(root, made ? 'made' : 'found');
      if (!made) fs.mkdirSync(fresh);
      await readySpare(fresh, 4096, spareWriter);
      assert.deepEqual(fs.readdirSync(fresh).sort(), made ? ['.made-by-run', 'step-next'] : ['step-next']);
      await removeStaging(fresh);
      assert.equal(fs.existsSync(fresh), !made);
    }
  });

  it('detects a flipped byte and a truncated file, and falls back to the previous complete checkpoint', async () => {
    await write(root, 10, state(1), 2);
    const newer = await write(root, 20, state(2), 2);
    const file = path.join(newer, 'state.safetensors');
    const bytes = fs.readFileSync(file);
    bytes[bytes.length - 5] ^= 1;
    fs.writeFileSync(file, bytes);
    assert.throws(() => verifyCheckpoint(newer), {
      message: `${file}: corrupt: stripe 3 (bytes ${lastStripe(newer)}) fails the manifest checksum`,
    });
    const found = findCheckpoint(root);
    assert.equal(found.dir, checkpointDir(root, 10));
    assert.match(found.skipped[0], /step-00000020\/state.safetensors: corrupt: stripe 3/);
    fs.truncateSync(file, bytes.length - 100);
    assert.throws(() => verifyCheckpoint(newer), {
      message: `${file}: truncated: ${bytes.length - 100} bytes, the manifest says ${bytes.length}`,
    });
    fs.mkdirSync(checkpointDir(root, 30));
    fs.writeFileSync(path.join(checkpointDir(root, 30), 'state.safetensors'), 'partial');
    assert.match(findCheckpoint(root).skipped.join('\n'), /step-00000030: incomplete: no manifest.json/);
    fs.rmSync(checkpointDir(root, 10), { recursive: true });
    assert.throws(() => findCheckpoint(root), new RegExp(`^Error: ${root}: no complete checkpoint \\(.*incomplete.*truncated`));
  });

  it("refuses an edited step, and an edited setting whose config_sha256 was recomputed, by the manifest's own checksum", async () => {
    const dir = await write(root, 10, state(1), 2);
    const edited = editManifest(dir, (m) => {
      m.step = 11;
    });
    assert.throws(() => verifyCheckpoint(dir), { message: `${edited}: corrupt: the manifest fails its own checksum (edited?)` });
    const other = await write(root, 20, state(2), 2);
    editManifest(other, (m) => {
      m.config.lr = 0.1;
      m.config_sha256 = configSha256(m.config);
    });
    assert.throws(() => verifyCheckpoint(other), {
      message: `${path.join(other, 'manifest.json')}: corrupt: the manifest fails its own checksum (edited?)`,
    });
  });

  it("refuses a config_sha256 that is not its config's, even under a valid manifest checksum", async () => {
    const dir = await write(root, 10, state(1), 2, { ...meta(10), config_sha256: configSha256({ ...config, lr: 0.1 }) });
    assert.throws(() => verifyCheckpoint(dir), {
      message: `${path.join(dir, 'manifest.json')}: corrupt: config_sha256 is not the sha256 of its config`,
    });
  });

  it('verifies a manifest whatever its key order and layout, since the checksum is over canonical JSON', async () => {
    const dir = await write(root, 10, state(1), 2);
    editManifest(dir, (m) =>
      Object.fromEntries(
        Object.entries(m)
          .reverse()
          .map(([k, v]) => [k, k === 'config' ? Object.fromEntries(Object.entries(m.config).reverse()) : v]),
      ),
    );
    assert.equal(verifyCheckpoint(dir).step, 10);
  });

  it('passes over a newest checkpoint whose manifest was edited, saying why', async () => {
    await write(root, 10, state(1), 2);
    const newer = await write(root, 20, state(2), 2);
    editManifest(newer, (m) => {
      m.seed = 2;
    });
    const found = findCheckpoint(root);
    assert.equal(found.dir, checkpointDir(root, 10));
    assert.deepEqual(found.skipped, [`${path.join(newer, 'manifest.json')}: corrupt: the manifest fails its own checksum (edited?)`]);
  });

  it("a checkpoint written over a larger spare (a bigger model's) keeps no old tail: it verifies and loads", async () => {
    const big = [
      { name: 'fc.weight', shape: [70, 50] },
      { name: 'fc.bias', shape: [70] },
    ];
    const older = await write(
      root,
      5,
      {
        tensors: big,
        params: randomTensor(3570, 7),
        slots: [{ name: 'velocity', data: randomTensor(3570, 8) }],
        held: { from: 0, to: 3570 },
      },
      2,
    );
    const bigBytes = fs.statSync(path.join(older, 'state.safetensors')).size;
    await write(root, 7, state(9), 1);
    pruneCheckpoints(root, 1);
    assert.equal(fs.statSync(path.join(stagingDir(root), 'state.safetensors')).size, bigBytes);
    const dir = checkpointDir(root, 10);
    const s = state(3);
    await write(root, 10, s, 3);
    const manifest = verifyCheckpoint(dir);
    assert.ok(manifest.file.bytes < bigBytes);
    assert.equal(fs.statSync(path.join(dir, 'state.safetensors')).size, manifest.file.bytes);
    const params = new Float32Array(P);
    const velocity = new Float32Array(P);
    loadCheckpoint(dir, manifest, tensors, params, [{ name: 'velocity', data: velocity }]);
    assert.deepEqual([params, velocity], [s.params, s.slots[0].data]);
  });

  it('sharded state: ranks holding only their chunk of each slot write the same file as replicated state; one that lacks its chunk is refused', async () => {
    const slots = ['exp_avg', 'exp_avg_sq'].map((name, k) => ({ name, data: randomTensor(P, 40 + k) }));
    const whole: TrainingState = { tensors, params: randomTensor(P, 4), slots, held: { from: 0, to: P } };
    const n = 3;
    const bounds = [0, 1, 2, 3].map((c) => Math.min(Math.floor((c * (P + 1)) / n), P)); // chunks.ts's cut of P + 1
    const shard = (i: number): TrainingState => ({
      ...whole,
      held: { from: bounds[i], to: bounds[i + 1] },
      slots: slots.map((s) => ({ name: s.name, data: s.data.slice(bounds[i], bounds[i + 1]) })),
    });
    const roots = ['replicated', 'sharded'].map((kind) => path.join(root, kind));
    const dirs = roots.map((r) => checkpointDir(r, 5));
    const digests: string[][][] = [];
    for (const i of [0, 1, 2])
      digests.push([await stripe(stagingDir(roots[0]), whole, i, n), await stripe(stagingDir(roots[1]), shard(i), i, n)]);
    assert.deepEqual(
      digests.map((d) => d[0]),
      digests.map((d) => d[1]),
    );
    for (const k of [0, 1]) {
      const prepared = prepareManifest(
        stagingDir(roots[k]),
        meta(5),
        whole,
        digests.map((d) => d[k]),
      );
      await prepared.durable;
      commitManifest(prepared, dirs[k]);
    }
    const files = dirs.map((d) => fs.readFileSync(path.join(d, 'state.safetensors')));
    assert.ok(files[0].equals(files[1]));
    const loaded = slots.map((s) => ({ name: s.name, data: new Float32Array(P) }));
    loadCheckpoint(dirs[1], verifyCheckpoint(dirs[1]), tensors, new Float32Array(P), loaded);
    assert.deepEqual(
      loaded.map((s) => s.data),
      slots.map((s) => s.data),
    );
    assert.throws(() => writeStripes(dirs[1], shard(0), [1], n, writers[1]), {
      message: `writeStripes: the state does not hold chunk 1 of 3 (elements ${bounds[1]}..${bounds[2]}) of exp_avg`,
    });
  });

  it('stripes larger than the staging buffers, at offsets no page boundary fits, written at once over an older longer file, hold exactly the state', async () => {
    // 3 writers of 2 groups of ~10 MB each: the middles go straight to the disk through the 4 MiB
    // staging slots in turn, the unaligned ends (shared pages between writers) through the page cache
    const P = 2_600_003 * 3;
    const big = [{ name: 'w', shape: [2_600_003, 3] }];
    const s: TrainingState = {
      tensors: big,
      params: randomTensor(P, 11),
      slots: [{ name: 'velocity', data: randomTensor(P, 12) }],
      held: { from: 0, to: P },
    };
    const dir = checkpointDir(root, 10);
    fs.mkdirSync(stagingDir(root), { recursive: true });
    fs.writeFileSync(path.join(stagingDir(root), 'state.safetensors'), Buffer.alloc(2 * 4 * P + 3 * 4096 + 5, 0xff));
    const manifest = verifyCheckpoint(await write(root, 10, s, 3));
    const params = new Float32Array(P);
    const velocity = new Float32Array(P);
    loadCheckpoint(dir, manifest, big, params, [{ name: 'velocity', data: velocity }]);
    const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    assert.ok(bytes(params).equals(bytes(s.params)) && bytes(velocity).equals(bytes(s.slots[0].data)));
    assert.equal(fs.statSync(path.join(dir, 'state.safetensors')).size, manifest.file.bytes);
  });

  it("a stripe that cannot be written fails naming it, as Node's fs errors do", async () => {
    const missing = path.join(root, 'missing');
    const file = path.join(missing, 'state.safetensors');
    const parts = [{ at: 0, bytes: new Uint8Array(8) }];
    await assert.rejects(writers[0].write(file, 8, parts), { message: `${file}: ENOENT: no such file or directory`, code: 'ENOENT' });
  });

  it("a manifest's write replaces a longer file whole, and one that cannot be written fails naming it, as Node's fs errors do", async () => {
    const s = state(1);
    const staging = stagingDir(root);
    fs.mkdirSync(staging, { recursive: true });
    fs.writeFileSync(path.join(staging, 'manifest.json'), 'x'.repeat(1 << 16));
    const prepared = prepareManifest(staging, meta(5), s, [stripeDigests(s, 0, 1)]);
    await prepared.durable;
    assert.equal(fs.readFileSync(path.join(staging, 'manifest.json'), 'utf8'), JSON.stringify(prepared.manifest, null, 1) + '\n');
    // a directory where the manifest goes: its open fails
    const other = path.join(root, 'other');
    const file = path.join(other, 'manifest.json');
    fs.mkdirSync(file, { recursive: true });
    const refused = prepareManifest(other, meta(5), s, [stripeDigests(s, 0, 1)]);
    await assert.rejects(refused.durable, { message: `${file}: EISDIR: illegal operation on a directory`, code: 'EISDIR' });
  });

  it("parts in any order, of any size and alignment, with gaps between them, land exactly where they say; the gaps keep the file's old bytes", async () => {
    const file = path.join(root, 'parts.bin');
    const fileBytes = 13_000_003;
    const old = Buffer.alloc(fileBytes, 0xee);
    fs.writeFileSync(file, old);
    // runs of touching parts: one inside a page, one within a staging slot, one over three slots,
    // one to the file's end; parts of 1 byte, parts across page boundaries, an empty part
    const runs = [
      [5, 1, 3000],
      [4097, 100, 1, 5000, 700_000, 61],
      [900_000, 4_500_000, 33, 4_500_000, 1],
      [12_999_000, 1003],
    ];
    const parts: { at: number; bytes: Uint8Array }[] = [];
    let seed = 1;
    for (const [at, ...lengths] of runs) {
      let offset = at;
      for (const length of lengths) {
        const bytes = Buffer.from(randomTensor(Math.ceil(length / 4), seed++).buffer).subarray(0, length);
        parts.push({ at: offset, bytes });
        offset += length;
      }
    }
    parts.push({ at: 77, bytes: new Uint8Array(0) });
    const expected = Buffer.from(old);
    for (const p of parts) expected.set(p.bytes, p.at);
    // shuffled: a writer gets its stripes in chunk order, not file order
    const shuffled = parts
      .map((p, i) => ({ p, key: (i * 7919) % parts.length }))
      .sort((a, b) => a.key - b.key)
      .map(({ p }) => p);
    await writers[0].write(file, fileBytes, shuffled);
    assert.ok(fs.readFileSync(file).equals(expected));
  });

  it('refuses parts that overlap in the file, naming the later one, and writes nothing', async () => {
    const file = path.join(root, 'overlap.bin');
    const parts = [
      { at: 0, bytes: new Uint8Array(4096) },
      { at: 8192, bytes: new Uint8Array(10) },
      { at: 4095, bytes: new Uint8Array(2) },
    ];
    assert.throws(() => writers[0].write(file, 16384, parts), {
      name: 'TypeError',
      message:
        'FileWriter.write: expected parts[2].at to be an offset at or past the end of parts[0] (parts must not overlap), got number 4095',
    });
    assert.equal(fs.existsSync(file), false);
  });

  it('CRC-64 (ISA-L) gives the published check value and chains over pieces', () => {
    assert.equal(crc64(Buffer.from('123456789')), '995dc9bbdf1939fa'); // CRC-64/XZ's check value
    assert.equal(crc64(Buffer.from('1234'), Buffer.from('56789')), '995dc9bbdf1939fa');
    assert.notEqual(crc64(Buffer.from('123456788')), '995dc9bbdf1939fa');
  });

  it("keeps the newest complete checkpoints, the newest pruned one's file as the spare", async () => {
    for (const step of [5, 10, 15, 20]) await write(root, step, state(step), 1);
    const newestPruned = inode(path.join(checkpointDir(root, 10), 'state.safetensors'));
    pruneCheckpoints(root, 2);
    assert.deepEqual(fs.readdirSync(root).sort(), ['step-00000015', 'step-00000020', 'step-next']);
    assert.equal(inode(path.join(stagingDir(root), 'state.safetensors')), newestPruned);
  });
});

/** The byte range of a checkpoint's last stripe (rank n-1's chunk of the last tensor group: the file's tail). */
function lastStripe(dir: string): string {
  const stripe = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')).file.stripes.at(-1);
  return `${stripe.offset}..${stripe.offset + stripe.length}`;
}
