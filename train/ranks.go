package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"

	"ferry/dist"
	"ferry/internal/digest"
	"ferry/optim"
)

// Note [ranks agree]
//
// Data-parallel ranks are separate processes, each started with its own
// flags (mpirun's MPMD form gives each its own command line), its own
// data file and its own build of ferry. Ranks that differ in a setting
// that changes the mathematics train something no single process trains,
// and ranks that differ in one that changes the schedule of collectives
// (the number of steps, when to evaluate or checkpoint, the ZeRO stage)
// wait for each other forever. So at its end, once this rank's settings
// have passed its own checks (a setting that cannot work is a
// *ConfigError on each rank alike) and before any other collective,
// New exchanges a digest of this rank's rankIdentity with every
// rank (agreeRanks): two small all-gathers (a length, then 32 bytes)
// when they agree. When the
// digests differ, the ranks all-gather the identities themselves, and
// every rank returns the same *RankMismatchError, which names each
// setting and which ranks hold which value, so that every rank fails at
// once with the same words.
//
// A rank that fails before the exchange (its data file is missing) never
// arrives: its caller must end the job (dist.Abort), or the others wait
// in the exchange. `ferry train` does; a watched Comm (dist.Watch) ends
// the job when nobody does.

// RankMismatchError says that the ranks of a data-parallel run were
// given settings that differ. Every rank returns the same one.
type RankMismatchError struct {
	Diffs []RankDiff // sorted by key
}

// RankDiff is one setting in which ranks differ: Values[r] is rank r's
// value as JSON text ("" when unset).
type RankDiff struct {
	Key    string
	Values []string
}

func (e *RankMismatchError) Error() string { return e.Describe(nil) }

// Describe writes the error with name(key) naming each setting (a
// command line's flag, say); nil names it by its key. For example:
// "ranks disagree on steps: rank 0 has 100, rank 1 has 200".
func (e *RankMismatchError) Describe(name func(key string) string) string {
	if name == nil {
		name = func(k string) string { return k }
	}
	parts := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		parts[i] = name(d.Key) + ": " + d.holders()
	}
	return "ranks disagree on " + strings.Join(parts, "; on ") +
		" (start every rank with the same settings, data and build of ferry)"
}

// holders groups the ranks by value: "rank 0 has 100, rank 1 has 200",
// or "ranks 0–2, 4 have 100, rank 3 has 200".
func (d RankDiff) holders() string {
	var order []string
	ranks := map[string][]int{}
	for r, v := range d.Values {
		if _, seen := ranks[v]; !seen {
			order = append(order, v)
		}
		ranks[v] = append(ranks[v], r)
	}
	const most = 4 // values listed; the rest are counted
	var parts []string
	for i, v := range order {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d other values", len(order)-most))
			break
		}
		who, verb := "rank "+spans(ranks[v]), "has"
		if len(ranks[v]) > 1 {
			who, verb = "ranks "+spans(ranks[v]), "have"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", who, verb, showValue(v)))
	}
	return strings.Join(parts, ", ")
}

