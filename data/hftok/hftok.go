// Package hftok reads a Hugging Face tokenizer.json (the format of the
// `tokenizers` library, which transformers' fast tokenizers load) and
// encodes and decodes text with it, as tokenizers' Tokenizer.encode does:
// normalizer, pre-tokenizer, then the BPE model on each piece.
//
// It reads BPE models of the two kinds most language models use:
//
//   - byte-level BPE (GPT-2, Llama 3, Qwen, most newer models): the text
//     is split by a pre-tokenizer's regular expression (ByteLevel's own,
//     GPT-2's, or a Split before it, Llama 3's), each piece's bytes are
//     mapped to GPT-2's printable characters, and merges are applied by
//     rank;
//   - SentencePiece-style BPE (Llama 2, Mistral, TinyLlama): spaces become
//     "▁" (a Prepend and Replace normalizer, or a Metaspace
//     pre-tokenizer), and characters outside the vocabulary fall back to
//     byte tokens <0xXX> (byte_fallback).
//
// Supported parts: normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC,
// NFKD; pre-tokenizers Sequence, ByteLevel, Split (Isolated, Removed,
// MergedWithPrevious, MergedWithNext), Metaspace, Digits; the BPE model
// with byte_fallback, unk_token, fuse_unk and ignore_merges. Anything else
// is refused by Parse, naming it, rather than encoded differently.
//
// Text is encoded as ordinary text: the added tokens (<|endoftext|>,
// <|begin_of_text|>, <s>) are not matched in it, and the post-processor's
// BOS is not added (tiktoken's encode_ordinary; put special tokens between
// documents yourself). Decode inverts the encoding (byte-level characters
// to bytes, <0xXX> to its byte, "▁" to a space, the prepended one
// dropped) rather than interpreting the decoder section.
//
// Checked (data/hftok's tests): on a 12 KB sample, ids equal to those of
// SentencePiece itself for a Llama-2-style model converted as
// transformers converts one, and to those of a reference written in
// Python from the tokenizers algorithm for byte-level files of GPT-2's
// and Llama 3's kinds (testdata/hftok/gen.py, gen_spm.py); GPT-2's own
// vocabulary (ByteLevelJSON) encodes as data/bpe.
//
// Llama 1/2's SentencePiece tokenizer.model itself is not read: the Go
// reader of such files (github.com/eliben/go-sentencepiece) refuses
// models with add_dummy_prefix, which Llama's has; Hugging Face's Llama 2
// directories carry the same tokenizer as a tokenizer.json, which is.
//
// Regular expressions run on github.com/dlclark/regexp2 (.NET syntax, with
// lookahead and Unicode classes, as the Oniguruma engine of tokenizers
// reads these patterns).
package hftok

import (
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"ferry/internal/fsx"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// MaxFileBytes bounds the tokenizer.json Load reads (Llama 3's is 9 MB).
const MaxFileBytes = 256 << 20

// Tokenizer is a parsed tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	vocab  map[string]int32 // the model's tokens and the added ones
	model  map[string]int32 // the BPE model's own vocabulary
	pieces []string         // id → token content ("" for ids the file does not use)
	size   int              // ids in [0, size)
	merges map[[2]int32]merge

	normalizers []func(string) string
	pre         []preTokenizer
	byteLevel   bool      // pieces are mapped to GPT-2's byte characters
	byteRune    [256]rune // byte → its byte-level character
	byteOf      map[rune]byte
	fallback    [256]int32 // byte → id of <0xXX> (-1: none), with byte_fallback
	byteFB      bool
	unk         int32 // -1: none
	fuseUnk     bool
	ignoreMerge bool
	prepended   string // what the encoding puts before the text ("▁"), dropped by Decode
	decoded     [][]byte
	sum         string
}

type merge struct {
	rank int
	id   int32
}

// preTokenizer splits the pieces so far into smaller ones; first says
// which piece starts the text.
type preTokenizer func(pieces []string) []string

