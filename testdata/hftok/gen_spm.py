#!/usr/bin/python3
"""Golden data for the Llama 1/2 path of ferry's tokenizer.json reader
(data/hftok), against the SentencePiece library itself.

Run from the repository root, after gen.py (it reads sample.txt):

    apt-get install python3-sentencepiece   # once (Debian's 0.1.97)
    /usr/bin/python3 testdata/hftok/gen_spm.py

1. It trains a SentencePiece BPE model with Llama 2's settings (model_type
   bpe, byte_fallback, split_digits, add_dummy_prefix, no removal of
   extra whitespace, identity normalization, <unk> <s> </s> at 0 1 2) on
   the first 60 % of sample.txt, vocabulary 1000: spm_llama.model.
2. It converts the model to a tokenizer.json the way transformers'
   LlamaConverter does (convert_slow_tokenizer.py: the pieces by id as the
   vocabulary; merges from SentencePieceExtractor, every split of a piece
   into two pieces, ordered by the piece's score; a Prepend("▁") and
   Replace(" ", "▁") normalizer; byte_fallback, fuse_unk, unk <unk>):
   spm_llama.tokenizer.json. The conversion is written here (transformers
   is not installed), following that file.
3. It writes spm_ids.json: SentencePiece's own ids of sample.txt
   (EncodeAsIds, no BOS), which data/hftok must give from the
   tokenizer.json.
"""
import json
import os

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    with open(os.path.join(HERE, "sample.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    # Relative names, from this directory: SentencePiece records its input
    # and model prefix in the model file, and a path of the machine that
    # generated it does not belong in the repository.
    os.chdir(HERE)
    train = "spm_train.tmp"
    with open(train, "w", encoding="utf-8", newline="") as f:
        # SentencePiece trains on lines: the text's lines as they are.
        f.write(text[: len(text) * 6 // 10])
    prefix = "spm_llama"
    spm.SentencePieceTrainer.train(
        input=train, model_prefix=prefix, model_type="bpe", vocab_size=1000, byte_fallback=True, split_digits=True,
        add_dummy_prefix=True, remove_extra_whitespaces=False, normalization_rule_name="identity",
        character_coverage=0.995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, allow_whitespace_only_pieces=True,
        max_sentence_length=100000, num_threads=1, minloglevel=2)
    os.remove(train)
    os.remove(prefix + ".vocab")
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    scores = {sp.id_to_piece(i): sp.get_score(i) for i in range(n)}
    # SentencePieceExtractor.extract: for each piece, its splits into two
    # pieces of the vocabulary (ordered by their ids), then all merges by
    # the merged piece's score, highest first (a stable sort).
    merges = []
    for piece in vocab:
        local = []
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            if left in vocab and right in vocab:
                local.append((left, right, scores[piece]))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    special = [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i in range(3)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]},
    }
    with open(prefix + ".tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    ids = sp.encode(text, out_type=int)
    assert sp.decode(ids) == text, "SentencePiece does not round-trip the sample"
    with open(os.path.join(HERE, "spm_ids.json"), "w") as f:
        json.dump(ids, f)
    print(f"spm_llama: {len(vocab)} pieces, {len(merges)} merges; {len(text.encode())} bytes -> {len(ids)} ids")


if __name__ == "__main__":
    main()
