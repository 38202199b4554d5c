#!/usr/bin/env python3
"""Writes the reference that tests/data/test_bpe_tokenizer.cpp (BpeReference.*)
compares attnlab's GPT-2 byte-level BPE (data/bpe_tokenizer.h) against.

    /usr/bin/python3 tests/reference/bpe_reference.py OUT.h5

CTest runs this as the fixture `bpe_reference_fixtures` before the BpeReference
tests (tests/CMakeLists.txt) and hands them the file through ATTNLAB_BPE_FIXTURES.

No tokenizer can be downloaded here, so this script trains one: a byte-level
BPE with NUM_MERGES merges on the repository's README.md and docs/*.md plus a
block of text in many scripts (MULTILINGUAL below), and writes it as GPT-2's
vocab.json + merges.txt and as Hugging Face tokenizer.json files. It then
encodes the corpus, hand-picked strings and random strings with its own
implementation of OpenAI's gpt-2 src/encoder.py, written here in plain Python
(Debian's python3 has no `regex` module, so the pre-tokenising pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

is carried out by hand, alternative by alternative, with unicodedata's general
categories for \\p{L} and \\p{N} and Unicode's White_Space for \\s as the
`regex` module has it; nothing is shared with the C++, which uses PCRE2).

Added tokens (tokenizer.json) are cut out as Hugging Face does: leftmost-longest,
first those with "normalized": false, then those with "normalized": true, and
with add_prefix_space each remaining segment gets a space in front unless it
starts with one.

Variants (each encodes every text):
  vocab_merges       vocab.json + merges.txt, no added tokens (encoder.py)
  tokenizer_json     tokenizer.json, merges as "a b", added "<|endoftext|>"
                     (special, not normalized, also in model.vocab) and "    "
                     (four spaces, normalized, an id of its own: as GPT-NeoX's
                     runs of spaces)
  tokenizer_pairs    the same with merges as ["a", "b"] (tokenizers >= 0.20)
  tokenizer_prefix   tokenizer_json with add_prefix_space true

File layout:
  /                        attrs: format, format_version, num_merges, vocab_size
  /files/NAME              uint8: vocab.json, merges.txt, tokenizer.json,
                           tokenizer_pairs.json, tokenizer_prefix.json
  /texts/bytes             uint8: every text's UTF-8, one after another
  /texts/offsets           int64 [T+1]: text t is bytes[offsets[t]:offsets[t+1]];
                           text 0 is the training corpus
  /VARIANT/ids             int32: every text's ids, one after another
  /VARIANT/offsets         int64 [T+1]
  /VARIANT/decoded         uint8: decode(ids) of every text (== the text, but
  /VARIANT/decoded_offsets int64 [T+1]   for tokenizer_prefix's added spaces)
"""
import json
import random
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

import h5py
import numpy as np

FORMAT = "attnlab-bpe-reference"
FORMAT_VERSION = 1
NUM_MERGES = 500
REPO = Path(__file__).resolve().parents[2]
EOT = "<|endoftext|>"
SPACES4 = "    "

# Unicode's White_Space property (PropList.txt), which the `regex` module's \s
# is in Unicode mode. (Python's str.isspace() adds U+001C..U+001F; PCRE2's \s
# adds U+180E.)
WHITE_SPACE = frozenset(map(chr, [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                  0x2028, 0x2029, 0x202F, 0x205F, 0x3000]))
CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


