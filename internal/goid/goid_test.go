package goid

import (
	"sync"
	"testing"
)

func TestCurrentTellsLiveGoroutinesApart(t *testing.T) {
	if !Supported {
		t.Skip("no goroutine identity on this architecture")
	}
	self := Current()
	if self == 0 || Current() != self {
		t.Fatalf("Current is not stable on one goroutine: %#x then %#x", self, Current())
	}
	const n = 8
	ids := make([]uintptr, n)
	var start, done sync.WaitGroup
	start.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for i := range n {
		go func() {
			defer done.Done()
			ids[i] = Current()
			start.Done()
			<-release // stay alive until every id is taken: live goroutines only
		}()
	}
	start.Wait()
	close(release)
	done.Wait()
	seen := map[uintptr]bool{self: true}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("two live goroutines share identity %#x", id)
		}
		seen[id] = true
	}
}

func BenchmarkCurrent(b *testing.B) {
	var sink uintptr
	for b.Loop() {
		sink += Current()
	}
	_ = sink
}
