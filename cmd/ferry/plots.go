package main

import (
	"fmt"
	"os"
	"path/filepath"

	"ferry/internal/fsx"
	"ferry/trace"
	"io"
)

// writePlots draws the run's loss curves and one step's memory by category
// into dir and returns the files written.
func writePlots(dir, title string, h *history, rec *trace.Recorder) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--plot: %w", err)
	}
	var files []string
	if rec != nil {
		for _, name := range []string{"memory.svg"} {
			path := filepath.Join(dir, name)
			err := fsx.WriteAtomic(path, func(w io.Writer) error { return rec.WriteSVG(w, "", title) })
			if err != nil {
				return nil, fmt.Errorf("--plot: %w", err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}
