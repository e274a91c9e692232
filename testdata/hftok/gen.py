#!/usr/bin/python3
"""Golden data for ferry's tokenizer.json reader (data/hftok).

Hugging Face's `tokenizers` library is not installed here (no Debian
package, no network beyond Debian's archive), so the reference encoder
below is our own: a small Python implementation written from the
tokenizers algorithm (normalizer, pre-tokenizer regular expression split,
GPT-2's byte-to-character mapping, BPE merges applied by rank; byte
fallback and ignore_merges as the BPE model does them). It uses the
`regex` module (Debian's python3-regex) for the patterns, and merges by
the classic GPT-2 loop (the lowest-ranked pair, every occurrence left to
right), not the priority queue data/hftok uses: two ways to one result.

Run from the repository root:

    apt-get install python3-regex   # once
    /usr/bin/python3 testdata/hftok/gen.py

It writes, beside this script:

  sample.txt                 the text (over 10 KB: prose in several
                             scripts, emoji, code with tabs and indents,
                             runs of spaces and blank lines, CRLF, digits)
  gpt2style.tokenizer.json   byte-level BPE, ByteLevel pre-tokenizer with
                             GPT-2's pattern; merges as "a b" strings
  llama3style.tokenizer.json byte-level BPE, Llama 3's Split pattern then
                             ByteLevel without its own; ignore_merges;
                             merges as ["a", "b"] pairs
  llama2style.tokenizer.json SentencePiece-style BPE: Prepend and Replace
                             normalizers to "▁", no pre-tokenizer,
                             byte_fallback to <0xXX> for characters outside
                             the vocabulary, <unk>
  ids.json                   the reference's ids of sample.txt under each

Each tokenizer is trained here (a few hundred merges, on the first 60 % of
the text), so nothing is downloaded. Seeds and tie-breaks are fixed.
"""
import json
import os
import unicodedata
from collections import Counter

import regex

HERE = os.path.dirname(os.path.abspath(__file__))

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def sample_text():
    prose = [
        "The quick brown fox jumps over the lazy dog. It's 10:45, and we'll see what they've done; I'm sure you'd agree.",
        "IT'S LOUD: WE'LL SHOUT, THEY'VE GONE, I'M HERE, YOU'D KNOW.",
        "Ça va? Où est la bibliothèque? L'été dernier, nous étions à Montréal — c'était génial!",
        "Grüße aus München: Straße, Mädchen, Übermut, Öl und Ähnliches.",
        "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
        "Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "中文：我能吞下玻璃而不伤身体。日本語：私はガラスを食べられます。それは私を傷つけません。",
        "한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.",
        "العربية: أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
        "Emoji: 🙂 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ — and combining: e\u0301 a\u0308 n\u0303.",
        "Numbers: 3.14159, 2718281828, 1,000,000 and ½ ¾ ² ³ ٣ ४ (mixed digits).",
        "Spaces:\u00a0non-breaking,\u3000ideographic, and   three   plain   ones.",
    ]
    go_code = (
        "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\n"
        "// Count returns how often each word occurs.\n"
        "func Count(text string) map[string]int {\n"
        "\tcounts := map[string]int{}\n"
        "\tfor _, w := range strings.Fields(text) {\n"
        "\t\tcounts[strings.ToLower(w)]++\n"
        "\t}\n"
        "\treturn counts\n"
        "}\n\n"
        "func main() {\n"
        "\tfmt.Println(Count(\"a b  a\\tc\"))    // map[a:2 b:1 c:1]\n"
        "\tif x := 42; x >= 0x2A && x != -1 {\n"
        "\t\tfmt.Printf(\"%d %q %v\\n\", x, \"é\", []int{1, 2, 3})\n"
        "\t}\n"
        "}\n"
    )
    py_code = (
        "def fib(n: int) -> int:\n"
        "    \"\"\"Returns the n-th Fibonacci number.\"\"\"\n"
        "    a, b = 0, 1\n"
        "    for _ in range(n):\n"
        "        a, b = b, a + b\n"
        "    return a\n"
        "\n\n\n"
        "if __name__ == '__main__':\n"
        "    print([fib(i) for i in range(10)])  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n"
        "        \n"
        "    x = {'key': \"value\", 'n': 1e-5, 'ok': True}\r\n"
        "    print(f\"{x!r:>20}\")\r\n"
    )
    parts = []
    i = 0
    while sum(len(p.encode()) for p in parts) < 12_000:
        p = prose[i % len(prose)]
        parts.append(p)
        parts.append(" " * (i % 5) + "\n" * (1 + i % 3))
        if i % 4 == 0:
            parts.append(go_code)
        if i % 5 == 2:
            parts.append(py_code)
        if i % 7 == 3:
            parts.append("    \t  \n\n   trailing spaces   \n")
        i += 1
    return "".join(parts)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


BYTE_CHAR = bytes_to_unicode()


# ---- the reference encoder (tokenizers' algorithm, written here) ----

def find_split(pattern, s, behavior="Isolated"):
    """tokenizers' Split with a Regex pattern: matches and the gaps between."""
    out, last = [], 0
    for m in regex.finditer(pattern, s):
        if m.end() == m.start():
            continue
        if m.start() > last:
            out.append(s[last:m.start()])
        out.append(s[m.start():m.end()])
        last = m.end()
    if last < len(s):
        out.append(s[last:])
    return out


