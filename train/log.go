package train

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// jsonLog writes one JSON object per line to a file, each line in one
// write (so a reader never sees half a line from a live run).
type jsonLog struct {
	path string
	f    *os.File
}

// openLog opens path for the run's log ("" for none), appending when the
// run resumes. The file is opened without blocking, so a FIFO with no
// reader is an error at once, not a hang.
func openLog(path string, appending bool) (*jsonLog, error) {
	if path == "" {
		return &jsonLog{}, nil
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appending {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("log %s is not a regular file; give a file path", path)
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	return &jsonLog{path: path, f: f}, nil
}

func (l *jsonLog) write(rec map[string]any) error {
	if l.f == nil {
		return nil
	}
	b, err := json.Marshal(finite(rec))
	if err != nil {
		return err
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("log %s: %w", l.path, err)
	}
	return nil
}

func (l *jsonLog) close() {
	if l.f != nil {
		l.f.Close()
	}
}

// finite replaces NaN and infinities, which JSON cannot hold, by their
// names as strings, in maps of any depth.
func finite(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = finite(e)
		}
		return out
	case map[string]float64:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = finite(e)
		}
		return out
	}
	return v
}
