// Package bpe is GPT-2's tokenizer: byte-level byte-pair encoding over
// GPT-2's 50,257 tokens (OpenAI's r50k_base, the vocabulary of
// encoder.json and vocab.bpe), with a cache of token ids on disk keyed by
// the content of the text.
//
// The vocabulary, merges and pre-tokenizing pattern come from
// github.com/tiktoken-go/tokenizer (MIT), which compiles them into the
// binary: nothing is downloaded at run time, and a program that does not
// import this package does not carry them.
//
// Encode gives the ids of GPT-2's encoder (and of tiktoken's
// encode_ordinary): "Hello world" is [15496, 995]. Text is tokenized as
// ordinary text, so "<|endoftext|>" in the input is seven ordinary tokens,
// not EndOfText; put EndOfText between documents yourself. GPT-2 reads
// Unicode text; bytes that are not UTF-8 (which Python's GPT-2 encoder
// never sees) split the text there and are encoded as their single-byte
// tokens, so every byte string round-trips: Decode(Encode(b)) == b.
//
// One deviation from GPT-2: the compiled pattern of the vendored encoder
// drops U+007F (DEL), so DEL splits the text too and is encoded as its
// token, 221, as GPT-2 does; but a run of two or more whitespace
// characters right before a DEL then becomes one piece where GPT-2 makes
// two (the last space would join the DEL's piece, and no GPT-2 token
// holds DEL with another byte, so it is emitted alone).
package bpe

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// VocabSize is the number of GPT-2 tokens, EndOfText included.
const VocabSize = 50257

// EndOfText is the id of GPT-2's <|endoftext|> token, the last one.
const EndOfText int32 = 50256

// Name names the encoding (tiktoken's name for GPT-2's).
const Name = "r50k_base"

var gpt2 struct {
	once   sync.Once
	codec  tokenizer.Codec
	pieces [VocabSize][]byte // id → bytes
	byteID [256]int32        // byte → its single-byte token
	err    error
}

func load() {
	gpt2.once.Do(func() {
		c, err := tokenizer.Get(tokenizer.R50kBase)
		if err != nil {
			gpt2.err = fmt.Errorf("bpe: GPT-2's encoding: %w", err)
			return
		}
		gpt2.codec = c
		for i := range gpt2.byteID {
			gpt2.byteID[i] = -1
		}
		for id := 0; id < VocabSize-1; id++ {
			s, err := c.Decode([]uint{uint(id)})
			if err != nil {
				gpt2.err = fmt.Errorf("bpe: token %d: %w", id, err)
				return
			}
			gpt2.pieces[id] = []byte(s)
			if len(s) == 1 && gpt2.byteID[s[0]] < 0 {
				gpt2.byteID[s[0]] = int32(id)
			}
		}
		gpt2.pieces[EndOfText] = []byte("<|endoftext|>")
		for b, id := range gpt2.byteID {
			if id < 0 {
				gpt2.err = fmt.Errorf("bpe: no token for byte %#x", b)
				return
			}
		}
	})
	if gpt2.err != nil {
		// The vocabulary is compiled in: this is a broken build, not a
		// condition a caller can handle.
		panic(gpt2.err)
	}
}

// Vocab is the number of token ids, 50257 (VocabSize).
func Vocab() int { return VocabSize }

// Encode returns GPT-2's token ids of text. A large text is cut into
// chunks where GPT-2's pre-tokenizer always cuts (before an ASCII letter
// that follows a newline) and the chunks are encoded in parallel; the
// ids are those of encoding it whole.
func Encode(text []byte) []int32 {
	load()
	chunks := split(text, parallelChunk)
	if len(chunks) == 1 {
		return encode(gpt2.codec, text)
	}
	parts := make([][]int32, len(chunks))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tokenizer.Get(tokenizer.R50kBase) // a codec per goroutine
			if err != nil {
				c = gpt2.codec
			}
			for i := range work {
				parts[i] = encode(c, chunks[i])
			}
		}()
	}
	for i := range chunks {
		work <- i
	}
	close(work)
	wg.Wait()
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]int32, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// parallelChunk is the size of the chunks Encode encodes in parallel.
const parallelChunk = 256 << 10

// split cuts text into pieces of about size bytes, each cut right before
// an ASCII letter that follows a newline: the pre-tokenizer's pattern
// ends a piece there whatever comes before (a newline is never part of
// a letter piece, and a piece of letters takes at most one space before
// it, not a newline).
func split(text []byte, size int) [][]byte {
	var out [][]byte
	for len(text) > 2*size {
		cut := -1
		for i := size; i < len(text)-1; i++ {
			if text[i] == '\n' && isLetter(text[i+1]) {
				cut = i + 1
				break
			}
		}
		if cut < 0 {
			break
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
	return append(out, text)
}

func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

func encode(c tokenizer.Codec, text []byte) []int32 {
	out := make([]int32, 0, len(text)/3+1)
	for len(text) > 0 {
		// The longest valid UTF-8 prefix goes through the encoder; an
		// invalid byte after it becomes its single-byte token.
		n := validPrefix(text)
		if n > 0 {
			ids, _, err := c.Encode(string(text[:n]))
			if err != nil { // valid UTF-8 never fails
				panic(fmt.Errorf("bpe: encoding: %w", err))
			}
			for _, id := range ids {
				out = append(out, int32(id))
			}
			text = text[n:]
		}
		if len(text) > 0 {
			out = append(out, gpt2.byteID[text[0]])
			text = text[1:]
		}
	}
	return out
}

// validPrefix is the length of the longest prefix of b that is valid
// UTF-8 and holds no DEL (U+007F), which the encoder's compiled pattern
// drops (GPT-2 has no token with DEL beside other bytes: it is always
// token 221 alone).
func validPrefix(b []byte) int {
	if i := bytes.IndexByte(b, 0x7f); i >= 0 {
		b = b[:i]
	}
	if utf8.Valid(b) {
		return len(b)
	}
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return i
}

// Decode returns the bytes of ids. An id outside [0, VocabSize) (a model
// whose vocabulary is padded past GPT-2's can sample one) decodes as
// U+FFFD, the replacement character.
func Decode(ids []int32) []byte {
	load()
	var b bytes.Buffer
	for _, id := range ids {
		if id < 0 || int(id) >= VocabSize {
			b.WriteRune(utf8.RuneError)
			continue
		}
		b.Write(gpt2.pieces[id])
	}
	return b.Bytes()
}

// Pieces returns every token's bytes by id (a new slice; EndOfText's
// are "<|endoftext|>"). The id is also the token's merge rank, as in
// tiktoken's files, which is what a writer of the vocabulary in another
// format (data/hftok.ByteLevelJSON) needs.
func Pieces() [][]byte {
	load()
	out := make([][]byte, VocabSize)
	for i, p := range gpt2.pieces {
		out[i] = append([]byte(nil), p...)
	}
	return out
}
