package bpe

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"ferry/internal/fsx"
)

// The token-id cache. A text's ids are stored in cacheDir under a name
// made of the SHA-256 of the encoding's name and the text's bytes, so a
// changed file, or another tokenizer, never reads stale ids, and a moved
// or copied file still hits.
//
// A cache file is the magic "ferrybpe", a format version (uint32 1), the
// number of ids (uint64), the ids (int32), and the SHA-256 of everything
// before it; all little-endian. It is written atomically (a temporary file
// renamed into place), so a killed run leaves the old cache or none. A
// cache file that fails its checksum or does not fit the text is not
// trusted: the text is tokenized again and the file rewritten.

const (
	cacheMagic   = "ferrybpe"
	cacheVersion = 1
	// MaxTextBytes is the largest text CachedEncode reads (8 GiB).
	MaxTextBytes = 8 << 30
)

// tokenizations counts the texts CachedEncode tokenized (cache misses).
var tokenizations atomic.Int64

// CacheKey is the name of the cache file of text under the GPT-2
// encoding: hex SHA-256 of the encoding's name, a zero byte and the text,
// with the suffix ".bpe".
func CacheKey(text []byte) string {
	h := sha256.New()
	h.Write([]byte(Name))
	h.Write([]byte{0})
	h.Write(text)
	return hex.EncodeToString(h.Sum(nil)) + ".bpe"
}

// CachedEncode returns Encode of the file at path, reading the ids from
// cacheDir when this text has been tokenized before, and writing them
// there when not (creating cacheDir if needed). hit says whether the
// cache answered. A cache that cannot be written is an error: the caller
// asked for one.
func CachedEncode(path, cacheDir string) (ids []int32, hit bool, err error) {
	text, err := fsx.ReadLimited(path, MaxTextBytes)
	if err != nil {
		return nil, false, fmt.Errorf("bpe.CachedEncode: %w", err)
	}
	ids, hit, err = CachedEncodeBytes(text, cacheDir)
	if err != nil {
		return nil, false, fmt.Errorf("%w (the ids of %s)", err, path)
	}
	return ids, hit, nil
}

// CachedEncodeBytes is CachedEncode of text already in memory (a corpus
// read from many files, or one part of it): the cache is keyed by the
// bytes, so it is shared with CachedEncode of a file holding them.
func CachedEncodeBytes(text []byte, cacheDir string) (ids []int32, hit bool, err error) {
	if cacheDir == "" {
		return nil, false, fmt.Errorf("bpe.CachedEncodeBytes: no cache directory given")
	}
	if len(text) > MaxTextBytes {
		return nil, false, fmt.Errorf("bpe.CachedEncodeBytes: %d bytes is more than the %d it tokenizes", len(text), MaxTextBytes)
	}
	cache := filepath.Join(cacheDir, CacheKey(text))
	ids, err = readCache(cache)
	if err == nil {
		return ids, true, nil
	}
	if errors.Is(err, fsx.ErrNotRegular) {
		// A FIFO or a device where the cache file goes: writing the ids
		// there would block or go nowhere.
		return nil, false, fmt.Errorf("bpe.CachedEncode: %w (remove it, or give another --token-cache)", err)
	}
	tokenizations.Add(1)
	ids = Encode(text)
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, false, fmt.Errorf("bpe.CachedEncode: %w", err)
	}
	if err := fsx.WriteAtomic(cache, func(w io.Writer) error { return writeCache(w, ids) }); err != nil {
		return nil, false, fmt.Errorf("bpe.CachedEncode: caching token ids in %s: %w", cacheDir, err)
	}
	return ids, false, nil
}

func writeCache(w io.Writer, ids []int32) error {
	h := sha256.New()
	bw := bufio.NewWriter(io.MultiWriter(w, h))
	var head [20]byte
	copy(head[:8], cacheMagic)
	binary.LittleEndian.PutUint32(head[8:], cacheVersion)
	binary.LittleEndian.PutUint64(head[12:], uint64(len(ids)))
	bw.Write(head[:])
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		bw.Write(b[:])
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

var errBadCache = errors.New("not a valid token cache")

func readCache(path string) ([]int32, error) {
	b, err := fsx.ReadLimited(path, 4*MaxTextBytes+64)
	if err != nil {
		return nil, err
	}
	if len(b) < 20+sha256.Size || string(b[:8]) != cacheMagic || binary.LittleEndian.Uint32(b[8:]) != cacheVersion {
		return nil, errBadCache
	}
	n := binary.LittleEndian.Uint64(b[12:])
	body := b[:len(b)-sha256.Size]
	if uint64(len(body)-20) != 4*n {
		return nil, errBadCache
	}
	if sum := sha256.Sum256(body); string(sum[:]) != string(b[len(body):]) {
		return nil, errBadCache
	}
	ids := make([]int32, n)
	for i := range ids {
		id := int32(binary.LittleEndian.Uint32(body[20+4*i:]))
		if id < 0 || id >= VocabSize {
			return nil, errBadCache
		}
		ids[i] = id
	}
	return ids, nil
}
