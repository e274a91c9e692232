package fsx

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Open refuses every kind of file but a regular one (or a link to one),
// at once and naming the path and what it is; none of them blocks.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	os.WriteFile(reg, []byte("hello"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop")
	os.Symlink(loop, loop)
	link := filepath.Join(dir, "link")
	os.Symlink(reg, link)
	sock := filepath.Join(dir, "sock")
	if l, err := net.Listen("unix", sock); err == nil {
		defer l.Close()
	} else {
		sock = ""
	}
	big := filepath.Join(dir, "big")
	if f, err := os.Create(big); err == nil {
		f.Truncate(1 << 40) // 1 TiB, sparse
		f.Close()
	}
	cases := []struct {
		path, want string
	}{
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{dir, "is a directory, not a file"},
		{loop, "is a symbolic link that loops"},
		{big, "is 1099511627776 bytes, more than the 1048576"},
		{filepath.Join(dir, "missing"), "no such file"},
	}
	if sock != "" {
		cases = append(cases, struct{ path, want string }{sock, "is a socket, not a regular file"})
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases = append(cases, struct{ path, want string }{"/dev/zero", "is a character device, not a regular file"})
	}
	for _, c := range cases {
		start := time.Now()
		f, err := Open(context.Background(), c.path, 1<<20)
		if err == nil {
			f.Close()
			t.Errorf("%s: opened", c.path)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v; want the path and %q", c.path, err, c.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %v", c.path, d)
		}
	}
	if _, err := Open(context.Background(), filepath.Join(dir, "missing"), 1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v does not wrap fs.ErrNotExist", err)
	}
	if _, err := Open(context.Background(), fifo, 1); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a FIFO: %v does not wrap ErrNotRegular", err)
	}
	for _, p := range []string{reg, link} {
		b, err := ReadFile(context.Background(), p, 5)
		if err != nil || string(b) != "hello" {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if _, err := ReadFile(context.Background(), reg, 4); err == nil || !strings.Contains(err.Error(), "5 bytes, more than the 4") {
		t.Errorf("over the limit: %v", err)
	}
}

// A cancelled context stops a read between blocks, with the context's
// cause in the error, and Open refuses to start under one.
func TestReadStopsWhenTheContextIsDone(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, make([]byte, 3*readBlock), 0o644)
	why := errors.New("interrupted by a signal")
	ctx, cancel := context.WithCancelCause(context.Background())
	f, err := Open(ctx, p, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 3*readBlock)
	n, err := f.Read(buf)
	if err != nil || n != readBlock {
		t.Fatalf("first read: %d, %v; want one block", n, err)
	}
	cancel(why)
	if _, err := io.ReadFull(f, buf[n:]); !errors.Is(err, why) || !strings.Contains(err.Error(), p) {
		t.Fatalf("read after cancel: %v; want the cause and the path", err)
	}
	if _, err := Open(ctx, p, -1); !errors.Is(err, why) {
		t.Fatalf("Open under a done context: %v", err)
	}
}

// The test delay holds a read until its context is done.
func TestTestDelayEndsWithTheContext(t *testing.T) {
	p := filepath.Join(t.TempDir(), "slow.bin")
	os.WriteFile(p, []byte("x"), 0o644)
	old := delay.d
	delay.once.Do(func() {})
	delay.d, delay.name = time.Hour, "slow.bin"
	defer func() { delay.d, delay.name = old, "" }()
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel(errors.New("stop")) }()
	start := time.Now()
	_, err := ReadFile(ctx, p, 10)
	if err == nil || !strings.Contains(err.Error(), "stop") || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
	other := filepath.Join(filepath.Dir(p), "other")
	os.WriteFile(other, []byte("y"), 0o644)
	if b, err := ReadFile(context.Background(), other, 10); err != nil || string(b) != "y" {
		t.Fatalf("a file the delay does not name: %q, %v", b, err)
	}
}
