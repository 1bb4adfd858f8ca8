// ft-data text: small texts converted through the program with every window, label and vocabulary
// entry checked by hand (fortune '%' lines, files without a final newline, the position split,
// byte tokens of multi-byte characters, a vocabulary past 256 stored float32), the one-line refusals
// (exit 2, nothing written) and bad input (exit 1), the tokenisation module's round trips and
// errors, the manifest's `text` field checks, and datasets/text-char's prepare writing it once.
import { execFile } from 'node:child_process';
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { isComplete, prepareDataset } from '../../datasets/prepare';
import { makeTextChar, textCharDefaults } from '../../datasets/text-char';
import { datasetText, invalidUtf8Offset, textFiles } from '../../src/data/convert/text';
import { Dataset } from '../../src/data/dataset';
import { readManifest, type TextInfo } from '../../src/data/manifest';
import { decodeTokens, encodeText, vocabularySize } from '../../src/data/text-tokens';
import { makeScratch, removeScratch } from '../helpers/scratch';

const ftData = path.join(__dirname, '..', '..', '..', 'launch', 'ft-data.js');
const scratch = makeScratch('ft-data-text-');

/** Runs ft-data; resolves to its exit code and stderr. */
async function run(args: string[]): Promise<{ code: number; stderr: string }> {
  try {
    const { stderr } = await promisify(execFile)(process.execPath, [ftData, ...args]);
    return { code: 0, stderr };
  } catch (error) {
    const failure = error as { code: number; stderr: string };
    return { code: failure.code, stderr: failure.stderr };
  }
}

function write(name: string, content: string | Buffer): string {
  const file = path.join(scratch, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content);
  return file;
}

/** Each split's samples as lists of ids, its labels, and the manifest. */
async function readText(dir: string) {
  const dataset = await Dataset.open(dir);
  try {
    await dataset.verify();
    const rows = async (split: 'train' | 'test') => {
      const data = await (split === 'train' ? dataset.train : dataset.test).readAll();
      const windows = Array.from({ length: data.rows }, (_, r) =>
        Array.from(data.features.subarray(r * data.sampleSize, (r + 1) * data.sampleSize)),
      );
      return { windows, labels: Array.from(data.labels), features: data.features, divisor: data.divisor };
    };
    return { manifest: dataset.manifest, train: await rows('train'), test: await rows('test') };
  } finally {
    await dataset.close();
  }
}

