package hftok

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ByteLevelJSON writes a tokenizer.json for a byte-level BPE given as
// tiktoken gives one: pieces[id] is token id's bytes, and the id is its
// merge rank (GPT-2's r50k_base: data/bpe.Pieces). added are special
// tokens by id (<|endoftext|>), whose pieces are ignored. The merges are
// recovered as tiktoken-to-transformers conversions do: each token of
// two or more bytes is the pair that BPE over the lower-ranked tokens
// leaves of its bytes. The pre-tokenizer is ByteLevel with GPT-2's
// pattern, so the file encodes as GPT-2's tokenizer.json does.
func ByteLevelJSON(pieces [][]byte, added map[int32]string) ([]byte, error) {
	chars, _ := byteChars()
	enc := func(b []byte) string {
		var s strings.Builder
		for _, c := range b {
			s.WriteRune(chars[c])
		}
		return s.String()
	}
	rank := make(map[string]int, len(pieces))
	for id, p := range pieces {
		if _, special := added[int32(id)]; !special && len(p) > 0 {
			if _, dup := rank[string(p)]; !dup {
				rank[string(p)] = id
			}
		}
	}
	vocab := make(map[string]int32, len(pieces))
	var merges [][2]string
	for id, p := range pieces {
		if _, special := added[int32(id)]; special {
			continue
		}
		if len(p) == 0 {
			return nil, fmt.Errorf("hftok: token %d has no bytes", id)
		}
		vocab[enc(p)] = int32(id)
		if len(p) < 2 {
			continue
		}
		parts := rankedBPE(p, rank, id)
		if len(parts) != 2 {
			continue // not reachable by a merge: a token of its own
		}
		merges = append(merges, [2]string{enc(parts[0]), enc(parts[1])})
	}
	type addedJSON struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		Lstrip     bool   `json:"lstrip"`
		Rstrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var adds []addedJSON
	for id := range pieces {
		if c, ok := added[int32(id)]; ok {
			adds = append(adds, addedJSON{ID: int32(id), Content: c, Special: true})
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	f := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": adds,
		"normalizer": nil, "pre_tokenizer": byteLevel, "post_processor": byteLevel, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges},
	}
	return json.Marshal(f)
}

// rankedBPE splits b into tokens by BPE over the tokens ranked below
// limit: repeatedly join the adjacent pair whose join ranks lowest.
func rankedBPE(b []byte, rank map[string]int, limit int) [][]byte {
	parts := make([][]byte, len(b))
	for i := range b {
		parts[i] = b[i : i+1]
	}
	for len(parts) > 1 {
		best, at := limit, -1
		for i := 0; i+1 < len(parts); i++ {
			if r, ok := rank[string(parts[i])+string(parts[i+1])]; ok && r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		joined := append(append([]byte{}, parts[at]...), parts[at+1]...)
		parts = append(append(parts[:at:at], joined), parts[at+2:]...)
	}
	return parts
}
