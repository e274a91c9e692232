package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows a training run. On a terminal (stderr) it draws one live
// bar per phase with github.com/schollz/progressbar/v3 (chosen over mpb
// because a run has one bar at a time, and progressbar's single bar with
// a description, rate and ETA is exactly that, with fewer dependencies);
// elsewhere it prints plain lines at the logging interval. With --json it
// prints nothing on stdout, so that stdout holds one JSON object.
type progress struct {
	out  io.Writer // results for people; nil with --json
	errw io.Writer
	live bool // a terminal: draw a bar on errw
	bar  *progressbar.ProgressBar
}

func newProgress(stdout, stderr io.Writer, asJSON bool) *progress {
	p := &progress{errw: stderr}
	if !asJSON {
		p.out = stdout
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.live = true
	}
	return p
}

// phase starts a bar for a phase of total units, done of them already.
func (p *progress) phase(name string, total, done int) {
	p.done()
	if !p.live {
		return
	}
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.errw),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)
	if done > 0 {
		p.bar.Set(done)
	}
}

// update moves the bar to done and shows desc (loss, rate, memory).
func (p *progress) update(done int, desc string) {
	if p.bar != nil {
		p.bar.Describe(desc)
		p.bar.Set(done)
	}
}

// line prints a result for people (above the bar on a terminal).
func (p *progress) line(format string, args ...any) {
	if p.out == nil {
		return
	}
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintf(p.out, format+"\n", args...)
}

// plain prints a periodic status line where no bar is drawn.
func (p *progress) plain(format string, args ...any) {
	if p.live || p.out == nil {
		return
	}
	fmt.Fprintf(p.out, format+"\n", args...)
}

// done ends the current bar.
func (p *progress) done() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}