// Load reads and parses the tokenizer.json at path.
func Load(path string) (*Tokenizer, error) {
	b, err := fsx.ReadLimited(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("hftok: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// SHA256 is the hex SHA-256 of the file the tokenizer was parsed from.
func (t *Tokenizer) SHA256() string { return t.sum }

// Vocab is the number of ids: one past the largest id of the model's
// vocabulary and the added tokens.
func (t *Tokenizer) Vocab() int { return t.size }

// Token is the content of id ("" for an id outside the vocabulary).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// ID is the id of a token's content (an added token's too).
func (t *Tokenizer) ID(token string) (int32, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

type fileJSON struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type         string            `json:"type"`
		Dropout      *float64          `json:"dropout"`
		UnkToken     *string           `json:"unk_token"`
		Prefix       *string           `json:"continuing_subword_prefix"`
		Suffix       *string           `json:"end_of_word_suffix"`
		FuseUnk      bool              `json:"fuse_unk"`
		ByteFallback bool              `json:"byte_fallback"`
		IgnoreMerges bool              `json:"ignore_merges"`
		Vocab        json.RawMessage   `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
	} `json:"model"`
}

// Parse reads a tokenizer.json's bytes.
func Parse(b []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("hftok: not a tokenizer.json: %w", err)
	}
	m := f.Model
	switch {
	case m.Type != "BPE" && !(m.Type == "" && m.Merges != nil):
		return nil, fmt.Errorf("hftok: model type %q: ferry reads BPE tokenizers (Unigram and WordPiece are not read)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("hftok: BPE dropout %v makes encoding random: ferry encodes deterministically", *m.Dropout)
	case m.Prefix != nil && *m.Prefix != "" || m.Suffix != nil && *m.Suffix != "":
		return nil, fmt.Errorf("hftok: continuing_subword_prefix and end_of_word_suffix are not read")
	}
	var vocab map[string]int32
	if err := json.Unmarshal(m.Vocab, &vocab); err != nil || len(vocab) == 0 {
		return nil, fmt.Errorf("hftok: the BPE model has no vocabulary (a map of tokens to ids)")
	}
	sum := sha256.Sum256(b)
	t := &Tokenizer{vocab: make(map[string]int32, len(vocab)+len(f.AddedTokens)), merges: make(map[[2]int32]merge, len(m.Merges)),
		unk: -1, fuseUnk: m.FuseUnk, byteFB: m.ByteFallback, ignoreMerge: m.IgnoreMerges, sum: hex.EncodeToString(sum[:])}
	t.model = vocab
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 || id >= 1<<28 {
			return nil, fmt.Errorf("hftok: token %q has id %d", tok, id)
		}
		t.vocab[tok] = id
		maxID = max(maxID, id)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.ID >= 1<<28 {
			return nil, fmt.Errorf("hftok: added token %q has id %d", a.Content, a.ID)
		}
		if _, ok := t.vocab[a.Content]; !ok {
			t.vocab[a.Content] = a.ID
		}
		maxID = max(maxID, a.ID)
	}
	t.size = int(maxID) + 1
	t.pieces = make([]string, t.size)
	for tok, id := range vocab {
		t.pieces[id] = tok
	}
	for _, a := range f.AddedTokens {
		t.pieces[a.ID] = a.Content
	}
	if m.UnkToken != nil {
		id, ok := t.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("hftok: unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		t.unk = id
	}
	for i, raw := range m.Merges {
		a, b, err := mergePair(raw)
		if err != nil {
			return nil, fmt.Errorf("hftok: merge %d: %w", i, err)
		}
		ia, oka := vocab[a]
		ib, okb := vocab[b]
		id, ok := vocab[a+b]
		if !oka || !okb || !ok {
			return nil, fmt.Errorf("hftok: merge %d (%q %q) names a token not in the vocabulary", i, a, b)
		}
		if _, dup := t.merges[[2]int32{ia, ib}]; !dup {
			t.merges[[2]int32{ia, ib}] = merge{rank: i, id: id}
		}
	}
	for i := range t.fallback {
		t.fallback[i] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]; ok && t.byteFB {
			t.fallback[i] = id
		}
	}
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.byteLevel {
		t.byteRune, t.byteOf = byteChars()
	}
	t.decoded = make([][]byte, t.size)
	for id, p := range t.pieces {
		t.decoded[id] = t.decodePiece(int32(id), p)
	}
	return t, nil
}

// mergePair reads a merge, "a b" (older files) or ["a", "b"].
func mergePair(raw json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two tokens", s)
		}
		return a, b, nil
	}
	var p []string
	if err := json.Unmarshal(raw, &p); err != nil || len(p) != 2 {
		return "", "", fmt.Errorf("%s is not a pair of tokens", raw)
	}
	return p[0], p[1], nil
}

type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	// Prepend, Replace
	Prepend string `json:"prepend"`
	Pattern *struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content string `json:"content"`
	// ByteLevel
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Split
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// Metaspace
	Replacement   string `json:"replacement"`
	PrependScheme string `json:"prepend_scheme"`
	Split         *bool  `json:"split"`
	// Digits
	IndividualDigits bool `json:"individual_digits"`
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("hftok: normalizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.parseNormalizer(n); err != nil {
				return err
			}
		}
	case "Prepend":
		p := c.Prepend
		if t.prepended == "" {
			t.prepended = p
		}
		t.normalizers = append(t.normalizers, func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		})
	case "Replace":
		re, lit, err := pattern(c.Pattern)
		if err != nil {
			return fmt.Errorf("hftok: normalizer Replace: %w", err)
		}
		content := c.Content
		t.normalizers = append(t.normalizers, func(s string) string {
			if re == nil {
				return strings.ReplaceAll(s, lit, content)
			}
			var b strings.Builder
			rs := []rune(s)
			last := 0
			for _, m := range findAll(re, rs) {
				b.WriteString(string(rs[last:m[0]]))
				b.WriteString(content)
				last = m[1]
			}
			b.WriteString(string(rs[last:]))
			return b.String()
		})
	case "NFC", "NFD", "NFKC", "NFKD":
		f := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}[c.Type]
		t.normalizers = append(t.normalizers, f.String)
	default:
		return fmt.Errorf("hftok: normalizer %q is not read (ferry reads Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD)", c.Type)
	}
	return nil
}

// gpt2Pattern is the regular expression of the ByteLevel pre-tokenizer
// (GPT-2's).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("hftok: pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Pretokenizers {
			if err := t.parsePreTokenizer(p); err != nil {
				return err
			}
		}
	case "ByteLevel":
		t.byteLevel = true
		prefix := c.AddPrefixSpace != nil && *c.AddPrefixSpace
		useRegex := c.UseRegex == nil || *c.UseRegex
		var re *regexp2.Regexp
		if useRegex {
			var err error
			if re, err = compile(gpt2Pattern); err != nil {
				return err
			}
		}
		t.pre = append(t.pre, func(pieces []string) []string {
			var out []string
			for _, p := range pieces {
				if prefix && !strings.HasPrefix(p, " ") {
					p = " " + p
				}
				if re == nil {
					out = append(out, p)
					continue
				}
				out = splitBy(out, p, re, "", "Isolated")
			}
			return out
		})
	case "Split":
		if c.Invert {
			return fmt.Errorf("hftok: pre_tokenizer Split with invert is not read")
		}
		switch c.Behavior {
		case "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext":
		default:
			return fmt.Errorf("hftok: pre_tokenizer Split behavior %q is not read (Isolated, Removed, MergedWithPrevious, MergedWithNext are)", c.Behavior)
		}
		re, lit, err := pattern(c.Pattern)
		if err != nil {
			return fmt.Errorf("hftok: pre_tokenizer Split: %w", err)
		}
		behavior := c.Behavior
		t.pre = append(t.pre, func(pieces []string) []string {
			var out []string
			for _, p := range pieces {
				out = splitBy(out, p, re, lit, behavior)
			}
			return out
		})
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "▁"
		}
		scheme := c.PrependScheme
		if scheme == "" { // older files: add_prefix_space
			scheme = "never"
			if c.AddPrefixSpace == nil || *c.AddPrefixSpace {
				scheme = "always"
			}
		}
		if scheme != "always" && scheme != "first" && scheme != "never" {
			return fmt.Errorf("hftok: Metaspace prepend_scheme %q is not read", scheme)
		}
		if scheme != "never" && t.prepended == "" {
			t.prepended = rep
		}
		split := c.Split == nil || *c.Split
		t.pre = append(t.pre, func(pieces []string) []string {
			var out []string
			for i, p := range pieces {
				p = strings.ReplaceAll(p, " ", rep)
				if (scheme == "always" || scheme == "first" && i == 0) && !strings.HasPrefix(p, rep) {
					p = rep + p
				}
				if !split {
					out = append(out, p)
					continue
				}
				out = splitBy(out, p, nil, rep, "MergedWithNext")
			}
			return out
		})
	case "Digits":
		pat := `\p{N}+`
		if c.IndividualDigits {
			pat = `\p{N}`
		}
		re, err := compile(pat)
		if err != nil {
			return err
		}
		t.pre = append(t.pre, func(pieces []string) []string {
			var out []string
			for _, p := range pieces {
				out = splitBy(out, p, re, "", "Isolated")
			}
			return out
		})
	default:
		return fmt.Errorf("hftok: pre_tokenizer %q is not read (ferry reads Sequence, ByteLevel, Split, Metaspace, Digits)", c.Type)
	}
	return nil
}

func compile(p string) (*regexp2.Regexp, error) {
	// Compile, not MustCompile: the latter may take a pre-generated
	// matcher for a known pattern.
	re, err := regexp2.Compile(p, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("hftok: pattern %q: %w", p, err)
	}
	return re, nil
}

// pattern reads a {"String": s} or {"Regex": r} pattern: a compiled
// expression, or the literal.
func pattern(p *struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}) (*regexp2.Regexp, string, error) {
	switch {
	case p == nil:
		return nil, "", fmt.Errorf("no pattern")
	case p.Regex != nil:
		re, err := compile(*p.Regex)
		return re, "", err
	case p.String != nil && *p.String != "":
		return nil, *p.String, nil
	}
	return nil, "", fmt.Errorf("an empty pattern")
}

// findAll is the [start, end) rune offsets of re's matches in rs, left to
// right, as tokenizers' find_matches takes them (an empty match moves on
// by one character).
func findAll(re *regexp2.Regexp, rs []rune) [][2]int {
	var out [][2]int
	m, err := re.FindRunesMatch(rs)
	for err == nil && m != nil {
		if m.RuneLength > 0 {
			out = append(out, [2]int{m.RuneIndex, m.RuneIndex + m.RuneLength})
		}
		m, err = re.FindNextMatch(m)
	}
	return out
}

// splitBy appends the pieces of p split at re's matches (or lit's
// occurrences) under tokenizers' SplitDelimiterBehavior.
func splitBy(out []string, p string, re *regexp2.Regexp, lit, behavior string) []string {
	rs := []rune(p)
	var ms [][2]int
	if re != nil {
		ms = findAll(re, rs)
	} else {
		lr := []rune(lit)
		for i := 0; i+len(lr) <= len(rs); {
			if string(rs[i:i+len(lr)]) == lit {
				ms = append(ms, [2]int{i, i + len(lr)})
				i += len(lr)
			} else {
				i++
			}
		}
	}
	// Cut into alternating gaps and matches.
	type part struct {
		s, e  int
		match bool
	}
	var parts []part
	last := 0
	for _, m := range ms {
		if m[0] > last {
			parts = append(parts, part{last, m[0], false})
		}
		parts = append(parts, part{m[0], m[1], true})
		last = m[1]
	}
	if last < len(rs) {
		parts = append(parts, part{last, len(rs), false})
	}
	switch behavior {
	case "Isolated":
		for _, q := range parts {
			out = append(out, string(rs[q.s:q.e]))
		}
	case "Removed":
		for _, q := range parts {
			if !q.match {
				out = append(out, string(rs[q.s:q.e]))
			}
		}
	case "MergedWithPrevious":
		start := 0
		for _, q := range parts {
			if q.match {
				out = append(out, string(rs[start:q.e]))
				start = q.e
			}
		}
		if start < len(rs) {
			out = append(out, string(rs[start:]))
		}
	case "MergedWithNext":
		start := 0
		for _, q := range parts {
			if q.match && q.s > start {
				out = append(out, string(rs[start:q.s]))
				start = q.s
			}
		}
		if start < len(rs) {
			out = append(out, string(rs[start:]))
		}
	}
	return out
}

// byteChars is GPT-2's bytes_to_unicode: the printable bytes stand for
// themselves, the others for the characters from U+0100 on, in order.
func byteChars() ([256]rune, map[rune]byte) {
	var m [256]rune
	back := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
		back[m[b]] = byte(b)
	}
	return m, back
}

// Encode returns the token ids of text (see the package comment: text is
// ordinary, no special tokens are added). Bytes that are not UTF-8 are
// encoded as U+FFFD, as a Python string read with errors="replace" would
// hold them: a byte-level tokenizer's own byte tokens cannot be reached
// through tokenizers from such text either.
func (t *Tokenizer) Encode(text []byte) []int32 {
	s := string(text)
	if !utf8.Valid(text) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for _, n := range t.normalizers {
		s = n(s)
	}
	pieces := []string{s}
	if s == "" {
		pieces = nil
	}
	for _, p := range t.pre {
		pieces = p(pieces)
	}
	out := make([]int32, 0, len(text)/3+1)
	cache := map[string][]int32{}
	for _, p := range pieces {
		if ids, ok := cache[p]; ok {
			out = append(out, ids...)
			continue
		}
		w := p
		if t.byteLevel {
			var b strings.Builder
			for i := 0; i < len(p); i++ {
				b.WriteRune(t.byteRune[p[i]])
			}
			w = b.String()
		}
		n := len(out)
		out = t.word(w, out)
		if len(p) < 64 {
			cache[p] = out[n:len(out):len(out)]
		}
	}
	return out
}

// word appends the BPE ids of one pre-tokenized piece w, as tokenizers'
// BPE::tokenize does: w's characters (unknown ones by byte fallback or
// unk), then merges by rank, the leftmost first among equal ranks.
func (t *Tokenizer) word(w string, out []int32) []int32 {
	if t.ignoreMerge {
		if id, ok := t.model[w]; ok {
			return append(out, id)
		}
	}
	syms := make([]symbol, 0, len(w))
	for _, r := range w {
		if id, ok := t.model[string(r)]; ok {
			syms = append(syms, symbol{id: id})
			continue
		}
		if t.byteFB {
			var buf [utf8.UTFMax]byte
			n := utf8.EncodeRune(buf[:], r)
			all := true
			for _, b := range buf[:n] {
				all = all && t.fallback[b] >= 0
			}
			if all {
				for _, b := range buf[:n] {
					syms = append(syms, symbol{id: t.fallback[b]})
				}
				continue
			}
		}
		if t.unk < 0 {
			continue // no unk token: tokenizers drops the character
		}
		if t.fuseUnk && len(syms) > 0 && syms[len(syms)-1].id == t.unk {
			continue
		}
		syms = append(syms, symbol{id: t.unk})
	}
	for i := range syms {
		syms[i].prev, syms[i].next = i-1, i+1
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	q := &mergeQueue{}
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := t.merges[[2]int32{syms[i].id, syms[i+1].id}]; ok {
			q.items = append(q.items, candidate{rank: m.rank, pos: i, id: m.id})
		}
	}
	heap.Init(q)
	for q.Len() > 0 {
		c := heap.Pop(q).(candidate)
		s := &syms[c.pos]
		if s.dead || s.next < 0 {
			continue
		}
		nx := &syms[s.next]
		if m, ok := t.merges[[2]int32{s.id, nx.id}]; !ok || m.id != c.id {
			continue // stale: one side has merged since
		}
		s.id = c.id
		nx.dead = true
		s.next = nx.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			if m, ok := t.merges[[2]int32{syms[s.prev].id, s.id}]; ok {
				heap.Push(q, candidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := t.merges[[2]int32{s.id, syms[s.next].id}]; ok {
				heap.Push(q, candidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
	}
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

type symbol struct {
	id         int32
	prev, next int
	dead       bool
}

type candidate struct {
	rank, pos int
	id        int32
}

// mergeQueue orders candidates by rank, then position (leftmost first).
type mergeQueue struct{ items []candidate }

func (q *mergeQueue) Len() int { return len(q.items) }
func (q *mergeQueue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}
func (q *mergeQueue) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *mergeQueue) Push(x any)    { q.items = append(q.items, x.(candidate)) }
func (q *mergeQueue) Pop() any {
	x := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return x
}

// decodePiece is the bytes token id stands for.
func (t *Tokenizer) decodePiece(id int32, p string) []byte {
	if t.byteFB && len(p) == 6 && strings.HasPrefix(p, "<0x") && strings.HasSuffix(p, ">") {
		for b, fid := range t.fallback {
			if fid == id {
				return []byte{byte(b)}
			}
		}
	}
	if t.byteLevel {
		var out []byte
		for _, r := range p {
			if b, ok := t.byteOf[r]; ok {
				out = append(out, b)
			} else {
				out = utf8.AppendRune(out, r) // an added token's own text
			}
		}
		return out
	}
	return []byte(strings.ReplaceAll(p, "▁", " ")) // SentencePiece's space
}

// Decode returns the text of ids: the inverse of Encode (an id outside
// the vocabulary decodes as U+FFFD). The space standing for a prepended
// "▁" at the start is dropped, as tokenizers' decoders drop it.
func (t *Tokenizer) Decode(ids []int32) []byte {
	var out []byte
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.decoded) || t.pieces[id] == "" {
			out = utf8.AppendRune(out, utf8.RuneError)
			continue
		}
		out = append(out, t.decoded[id]...)
	}
	if t.prepended != "" && len(out) > 0 && out[0] == ' ' {
		out = out[1:]
	}
	return out
}

// Names lists the vocabulary's tokens by id (for a caller that writes
// them out); ids the file does not use are "".
func (t *Tokenizer) Names() []string { return append([]string(nil), t.pieces...) }
