package hftok

import (
	"os"
	"slices"
	"testing"

	"ferry/data/bpe"
)

// GPT-2's vocabulary written as a tokenizer.json (what ferry export
// writes beside a model trained with --tokenizer bpe) encodes as
// data/bpe, which matches GPT-2's encoder, and decodes back.
func TestByteLevelJSONIsGPT2(t *testing.T) {
	if testing.Short() {
		t.Skip("recovers GPT-2's 50,000 merges")
	}
	b, err := ByteLevelJSON(bpe.Pieces(), map[int32]string{bpe.EndOfText: "<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Vocab() != bpe.VocabSize {
		t.Errorf("vocabulary %d, want %d", tok.Vocab(), bpe.VocabSize)
	}
	if len(tok.merges) != 50000 {
		t.Errorf("%d merges; GPT-2's merges.txt has 50000", len(tok.merges))
	}
	text, err := os.ReadFile(golden + "sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range [][]byte{[]byte("Hello world"), text} {
		got, want := tok.Encode(s), bpe.Encode(s)
		if !slices.Equal(got, want) {
			n := 0
			for n < min(len(got), len(want)) && got[n] == want[n] {
				n++
			}
			t.Fatalf("%d ids, data/bpe %d; first difference at %d", len(got), len(want), n)
		}
		if string(tok.Decode(got)) != string(s) {
			t.Error("does not decode back")
		}
	}
	if got := tok.Encode([]byte("Hello world")); !slices.Equal(got, []int32{15496, 995}) {
		t.Errorf("Hello world: %v, GPT-2 gives [15496 995]", got)
	}
}
