package dist_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"ferry/dist"
)

// Every byte value, odd and even lengths, empty strings: every rank gets
// every rank's bytes exactly.
func TestAllGatherBytes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(255 - i)
	}
	mine := func(r int) []byte { return all[:[]int{0, 1, 256, 7}[r]] }
	cs := dist.NewGroup(4)
	for _, err := range onRanks(cs, func(c dist.Comm) error {
		got, err := dist.AllGatherBytes(c, mine(c.Rank()))
		if err != nil {
			return err
		}
		for r := range got {
			if !bytes.Equal(got[r], mine(r)) {
				return fmt.Errorf("rank %d got %v from rank %d, want %v", c.Rank(), got[r], r, mine(r))
			}
		}
		return nil
	}) {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestBroadcastBytes(t *testing.T) {
	msg := []byte("runs/text-20250101-120000\x00\xff")
	for _, err := range onRanks(dist.NewGroup(3), func(c dist.Comm) error {
		var b []byte
		if c.Rank() == 1 {
			b = msg
		}
		got, err := dist.BroadcastBytes(c, b, 1)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("rank %d got %q", c.Rank(), got)
		}
		return nil
	}) {
		if err != nil {
			t.Error(err)
		}
	}
}

// Too long a string fails on every rank, the root's included, instead of
// leaving the others waiting.
func TestBroadcastBytesTooLong(t *testing.T) {
	for _, err := range onRanks(dist.NewGroup(2), func(c dist.Comm) error {
		var b []byte
		if c.Rank() == 0 {
			b = make([]byte, dist.MaxBytes+1)
		}
		_, err := dist.BroadcastBytes(c, b, 0)
		return err
	}) {
		if err == nil || !strings.Contains(err.Error(), "longer than") && !strings.Contains(err.Error(), "at most") {
			t.Errorf("error %v", err)
		}
	}
}
