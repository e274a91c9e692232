package bpe

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Known GPT-2 encodings (OpenAI's encoder, tiktoken's r50k_base and
// Hugging Face's GPT2Tokenizer agree on these).
func TestKnownEncodings(t *testing.T) {
	for _, c := range []struct {
		text string
		ids  []int32
	}{
		{"Hello world", []int32{15496, 995}},
		{"Hello, world!", []int32{15496, 11, 995, 0}},
		{" the", []int32{262}},
		{"\n", []int32{198}},
		{"<|endoftext|>", []int32{27, 91, 437, 1659, 5239, 91, 29}}, // ordinary text, not the special token
	} {
		if got := Encode([]byte(c.text)); !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
	}
	if Vocab() != 50257 {
		t.Errorf("Vocab() = %d", Vocab())
	}
	if got := string(Decode([]int32{15496, 995, EndOfText})); got != "Hello world<|endoftext|>" {
		t.Errorf("Decode = %q", got)
	}
	if got := string(Decode([]int32{15496, 50257, -1})); got != "Hello\uFFFD\uFFFD" {
		t.Errorf("ids outside the vocabulary: %q", got)
	}
}

func TestRoundTrips(t *testing.T) {
	src, err := os.ReadFile("bpe.go")
	if err != nil {
		t.Fatal(err)
	}
	cache, _ := os.ReadFile("cache.go")
	for name, text := range map[string][]byte{
		"go source":    append(src, cache...),
		"unicode":      []byte("naïve café — Ελληνικά, 日本語のテキスト, emoji 👩‍👩‍👧 and combining e\u0301\u0301 \t\r\n  trailing  "),
		"invalid utf8": {'a', 0xff, 'b', 0xc3, ' ', 0xe2, 0x82, '!', 0x80, 0xf0, 0x9f, 0x98},
		"all bytes": func() []byte {
			b := make([]byte, 512)
			for i := range b {
				b[i] = byte(i * 7)
			}
			return b
		}(),
		"empty": {},
	} {
		ids := Encode(text)
		if got := Decode(ids); !bytes.Equal(got, text) {
			t.Errorf("%s: Decode(Encode(x)) = %q, want %q", name, got, text)
		}
		for _, id := range ids {
			if id < 0 || id >= VocabSize {
				t.Fatalf("%s: id %d outside the vocabulary", name, id)
			}
		}
		if name == "go source" && len(ids) >= len(text)/2 {
			t.Errorf("Go source: %d ids for %d bytes; BPE should merge more", len(ids), len(text))
		}
	}
}

func TestCachedEncode(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "a.txt")
	os.WriteFile(text, []byte("Hello world, again and again."), 0o644)
	cacheDir := filepath.Join(dir, "cache")
	before := tokenizations.Load()
	ids, hit, err := CachedEncode(text, cacheDir)
	if err != nil || hit {
		t.Fatalf("first run: hit %v, %v", hit, err)
	}
	if want := Encode([]byte("Hello world, again and again.")); !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	// The second run reads the cache and does not tokenize again, also
	// for a copy of the text under another name.
	again, hit, err := CachedEncode(text, cacheDir)
	if err != nil || !hit || !slices.Equal(again, ids) {
		t.Fatalf("second run: hit %v, %v, %v", hit, err, again)
	}
	copyPath := filepath.Join(dir, "b.txt")
	os.WriteFile(copyPath, []byte("Hello world, again and again."), 0o644)
	if _, hit, _ := CachedEncode(copyPath, cacheDir); !hit {
		t.Error("a copy of the text missed the cache")
	}
	if n := tokenizations.Load() - before; n != 1 {
		t.Errorf("tokenized %d times, want 1", n)
	}
	ents, _ := os.ReadDir(cacheDir)
	if len(ents) != 1 {
		t.Fatalf("cache holds %d files, want 1 (no temporaries)", len(ents))
	}
	// A changed text misses; a corrupted cache file is not trusted.
	os.WriteFile(text, []byte("Hello world, once."), 0o644)
	if ids, hit, err := CachedEncode(text, cacheDir); err != nil || hit || !slices.Equal(ids, Encode([]byte("Hello world, once."))) {
		t.Errorf("changed text: hit %v, %v", hit, err)
	}
	cf := filepath.Join(cacheDir, ents[0].Name())
	b, _ := os.ReadFile(cf)
	b[21] ^= 1
	os.WriteFile(cf, b, 0o644)
	if ids, hit, err := CachedEncode(copyPath, cacheDir); err != nil || hit || !slices.Equal(ids, again) {
		t.Errorf("corrupted cache: hit %v, %v, %v", hit, err, ids)
	}
	if _, _, err := CachedEncode(filepath.Join(dir, "missing.txt"), cacheDir); err == nil {
		t.Error("a missing file was encoded")
	}
}

func BenchmarkEncode(b *testing.B) {
	src, _ := os.ReadFile("bpe.go")
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		Encode(src)
	}
}

// A large text encodes in parallel chunks to the ids of encoding it whole.
func TestParallelEncode(t *testing.T) {
	src, _ := os.ReadFile("bpe.go")
	var text []byte
	for len(text) < 3*parallelChunk {
		text = append(text, src...)
		text = append(text, "\n\n  naïve\x7f x\n's \n\tword\r\nWord"...)
	}
	chunks := split(text, parallelChunk)
	if len(chunks) < 2 || !bytes.Equal(bytes.Join(chunks, nil), text) {
		t.Fatalf("%d chunks that join to the text: %v", len(chunks), bytes.Equal(bytes.Join(chunks, nil), text))
	}
	load()
	whole := encode(gpt2.codec, text)
	if got := Encode(text); !slices.Equal(got, whole) {
		t.Errorf("parallel encoding differs from the whole text's (%d ids, %d)", len(got), len(whole))
	}
}

// CachedEncodeBytes shares CachedEncode's cache: the bytes of a file hit
// the entry the file wrote, and no cache directory is an error.
func TestCachedEncodeBytes(t *testing.T) {
	dir := t.TempDir()
	body := []byte("package main\n\nfunc main() {}\n")
	path := filepath.Join(dir, "m.go")
	os.WriteFile(path, body, 0o644)
	cacheDir := filepath.Join(dir, "cache")
	if _, hit, err := CachedEncodeBytes(body, cacheDir); err != nil || hit {
		t.Fatalf("first: hit %v, %v", hit, err)
	}
	ids, hit, err := CachedEncode(path, cacheDir)
	if err != nil || !hit || !slices.Equal(ids, Encode(body)) {
		t.Fatalf("the file's ids: hit %v, %v", hit, err)
	}
	if _, _, err := CachedEncodeBytes(body, ""); err == nil {
		t.Error("no cache directory: no error")
	}
}
