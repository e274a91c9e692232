package workq

import (
	"errors"
	"sync"
	"testing"
)

func TestOrderAndClose(t *testing.T) {
	q := New()
	var mu sync.Mutex
	var got []int
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		i := i
		if err := q.Push(func() { mu.Lock(); got = append(got, i); mu.Unlock() }); err != nil {
			t.Fatal(err)
		}
	}
	wg.Add(1)
	q.Push(wg.Done)
	wg.Wait()
	q.Close()
	q.Close()
	for i, v := range got {
		if v != i {
			t.Fatalf("ran out of order: %v", got)
		}
	}
	if err := q.Push(func() {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Push after Close: %v", err)
	}
}
