package train

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"ferry/internal/digest"
	"ferry/internal/fsx"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A run's identity is a flat map of the settings that decide its
// mathematics: resuming a checkpoint under different ones would silently
// train another run. The loop fills it with at least these keys (IdentityKeys)
// and whatever its task adds (model sizes, "task"):
//
//	lr, min_lr, steps, warmup, clip, accum, weight_decay, momentum,
//	optimizer, batch, seed, data_sha256
//
// Values are compared as their JSON text, so 0.002 written by one run and
// read back by the next compare equal.

// IdentityKeys are the identity keys every train command records (besides
// its task's model sizes).
var IdentityKeys = []string{"lr", "min_lr", "steps", "warmup", "clip", "accum", "weight_decay", "momentum",
	"optimizer", "batch", "seed", "data_sha256"}

// IdentityDiff is one setting in which a checkpoint's run and this run
// differ. Saved and Current are JSON text, "" when the key is unset.
type IdentityDiff struct {
	Key     string `json:"key"`
	Saved   string `json:"saved,omitempty"`
	Current string `json:"current,omitempty"`
}

func (d IdentityDiff) String() string {
	show := func(s string) string {
		if s == "" {
			return "unset"
		}
		return s
	}
	return fmt.Sprintf("%s is %s there, %s here", d.Key, show(d.Saved), show(d.Current))
}

// Override is an identity difference accepted on resume, as recorded in
// the checkpoints written afterwards.
type Override struct {
	Step int `json:"step"` // the checkpoint resumed from
	IdentityDiff
	Note string `json:"note,omitempty"`
}

// LocationsKey names, in an identity, the keys that say where something
// was read from (a path), for people and for `ferry eval`: they are not
// compared, since what was read is, through its content's hash (a moved
// or renamed file resumes). Its value is a list of key names.
const LocationsKey = "locations"

// CompareIdentity lists every key in which saved (a checkpoint's identity)
// and current (this run's) differ, sorted by key; none when they match.
// The keys either names under LocationsKey are not compared.
func CompareIdentity(saved, current map[string]any) []IdentityDiff {
	skip := map[string]bool{LocationsKey: true}
	for _, m := range []map[string]any{saved, current} {
		switch l := m[LocationsKey].(type) {
		case []any:
			for _, k := range l {
				if s, ok := k.(string); ok {
					skip[s] = true
				}
			}
		case []string:
			for _, k := range l {
				skip[k] = true
			}
		}
	}
	norm := func(m map[string]any) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			b, err := json.Marshal(v)
			if err != nil {
				b = []byte(fmt.Sprintf("%q", fmt.Sprint(v)))
			}
			out[k] = string(b)
		}
		return out
	}
	s, c := norm(saved), norm(current)
	keys := map[string]bool{}
	for k := range s {
		keys[k] = true
	}
	for k := range c {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var diffs []IdentityDiff
	for _, k := range names {
		if !skip[k] && s[k] != c[k] {
			diffs = append(diffs, IdentityDiff{Key: k, Saved: s[k], Current: c[k]})
		}
	}
	return diffs
}

// ParseOverrides splits an --override value ("lr,steps") into keys. The
// keys are checked against the identities when a checkpoint is loaded.
func ParseOverrides(s string) ([]string, error) {
	var keys []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		keys = append(keys, strings.ReplaceAll(k, "-", "_")) // --min-lr names min_lr
	}
	if len(keys) == 0 && strings.TrimSpace(s) != "" {
		return nil, fmt.Errorf("--override %q names no setting; give keys such as lr,steps", s)
	}
	return keys, nil
}

// checkIdentity compares the checkpoint's identity with this run's. A
// difference in a key of c.Overrides is accepted; any other is an error
// that lists them all. It returns the overrides to record from now on.
func (c *Checkpointer) checkIdentity(path string, meta *Meta, identity map[string]any) ([]Override, error) {
	allowed := map[string]bool{}
	for _, k := range c.Overrides {
		_, inSaved := meta.Identity[k]
		_, inCurrent := identity[k]
		if !inSaved && !inCurrent {
			known := make([]string, 0, len(identity))
			for k := range identity {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("--override %s: no such setting in the run's identity (it has %s)", k, strings.Join(known, ", "))
		}
		allowed[k] = true
	}
	accepted := append([]Override(nil), meta.Overrides...)
	var refused []string
	for _, d := range CompareIdentity(meta.Identity, identity) {
		if allowed[d.Key] {
			note := c.OverrideNote
			if note == "" {
				note = "accepted with --override on resume"
			}
			accepted = append(accepted, Override{Step: meta.Step, IdentityDiff: d, Note: note})
			continue
		}
		refused = append(refused, d.String())
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("checkpoint %s was written by a different run: %s; "+
			"resume with the checkpoint's settings, give --override with the settings to change on purpose "+
			"(recorded in the checkpoint), or give a new --checkpoint-dir", path, strings.Join(refused, ", "))
	}
	return accepted, nil
}

// HashBytes is the hex SHA-256 of parts, each prefixed with its length so
// that moving bytes from one part to the next changes it. The text loop
// records HashBytes(text.Train, text.Val) as data_sha256: exactly the
// bytes it trains on, whatever path named them.
func HashBytes(parts ...[]byte) string {
	h := digest.NewSHA256()
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return digest.Hex(h.Sum(nil))
}

// HashPath is the hex SHA-256 of a file's content or of a directory's
// regular files (their paths relative to it, sizes and contents, in path
// order), so that ./small.txt and small.txt hash alike and a same-named
// file with other content does not. Other kinds of file (a FIFO, a device)
// are refused: they have no content to identify.
func HashPath(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("hashing the data: %w", err)
	}
	h := digest.NewSHA256()
	add := func(p string) error {
		f, err := fsx.Open(context.Background(), p, -1)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(h, f)
		return err
	}
	switch {
	case st.Mode().IsRegular():
		if err := add(path); err != nil {
			return "", fmt.Errorf("hashing the data: %w", err)
		}
	case st.IsDir():
		var files []string
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("hashing the data: %w", err)
		}
		sort.Strings(files)
		for _, p := range files {
			rel, _ := filepath.Rel(path, p)
			fi, err := os.Stat(p)
			if err != nil {
				return "", fmt.Errorf("hashing the data: %w", err)
			}
			fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), fi.Size())
			if err := add(p); err != nil {
				return "", fmt.Errorf("hashing the data: %w", err)
			}
		}
	default:
		return "", fmt.Errorf("hashing the data: %s is %s, not a file or directory", path, fsx.Kind(st.Mode()))
	}
	return digest.Hex(h.Sum(nil)), nil
}