def bytes_to_unicode():
    """encoder.py's table: printable bytes are themselves, the rest 256, 257, ..."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}


def is_letter(c):
    return unicodedata.category(c)[0] == "L"


def is_number(c):
    return unicodedata.category(c)[0] == "N"


def is_other(c):
    return not (c in WHITE_SPACE or is_letter(c) or is_number(c))


def match_at(text, i):
    """End of the pattern's match at i: the first alternative that matches, as a
    backtracking regex engine tries them."""
    n = len(text)
    for contraction in CONTRACTIONS:  # 's|'t|'re|'ve|'m|'ll|'d
        if text.startswith(contraction, i):
            return i + len(contraction)
    for in_class in (is_letter, is_number, is_other):  # ' ?X+': the space taken if X+ follows it, else not
        starts = [i + 1, i] if text[i] == " " else [i]
        for start in starts:
            end = start
            while end < n and in_class(text[end]):
                end += 1
            if end > start:
                return end
    end = i
    while end < n and text[end] in WHITE_SPACE:
        end += 1
    assert end > i, f"no alternative matches {text[i]!r}"
    if end < n and end - 1 > i:
        return end - 1  # \s+(?!\S) backs off one character, leaving a white space before the non-space
    return end  # the run ends the text ((?!\S) holds), or is one character before a non-space (\s+)


def pretokenize(text):
    pieces, i = [], 0
    while i < len(text):
        end = match_at(text, i)
        pieces.append(text[i:end])
        i = end
    return pieces


def get_pairs(word):
    return set(zip(word, word[1:]))


def bpe(token, ranks):
    """encoder.py's bpe(), as written there."""
    word = tuple(token)
    pairs = get_pairs(word)
    if not pairs:
        return word
    while True:
        bigram = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word = []
        i = 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    return word


class Reference:
    def __init__(self, vocab, merges, added=(), add_prefix_space=False):
        self.vocab = vocab
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.added = list(added)  # (content, id, normalized)
        self.add_prefix_space = add_prefix_space
        self.tokens = {i: s for s, i in vocab.items()}
        self.tokens.update({i: content for content, i, _ in self.added})
        self.cache = {}

    def segments(self, text):
        """[(text, None) or (content, id)]: added tokens cut out, non-normalized first."""
        segments = [(text, None)]
        for normalized in (False, True):
            tokens = [(c, i) for c, i, norm in self.added if norm == normalized]
            out = []
            for piece, token_id in segments:
                if token_id is not None or not tokens:
                    out.append((piece, token_id))
                    continue
                start = at = 0
                while at < len(piece):
                    hits = [(len(c), -k, c, i) for k, (c, i) in enumerate(tokens) if piece.startswith(c, at)]
                    if not hits:
                        at += 1
                        continue
                    _, _, content, hit_id = max(hits)  # longest; the first listed among equals
                    if start < at:
                        out.append((piece[start:at], None))
                    out.append((content, hit_id))
                    at += len(content)
                    start = at
                if start < len(piece):
                    out.append((piece[start:], None))
            segments = out
        return segments

    def encode(self, text):
        ids = []
        for segment, token_id in self.segments(text):
            if token_id is not None:
                ids.append(token_id)
                continue
            if self.add_prefix_space and not segment.startswith(" "):
                segment = " " + segment
            pieces = pretokenize(segment)
            assert "".join(pieces) == segment
            for piece in pieces:
                if piece not in self.cache:
                    symbols = bpe("".join(BYTE_ENCODER[b] for b in piece.encode("utf-8")), self.ranks)
                    self.cache[piece] = [self.vocab[s] for s in symbols]
                ids.extend(self.cache[piece])
        return ids

    def decode(self, ids):
        """Hugging Face's ByteLevel decoder: each token's characters back to bytes,
        or its own UTF-8 if one character is not in the table."""
        out = bytearray()
        for token in (self.tokens[i] for i in ids):
            if all(c in BYTE_DECODER for c in token):
                out.extend(BYTE_DECODER[c] for c in token)
            else:
                out.extend(token.encode("utf-8"))
        return bytes(out)


def merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def train(text, num_merges):
    """Byte-level BPE: repeatedly merge the most frequent adjacent pair within the
    pre-tokenised words (ties: the greater pair, so that runs repeat)."""
    counts = Counter("".join(BYTE_ENCODER[b] for b in piece.encode("utf-8")) for piece in pretokenize(text))
    words = [list(w) for w in counts]
    freqs = list(counts.values())
    pair_counts, where = Counter(), defaultdict(set)
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    merges = []
    for _ in range(num_merges):
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        merges.append(best)
        for i in sorted(where.pop(best)):
            for pair in zip(words[i], words[i][1:]):
                pair_counts[pair] -= freqs[i]
                if pair_counts[pair] <= 0:
                    del pair_counts[pair]
                where[pair].discard(i)
            words[i] = merge_word(words[i], best)
            for pair in zip(words[i], words[i][1:]):
                pair_counts[pair] += freqs[i]
                where[pair].add(i)
    # GPT-2's id order: the 256 byte symbols in bytes_to_unicode's order, the merges, then <|endoftext|>
    vocab = {c: i for i, c in enumerate(BYTE_ENCODER.values())}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    vocab[EOT] = len(vocab)
    return vocab, merges


MULTILINGUAL = """\
Le café est très chaud, n'est-ce pas ? Ça coûte 3,50 € — déjà payé.
Größere Übungen: Straße, Mädchen, schön. Ñandú y pingüino, ¿qué tal? ¡Olé!
日本語のテキストと漢字、ひらがな、カタカナ。中文字符：你好，世界！한국어 문장입니다.
Русский текст: съешь же ещё этих мягких французских булок. Ελληνικά: καλημέρα κόσμε.
العربية: مرحبا بالعالم ١٢٣ — हिन्दी: नमस्ते दुनिया ४५६ — ไทย: สวัสดี
Emoji: 😀 😃 🎉👍🏽 👨‍👩‍👧 ❤️ 🇫🇷 and symbols ½ ¾ Ⅻ ② ∑ ∞ ≠ → ★ © ® ™ §
don't won't I'll you're we've I'm he'd she's it's THEY'RE O'Neil rock'n'roll ''quoted''
Numbers: 0 1 12 123 1234 12345 3.14159 2,718 1e-9 0x1F 100% $42 #7 v0.27.0
\tTabs\tinside\t\ttext\t
Trailing spaces   \nLeading spaces\n    four\n        eight\n\n\n\nblank lines\r\nwindows line\r\n
NBSP\u00a0here, ideographic\u3000space, line\u2028separator, next\u0085line, mongolian\u180evowel.
Combining: e\u0301 a\u0308 n\u0303 (decomposed) versus é ä ñ. Zero\u200bwidth, BOM\ufeffhere.
Control \x1c\x1d\x1e\x1f separators and \x00 NUL and \x7f DEL.
<|endoftext|>A new document after the end-of-text marker.<|endoftext|>
"""

HAND_PICKED = [
    "", "hello", " hello", "  hello", "hello  ", "\n", "\n\n", "a\n\nb", "\n\n hello", " \n a", "   ",
    "don't I'll we're they've I'm he'd it's", "'s's", "DON'T", "'", "a'", " '", "''s", "'ll've",
    "123 4567 89", "12abc3", "½Ⅻ٣", "café naïve résumé", "日本語のテキスト", "😀🎉 emoji👍🏽 ",
    "\t\ttabs\t", "trailing   ", "   leading", "a\u180e!b", "\u180e!", "\x1c\x1d!", "x\u0085y", "\u00a0nbsp",
    "\u3000\u3000x", "e\u0301", EOT, EOT + "hello" + EOT, "a" + EOT + " b", "<|endoftext", "<|endoftext|" + EOT,
    SPACES4 + "code", "        eight", "\n" + SPACES4 * 3 + "x", "   three", "     five spaces", "\r\n windows\r\n",
    "x" * 300, " " * 300, "!" * 50 + "?",
]

RANDOM_POOL = (list("abcXYZ019 '\t\n\r.,!?-_()$€") +
               ["  ", "   ", "'s", "'ll", "'re", "'S", "é", "ñ", "ß", "日", "本", "語", "한", "α", "Ж", "ع", "ह",
                "\u0301", "😀", "👍🏽", "🎉", "½", "Ⅻ", "٣", "\u00a0", "\u3000", "\u2028", "\u0085", "\u180e",
                "\x1c", "\x00", "\u200b", "\ufeff", EOT, SPACES4, "\r\n", "don", "the", " the", "ing"])


def random_texts(count, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice(RANDOM_POOL) for _ in range(rng.randint(1, 30))) for _ in range(count)]