// spans writes sorted ranks as runs: "0–2, 4".
func spans(rs []int) string {
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d–%d", rs[i], rs[j]))
		} else {
			parts = append(parts, fmt.Sprint(rs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// showValue writes a value for people: "it unset", hashes (runs of 24
// hex digits or more) cut to their first 12, and anything past 120
// characters cut.
func showValue(v string) string {
	if v == "" {
		return "it unset"
	}
	v = cutHashes(v)
	if r := []rune(v); len(r) > 120 {
		v = string(r[:119]) + "…"
	}
	return v
}

// cutHashes cuts every run of 24 or more lowercase hex digits in v to
// its first 12 and "…".
func cutHashes(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && ('0' <= v[j] && v[j] <= '9' || 'a' <= v[j] && v[j] <= 'f') {
			j++
		}
		if j-i >= 24 {
			b.WriteString(v[i:i+12] + "…")
		} else {
			b.WriteString(v[i:j])
		}
		if j < len(v) { // the byte that ended the run
			b.WriteByte(v[j])
			j++
		}
		i = j
	}
	return b.String()
}

// rankIdentity is what every rank of a data-parallel run must share: the
// run's identity (the task's, with the settings that change the
// mathematics: identity), the settings that decide when collectives are
// made, the memory mode, the model's parameter shapes, the device's kind
// and ferry's build. Where things were read from (LocationsKey) is left
// out: the content's hash is in.
func (t *Trainer) rankIdentity() map[string]any {
	cfg := t.cfg
	id := t.identity()
	skip := []string{LocationsKey}
	switch l := id[LocationsKey].(type) {
	case []string:
		skip = append(skip, l...)
	case []any:
		for _, k := range l {
			if s, ok := k.(string); ok {
				skip = append(skip, s)
			}
		}
	}
	for _, k := range skip {
		delete(id, k)
	}
	// When collectives are made.
	id["steps"], id["stop_after"], id["eval_every"] = cfg.Steps, cfg.StopAfter, cfg.EvalEvery
	id["checkpoint_every"], id["check_every"], id["shard"], id["bucket_bytes"] = cfg.CheckpointEvery, cfg.CheckEvery, cfg.Shard, cfg.BucketBytes
	dir := ""
	if cfg.CheckpointDir != "" {
		dir = filepath.Clean(cfg.CheckpointDir)
	}
	id["checkpoint_dir"], id["resume"] = dir, cfg.Resume
	// How the step runs.
	id["precision"] = cfg.Precision.String()
	id["mode"] = string(cfg.Memory.Mode)
	if p := cfg.Memory.Policy; p != nil {
		b, _ := json.Marshal(p)
		id["policy"] = hexSHA256(b)
	}
	state := "device"
	if h, ok := cfg.Optimizer.(optim.HostPlaced); ok && h.StateOnHost() {
		state = "host"
	}
	id["optimizer_state"] = state
	id["parameters"] = t.shapes()
	kind, _, _ := strings.Cut(t.dev.Name(), ":")
	kind, _, _ = strings.Cut(kind, " ")
	id["device"] = kind
	id["ferry_version"] = buildVersion()
	return id
}

// shapes names the model's parameters' shapes and element types: their
// count, elements and a digest of the list.
func (t *Trainer) shapes() string {
	var b strings.Builder
	var n int64
	ps := t.task.Model().Parameters()
	for _, p := range ps {
		fmt.Fprintf(&b, "%v %v;", p.Shape(), p.DType())
		n += int64(p.Numel())
	}
	return fmt.Sprintf("%d tensors of %d elements, shapes %s", len(ps), n, hexSHA256([]byte(b.String()))[:16])
}

// hexSHA256 is the hex SHA-256 of b.
func hexSHA256(b []byte) string {
	s := digest.SHA256(b)
	return digest.Hex(s[:])
}

var (
	versionOnce sync.Once
	version     string
)

// buildVersion names this build of ferry: its module version, commit and
// Go release as the build recorded them, and, for a build whose commit
// is unknown or whose tree had changes, the digest of the executable
// itself, so that two such builds are told apart.
func buildVersion() string {
	versionOnce.Do(func() {
		info, ok := debug.ReadBuildInfo()
		if !ok {
			version = "unknown build " + exeDigest()
			return
		}
		rev, modified := "", false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		version = info.Main.Path + " " + info.Main.Version + " " + info.GoVersion
		if rev != "" {
			version += " commit " + rev
		}
		if rev == "" || modified {
			version += " executable " + exeDigest()
		}
	})
	return version
}

// exeDigest is the first 16 hex digits of the running executable's
// SHA-256, or "?" when it cannot be read.
func exeDigest() string {
	p, err := os.Executable()
	if err != nil {
		return "?"
	}
	sum, err := sumFile(context.Background(), p, -1)
	if err != nil {
		return "?"
	}
	return sum.SHA256[:16]
}

// agreeRanks checks that every rank has this rank's rankIdentity (Note
// [ranks agree]); every rank must call it, before any other collective
// of the run.
func (t *Trainer) agreeRanks() error {
	c := t.cfg.Comm
	text, err := json.Marshal(t.rankIdentity()) // keys sorted: the same settings give the same bytes
	if err != nil {
		return fmt.Errorf("the run's settings: %w", err)
	}
	sum := digest.SHA256(text)
	digests, err := dist.AllGatherBytes(c, sum[:])
	if err != nil {
		return fmt.Errorf("comparing the ranks' settings: %w", err)
	}
	same := true
	for _, d := range digests {
		same = same && string(d) == string(sum[:])
	}
	if same {
		return nil
	}
	all, err := dist.AllGatherBytes(c, text)
	if err != nil {
		return fmt.Errorf("comparing the ranks' settings: %w", err)
	}
	return mismatch(all)
}

// mismatch compares the ranks' identities (JSON objects) key by key.
func mismatch(texts [][]byte) error {
	ids := make([]map[string]json.RawMessage, len(texts))
	keys := map[string]bool{}
	for r, b := range texts {
		if err := json.Unmarshal(b, &ids[r]); err != nil {
			return fmt.Errorf("rank %d's settings are not readable (%v): is every rank the same build of ferry?", r, err)
		}
		for k := range ids[r] {
			keys[k] = true
		}
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	e := &RankMismatchError{}
	for _, k := range names {
		d := RankDiff{Key: k, Values: make([]string, len(ids))}
		differ := false
		for r := range ids {
			d.Values[r] = string(ids[r][k])
			differ = differ || d.Values[r] != d.Values[0]
		}
		if differ {
			e.Diffs = append(e.Diffs, d)
		}
	}
	if len(e.Diffs) == 0 { // the same settings, other bytes: another encoder
		return fmt.Errorf("the ranks' settings are equal but encoded differently: is every rank the same build of ferry?")
	}
	return e
}
