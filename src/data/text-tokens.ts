// The tokenisation of text datasets, one module for both sides: ft-data text turns its text into
// token ids here, and a language model's prompt and samples go through the same functions with the
// dataset's manifest `text` field. Char tokens are Unicode code points (the vocabulary: the sorted
// distinct code points of the dataset's text); byte tokens are the bytes of the UTF-8 text.
import type { TextInfo } from './manifest';

/** Byte tokens: every byte value is a token. */
const byteVocabularySize = 256;

/** Token ids of a vocabulary, by its one-code-point strings; kept per TextInfo (the vocab does not change). */
const idsByVocab = new WeakMap<string[], Map<string, number>>();

/** How many tokens `info`'s text has: the model's classes. */
export function vocabularySize(info: TextInfo): number {
  return info.tokens === 'byte' ? byteVocabularySize : charVocabulary(info).length;
}

/** The sorted (by code point) distinct code points of `text`: a char dataset's vocabulary. */
export function charVocabularyOf(text: string): string[] {
  return [...new Set(text)].sort((a, b) => a.codePointAt(0)! - b.codePointAt(0)!);
}

/**
 * `text`'s token ids. A character outside a char vocabulary is an Error naming it, as text that
 * `what` has (default "the prompt", the usual text encoded against a dataset's vocabulary).
 */
export function encodeText(info: TextInfo, text: string, what = 'the prompt'): number[] {
  return Array.from(encodeTextIds(info, text, what));
}

/** As encodeText, into a typed array (a whole dataset's text: a third of a number[]'s memory). */
export function encodeTextIds(info: TextInfo, text: string, what = 'the prompt'): Uint32Array {
  if (info.tokens === 'byte') {
    const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.exec(text);
    // Buffer would write U+FFFD for it: a token sequence that decodes to other text
    if (lone) throw new Error(`${what} has a lone surrogate ${describeCharacter(lone[0])}, which UTF-8 cannot encode`);
    return new Uint32Array(Buffer.from(text, 'utf8'));
  }
  const vocab = charVocabulary(info);
  let ids = idsByVocab.get(vocab);
  if (!ids) {
    ids = new Map(vocab.map((token, id) => [token, id]));
    idsByVocab.set(vocab, ids);
  }
  const out = new Uint32Array(text.length); // code points <= UTF-16 units; trimmed below
  let count = 0;
  for (const character of text) {
    const id = ids.get(character);
    if (id === undefined) throw new Error(`${what} has ${describeCharacter(character)}, which is not in the dataset's vocabulary`);
    out[count++] = id;
  }
  return out.slice(0, count);
}

/** The text of token ids; byte tokens are decoded as UTF-8, an invalid sequence as U+FFFD. */
export function decodeTokens(info: TextInfo, ids: ArrayLike<number>): string {
  const size = vocabularySize(info);
  for (let i = 0; i < ids.length; ++i) {
    if (!(Number.isInteger(ids[i]) && ids[i] >= 0 && ids[i] < size))
      throw new RangeError(`token ${i}: id ${ids[i]} is outside the vocabulary (${size} tokens)`);
  }
  if (info.tokens === 'byte') return new TextDecoder('utf-8').decode(Uint8Array.from(ids));
  const vocab = charVocabulary(info);
  let text = '';
  for (let i = 0; i < ids.length; ++i) text += vocab[ids[i]];
  return text;
}

/** `"€" (U+20AC)`: the character as JSON writes it (control characters escaped) and its code point. */
export function describeCharacter(character: string): string {
  const codePoint = character.codePointAt(0)!;
  return `${JSON.stringify(character)} (U+${codePoint.toString(16).toUpperCase().padStart(4, '0')})`;
}

function charVocabulary(info: TextInfo): string[] {
  if (!info.vocab) throw new Error('a char-level text dataset without its vocabulary (text.vocab)');
  return info.vocab;
}