def check_pretokenizer():
    """GPT-2's pattern on cases whose split is known (as tiktoken's gpt2 gives them)."""
    cases = {
        "Hello world": ["Hello", " world"],
        "I'll  go\n\nhome ": ["I", "'ll", " ", " go", "\n", "\n", "home", " "],
        "don't": ["don", "'t"],
        "123abc": ["123", "abc"],
        "a  !": ["a", " ", " !"],
        " !!": [" !!"],
        "x\n\n y": ["x", "\n\n", " y"],
        "''s": ["''", "s"],
        "\u180e!": ["\u180e!"],  # U+180E is not White_Space (Unicode >= 6.3)
    }
    for text, pieces in cases.items():
        assert pretokenize(text) == pieces, (text, pretokenize(text), pieces)


def tokenizer_json(vocab, merges, pairs, add_prefix_space):
    eot_id = vocab[EOT]
    added = [
        {"id": eot_id, "content": EOT, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        {"id": len(vocab), "content": SPACES4, "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False), "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": [list(m) if pairs else " ".join(m) for m in merges]},
    }


def concatenated(chunks, dtype):
    offsets = np.cumsum([0] + [len(c) for c in chunks]).astype(np.int64)
    flat = np.concatenate([np.asarray(c, dtype=dtype) for c in chunks] + [np.zeros(0, dtype)])
    return flat, offsets


def write(f, name, values):
    f.create_dataset(name, data=values, compression="gzip")


def main(out_path):
    check_pretokenizer()
    sources = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
    corpus = "\n".join(p.read_text(encoding="utf-8") for p in sources) + "\n" + MULTILINGUAL
    vocab, merges = train(corpus, NUM_MERGES)
    assert len(merges) == NUM_MERGES
    texts = [corpus] + HAND_PICKED + random_texts(300)
    added = [(EOT, vocab[EOT], False), (SPACES4, len(vocab), True)]
    variants = {
        "vocab_merges": Reference(vocab, merges),
        "tokenizer_json": Reference(vocab, merges, added),
        "tokenizer_pairs": Reference(vocab, merges, added),
        "tokenizer_prefix": Reference(vocab, merges, added, add_prefix_space=True),
    }
    files = {
        "vocab.json": json.dumps(vocab),  # \u escapes, as GPT-2's encoder.json
        "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
        "tokenizer.json": json.dumps(tokenizer_json(vocab, merges, False, False), ensure_ascii=False, indent=2),
        "tokenizer_pairs.json": json.dumps(tokenizer_json(vocab, merges, True, False), ensure_ascii=False),
        "tokenizer_prefix.json": json.dumps(tokenizer_json(vocab, merges, False, True), ensure_ascii=False),
    }
    with h5py.File(out_path, "w") as f:
        f.attrs["format"] = np.bytes_(FORMAT)
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["num_merges"] = NUM_MERGES
        f.attrs["vocab_size"] = len(vocab) + 1
        for name, content in files.items():
            write(f, f"files/{name}", np.frombuffer(content.encode("utf-8"), np.uint8))
        for suffix, values in zip(("bytes", "offsets"), concatenated([list(t.encode("utf-8")) for t in texts], np.uint8)):
            write(f, f"texts/{suffix}", values)
        for name, reference in variants.items():
            encoded = [reference.encode(t) for t in texts]
            decoded = [reference.decode(ids) for ids in encoded]
            if name != "tokenizer_prefix":
                assert all(d == t.encode("utf-8") for d, t in zip(decoded, texts)), name
            for suffix, values in zip(("ids", "offsets"), concatenated(encoded, np.int32)):
                write(f, f"{name}/{suffix}", values)
            for suffix, values in zip(("decoded", "decoded_offsets"), concatenated([list(d) for d in decoded], np.uint8)):
                write(f, f"{name}/{suffix}", values)
            print(f"{name}: {len(texts)} texts, corpus {len(corpus)} characters -> {len(encoded[0])} tokens")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT.h5")
    main(sys.argv[1])