def bpe(symbols, ranks):
    """The classic loop: merge the lowest-ranked adjacent pair, every
    occurrence left to right, until no pair has a rank."""
    word = list(symbols)
    while len(word) > 1:
        best = min(((ranks[p], p) for p in zip(word, word[1:]) if p in ranks), default=None)
        if best is None:
            break
        a, b = best[1]
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(word[i])
                i += 1
        word = out
    return word


def encode(tok, text):
    """The ids of text under a tokenizer.json dict (the kinds written here)."""
    model = tok["model"]
    vocab = model["vocab"]
    ranks = {}
    for i, m in enumerate(model["merges"]):
        a, b = m.split(" ") if isinstance(m, str) else m
        ranks.setdefault((a, b), i)
    # normalizer
    norm = tok["normalizer"]
    steps = norm["normalizers"] if norm and norm["type"] == "Sequence" else ([norm] if norm else [])
    for n in steps:
        if n["type"] == "Prepend":
            text = n["prepend"] + text if text else text
        elif n["type"] == "Replace":
            text = text.replace(n["pattern"]["String"], n["content"])
        elif n["type"] in ("NFC", "NFD", "NFKC", "NFKD"):
            text = unicodedata.normalize(n["type"], text)
        else:
            raise ValueError(n)
    # pre-tokenizer
    pieces = [text]
    pre = tok["pre_tokenizer"]
    pres = pre["pretokenizers"] if pre and pre["type"] == "Sequence" else ([pre] if pre else [])
    byte_level = False
    for p in pres:
        if p["type"] == "Split":
            assert p["behavior"] == "Isolated" and not p["invert"]
            pieces = [q for s in pieces for q in find_split(p["pattern"]["Regex"], s)]
        elif p["type"] == "ByteLevel":
            byte_level = True
            if p.get("add_prefix_space"):
                pieces = [s if s.startswith(" ") else " " + s for s in pieces]
            if p.get("use_regex", True):
                pieces = [q for s in pieces for q in find_split(GPT2_PATTERN, s)]
        else:
            raise ValueError(p)
    ids = []
    for piece in pieces:
        word = "".join(BYTE_CHAR[b] for b in piece.encode()) if byte_level else piece
        if model.get("ignore_merges") and word in vocab:
            ids.append(vocab[word])
            continue
        symbols = []
        for ch in word:
            if ch in vocab:
                symbols.append(ch)
            elif model.get("byte_fallback") and all(f"<0x{b:02X}>" in vocab for b in ch.encode()):
                symbols.extend(f"<0x{b:02X}>" for b in ch.encode())
            elif model.get("unk_token") is not None:
                if not (model.get("fuse_unk") and symbols and symbols[-1] == model["unk_token"]):
                    symbols.append(model["unk_token"])
        # byte-fallback tokens never merge with characters in these vocabularies
        ids.extend(vocab[s] for s in bpe(symbols, ranks))
    return ids


# ---- training (a few hundred merges) ----

def train(words, n_merges):
    """BPE training on a Counter of symbol tuples: each step merges the most
    frequent adjacent pair (ties: the lexicographically smallest)."""
    words = Counter(words)
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        new = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += c
        words = new
    return merges


def byte_level_tokenizer(train_text, pre_tokenizer, split_pattern, n_merges, added, merges_as_pairs, ignore_merges):
    pieces = find_split(split_pattern, train_text)
    words = [tuple(BYTE_CHAR[b] for b in p.encode()) for p in pieces]
    merges = train(words, n_merges)
    vocab = {}
    for b in range(256):
        vocab[BYTE_CHAR[b]] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added_tokens = []
    for content in added:
        added_tokens.append({"id": len(vocab) + len(added_tokens), "content": content, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
        "normalizer": None, "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [[a, b] for a, b in merges] if merges_as_pairs else [f"{a} {b}" for a, b in merges]},
    }


def llama2_tokenizer(train_text, n_merges):
    text = "▁" + train_text.replace(" ", "▁")
    chars = Counter(text)
    words = [tuple(w) for w in regex.findall(r"▁[^▁]*|[^▁]+", text)]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    # Characters seen three times or more; rarer ones fall back to bytes.
    for ch, c in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0])):
        if c >= 3:
            vocab.setdefault(ch, len(vocab))
    # Train on the runs of known characters (a rare one ends a word).
    words = [tuple(run) for w in words for run in regex.split(r"[^" + regex.escape("".join(v for v in vocab if len(v) == 1)) + r"]", "".join(w)) if run]
    merges = train(words, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    special = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
               for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                    {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
                  "merges": [[a, b] for a, b in merges]},
    }


def main():
    text = sample_text()
    with open(os.path.join(HERE, "sample.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    train_text = text[: len(text) * 6 // 10]
    toks = {
        "gpt2style": byte_level_tokenizer(
            train_text, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            GPT2_PATTERN, 300, ["<|endoftext|>"], merges_as_pairs=False, ignore_merges=False),
        "llama3style": byte_level_tokenizer(
            train_text, {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            LLAMA3_PATTERN, 400, ["<|begin_of_text|>", "<|end_of_text|>"], merges_as_pairs=True, ignore_merges=True),
        "llama2style": llama2_tokenizer(train_text, 300),
    }
    ids = {}
    for name, tok in toks.items():
        with open(os.path.join(HERE, name + ".tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=1)
        ids[name] = encode(tok, text)
        print(f"{name}: vocabulary {len(tok['model']['vocab'])}, {len(tok['model']['merges'])} merges; "
              f"{len(text.encode())} bytes -> {len(ids[name])} ids")
    with open(os.path.join(HERE, "ids.json"), "w") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    main()