describe('text datasets', function () {
  this.timeout(120000);
  after(() => removeScratch(scratch));

  describe('ft-data text', () => {
    it('char tokens at context 4: fortune separators, files in name order, exact windows, labels, vocabulary and position split', async () => {
      // b.txt has no final newline; a.dat, a.u8 (fortune metadata) and the subfolder are not text
      write('corpus/a.txt', 'hello\n%\nworld\n');
      write('corpus/b.txt', 'hi');
      write('corpus/a.dat', 'strfile index');
      fs.symlinkSync('a.txt', path.join(scratch, 'corpus', 'a.u8'));
      write('corpus/sub/c.txt', 'not read');
      assert.deepEqual(textFiles([path.join(scratch, 'corpus')]), [path.join(scratch, 'corpus/a.txt'), path.join(scratch, 'corpus/b.txt')]);

      const out = path.join(scratch, 'char');
      const { code, stderr } = await run([
        'text',
        '--from',
        path.join(scratch, 'corpus'),
        '--context',
        '4',
        '--test-fraction',
        '0.4',
        '--out',
        out,
      ]);
      assert.equal(code, 0, stderr);
      assert.match(stderr, /: 2 train \+ 1 test samples of shape \[5\] \(uint8\), 9 classes\n$/);
      // the text: "hello\n\nworld\nhi\n" (16 tokens); train: the first round(0.6 * 16) = 10, test: the last 6
      const vocab = ['\n', 'd', 'e', 'h', 'i', 'l', 'o', 'r', 'w'];
      const { manifest, train, test } = await readText(out);
      assert.deepEqual(manifest.text, { tokens: 'char', context: 4, vocab });
      assert.deepEqual([manifest.sample_shape, manifest.dtype, manifest.divisor, manifest.classes], [[5], 'uint8', 1, 9]);
      assert.deepEqual(manifest.class_names, vocab);
      assert.deepEqual(manifest.split, { method: 'position', test_fraction: 0.4 });
      assert.equal(
        manifest.source,
        `ft-data text --tokens char --context 4 --test-fraction 0.4 of ${path.join(scratch, 'corpus')}: a.txt, b.txt (2 files)`,
      );
      // train tokens "hello\n\nwor": windows [0, 5) "hello" and [4, 9) "o\n\nwo", overlapping by one token
      assert.deepEqual(train.windows, [
        [3, 2, 5, 5, 6],
        [6, 0, 0, 8, 6],
      ]);
      assert.deepEqual(train.labels, [6, 6]);
      // test tokens "ld\nhi\n": one complete window "ld\nhi"; its last token is left over
      assert.deepEqual(test.windows, [[5, 1, 0, 3, 4]]);
      assert.deepEqual(test.labels, [4]);
      assert.equal(decodeTokens(manifest.text!, train.windows[1]), 'o\n\nwo');
      assert.deepEqual(manifest.splits.train.class_counts, [0, 0, 0, 0, 0, 0, 2, 0, 0]);
      assert.ok(train.features instanceof Uint8Array && train.divisor === 1);
    });

    it('fortune separators: only a line holding just "%" becomes empty; a final newline is added once', () => {
      assert.equal(datasetText('%\na\n%\n%\n50%\n%x\n%'), '\na\n\n\n50%\n%x\n');
      assert.equal(datasetText('a\r\n%\r\nb'), 'a\r\n\r\nb\n');
      assert.equal(datasetText(''), '');
    });

    it('byte tokens: the UTF-8 bytes of multi-byte characters, 256 classes, no vocabulary', async () => {
      // "aé\nb€\n": 61 | c3 a9 | 0a | 62 | e2 82 ac | 0a, 9 bytes; train the first 5, test the last 4
      const out = path.join(scratch, 'byte');
      const from = write('bytes.txt', 'aé\nb€\n');
      const { code, stderr } = await run([
        'text',
        '--from',
        from,
        '--tokens',
        'byte',
        '--context',
        '2',
        '--test-fraction',
        '0.4',
        '--out',
        out,
      ]);
      assert.equal(code, 0, stderr);
      const { manifest, train, test } = await readText(out);
      assert.deepEqual(manifest.text, { tokens: 'byte', context: 2 });
      assert.deepEqual([manifest.sample_shape, manifest.dtype, manifest.divisor, manifest.classes], [[3], 'uint8', 1, 256]);
      assert.deepEqual([manifest.class_names[0], manifest.class_names[0xc3], manifest.class_names[255]], ['0x00', '0xc3', '0xff']);
      assert.deepEqual(train.windows, [
        [0x61, 0xc3, 0xa9],
        [0xa9, 0x0a, 0x62],
      ]);
      assert.deepEqual(train.labels, [0xa9, 0x62]);
      assert.deepEqual(test.windows, [[0xe2, 0x82, 0xac]]);
      assert.deepEqual(test.labels, [0xac]);
      assert.equal(decodeTokens(manifest.text!, test.windows[0]), '€');
    });

    it('a vocabulary of more than 256 characters is stored float32, the ids exact', async () => {
      // 300 distinct CJK characters, each twice: ids 0..299 in code point order
      const characters = Array.from({ length: 300 }, (_, i) => String.fromCodePoint(0x4e00 + i)).join('');
      const out = path.join(scratch, 'wide');
      const from = write('wide.txt', characters + characters);
      const { code, stderr } = await run(['text', '--from', from, '--context', '100', '--test-fraction', '0.5', '--out', out]);
      assert.equal(code, 0, stderr);
      const { manifest, train, test } = await readText(out);
      assert.deepEqual([manifest.dtype, manifest.divisor, manifest.classes, manifest.text!.vocab!.length], ['float32', 1, 301, 301]);
      assert.ok(train.features instanceof Float32Array);
      // the text is the characters twice and a newline (id 0), 601 tokens: train [0, round(300.5) = 301), test [301, 601)
      assert.deepEqual([train.windows.length, test.windows.length], [3, 2]);
      assert.deepEqual(train.windows[2], [...Array.from({ length: 100 }, (_, i) => 201 + i), 1]);
      assert.deepEqual(
        test.windows[0],
        Array.from({ length: 101 }, (_, i) => 2 + i),
      );
      assert.equal(decodeTokens(manifest.text!, test.windows[0]), characters.slice(1, 102));
    });

    it('refusals: one line, exit 2, nothing written', async () => {
      const from = write('short.txt', 'abcdefghij\n'); // 11 tokens
      const empty = write('empty/e.txt', '');
      const out = path.join(scratch, 'refused');
      const cases: [string[], string][] = [
        [['--context', '0'], 'ft-data: --context expects an integer >= 1, got 0 (see --help)'],
        [['--context', '2.5'], 'ft-data: --context expects an integer >= 1, got 2.5 (see --help)'],
        [['--test-fraction', '1'], 'ft-data: --test-fraction expects a number in (0, 1), got 1 (see --help)'],
        [['--test-fraction', '0'], 'ft-data: --test-fraction expects a number in (0, 1), got 0 (see --help)'],
        [['--tokens', 'word'], 'ft-data: Invalid values: Argument: tokens, Given: "word", Choices: "char", "byte" (see --help)'],
        [
          ['--context', '4'],
          "ft-data: the test split has 1 of the text's 11 tokens, too few for one window of 5 (--context 4 + 1): raise --test-fraction or lower --context",
        ],
        [
          ['--context', '4', '--test-fraction', '0.7'],
          "ft-data: the train split has 3 of the text's 11 tokens, too few for one window of 5 (--context 4 + 1): lower --context or --test-fraction",
        ],
      ];
      for (const [args, line] of cases) {
        const { code, stderr } = await run(['text', '--from', from, '--out', out, ...args]);
        assert.deepEqual([code, stderr.trim().split('\n').pop()], [2, line], args.join(' '));
      }
      const { code, stderr } = await run(['text', '--from', path.dirname(empty), '--out', out]);
      assert.deepEqual([code, stderr.trim().split('\n').pop()], [2, `ft-data: ${path.dirname(empty)}: no text (empty files)`]);
      assert.deepEqual(
        fs.readdirSync(scratch).filter((name) => name.startsWith('.refused') || name === 'refused'),
        [],
        'something was written',
      );
    });

    it('bad input: invalid UTF-8 named by file and byte offset, a missing file, an existing --out (exit 1)', async () => {
      const bad = write('latin1.txt', Buffer.from([0x61, 0x62, 0x0a, 0x63, 0xe9, 0x74, 0xe9, 0x0a]));
      const out = path.join(scratch, 'bad');
      assert.deepEqual(await run(['text', '--from', bad, '--out', out]), {
        code: 1,
        stderr: `ft-data: ${bad}: not UTF-8 text: an invalid byte sequence at byte offset 4 (0xe9 0x74 0xe9 0x0a)\n`,
      });
      assert.deepEqual(await run(['text', '--from', path.join(scratch, 'absent.txt'), '--out', out]), {
        code: 1,
        stderr: `ft-data: ${path.join(scratch, 'absent.txt')}: cannot read (ENOENT)\n`,
      });
      assert.deepEqual(fs.existsSync(out), false);
      const existing = path.join(scratch, 'char');
      assert.equal(
        (await run(['text', '--from', bad, '--out', existing])).stderr,
        `ft-data: ${existing}: already exists (--force replaces it)\n`,
      );
      // overlong forms, surrogates and code points past U+10FFFF are invalid too; a truncated tail is
      assert.deepEqual(
        [
          [0xc0, 0x80],
          [0xed, 0xa0, 0x80],
          [0xf4, 0x90, 0x80, 0x80],
          [0x61, 0xe2, 0x82],
          [0xf0, 0x9f, 0x98, 0x80],
        ].map((b) => invalidUtf8Offset(Uint8Array.from(b))),
        [0, 0, 0, 1, -1],
      );
    });

    it('--help lists every flag with its default and says what becomes of fortune separators', async () => {
      const { stdout } = await promisify(execFile)(process.execPath, [ftData, 'text', '--help']);
      for (const flag of ['--out', '--from', '--tokens', '--context', '--test-fraction', '--force', '--name', '--rows-per-batch'])
        assert.ok(stdout.includes(flag), flag);
      for (const fallback of ['[default: ["/usr/share/games/fortunes"]]', '[default: "char"]', '[default: 256]', '[default: 0.1]'])
        assert.ok(stdout.includes(fallback), fallback);
      assert.match(stdout.replace(/\s+/g, ' '), /A line holding only '%' \(a fortune separator\) becomes an empty line/);
    });
  });

  describe('text tokens', () => {
    const chars: TextInfo = { tokens: 'char', context: 4, vocab: ['\n', ' ', 'a', 'b', 'é', '😀'] };
    const bytes: TextInfo = { tokens: 'byte', context: 4 };

    it('encode and decode round trip, characters past U+FFFF included', () => {
      const text = 'ab é😀\nba';
      assert.deepEqual(encodeText(chars, text), [2, 3, 1, 4, 5, 0, 3, 2]);
      assert.equal(decodeTokens(chars, encodeText(chars, text)), text);
      assert.deepEqual(encodeText(bytes, 'é😀'), [0xc3, 0xa9, 0xf0, 0x9f, 0x98, 0x80]);
      assert.equal(decodeTokens(bytes, encodeText(bytes, text)), text);
      assert.deepEqual([vocabularySize(chars), vocabularySize(bytes)], [6, 256]);
    });

    it('a character outside the vocabulary, an invalid byte sequence, an id outside the vocabulary', () => {
      assert.throws(() => encodeText(chars, 'a €'), {
        message: 'the prompt has "€" (U+20AC), which is not in the dataset\'s vocabulary',
      });
      assert.throws(() => encodeText(chars, 'a\tb', 'line 3'), {
        message: 'line 3 has "\\t" (U+0009), which is not in the dataset\'s vocabulary',
      });
      assert.equal(decodeTokens(bytes, [0x61, 0xff, 0x62, 0xe2, 0x82]), 'a\uFFFDb\uFFFD');
      assert.throws(() => decodeTokens(chars, [0, 6]), { message: 'token 1: id 6 is outside the vocabulary (6 tokens)' });
      assert.throws(() => encodeText(bytes, 'a\uD800'), {
        message: 'the prompt has a lone surrogate "\\ud800" (U+D800), which UTF-8 cannot encode',
      });
    });
  });

  describe('the manifest text field', () => {
    const dir = path.join(scratch, 'edited');

    /** The char dataset of the first test, its manifest edited by `edit`; readManifest's error. */
    function readEdited(edit: (manifest: Record<string, unknown>) => void): string {
      fs.rmSync(dir, { recursive: true, force: true });
      fs.cpSync(path.join(scratch, 'char'), dir, { recursive: true });
      const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as Record<string, unknown>;
      edit(manifest);
      fs.writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify(manifest));
      try {
        readManifest(dir);
        return 'valid';
      } catch (error) {
        return (error as Error).message.slice(path.join(dir, 'manifest.json: ').length);
      }
    }

    it('is checked against the samples and classes; a manifest without it stays valid', () => {
      const text = (m: Record<string, unknown>) => m.text as Record<string, unknown>;
      assert.equal(
        readEdited(() => {}),
        'valid',
      );
      assert.equal(
        readEdited((m) => delete m.text),
        'valid',
      );
      assert.equal(
        readEdited((m) => (text(m).tokens = 'word')),
        'text.tokens: expected "char" or "byte", got "word"',
      );
      assert.equal(
        readEdited((m) => (text(m).context = 3)),
        'sample_shape: expected [4] (text.context + 1), got [5]',
      );
      assert.equal(
        readEdited((m) => (text(m).vocab = ['\n', 'd'])),
        'text.vocab: expected a list of 9 characters (one per class), got ["\\n","d"]',
      );
      assert.equal(
        readEdited((m) => ((text(m).vocab as string[])[2] = 'd')),
        'text.vocab[2]: expected one character after "d", got "d"',
      );
      assert.equal(
        readEdited((m) => ((text(m).vocab as string[])[0] = 'ab')),
        'text.vocab[0]: expected one character, got "ab"',
      );
      assert.equal(
        readEdited((m) => (text(m).tokens = 'byte')),
        'text.vocab: expected nothing for byte tokens, got ["\\n","d","e","h","i","l","o","r","w"]',
      );
    });
  });

  describe('datasets/text-char', () => {
    it("is Debian's fortunes at context 256, written once: a second prepare leaves it alone", async () => {
      const root = path.join(scratch, 'prepared');
      const textChar = { dir: 'text-char', make: (dir: string) => makeTextChar(dir) };
      assert.equal(await prepareDataset(root, textChar), true);
      const dir = path.join(root, 'text-char');
      assert.ok(isComplete(dir));
      const manifest = readManifest(dir);
      assert.deepEqual([manifest.sample_shape, manifest.dtype, manifest.text!.tokens], [[257], 'uint8', 'char']);
      assert.equal(manifest.text!.context, textCharDefaults.context);
      assert.ok(manifest.source.includes('/usr/share/games/fortunes: art, ascii-art,'), manifest.source);
      const written = fs.statSync(path.join(dir, 'manifest.json')).mtimeMs;
      assert.equal(await prepareDataset(root, textChar), false);
      assert.equal(fs.statSync(path.join(dir, 'manifest.json')).mtimeMs, written);
      // an incomplete one (a split file cut short) is written again
      fs.truncateSync(path.join(dir, 'test.arrow'), 100);
      assert.equal(await prepareDataset(root, textChar), true);
      assert.ok(isComplete(dir));
      assert.deepEqual(fs.readdirSync(root), ['text-char']);
    });
  });
});
