package device

import (
	"encoding/json"
	"fmt"
	"math"
)

// Category says what an allocation holds, so that a memory timeline can say
// what the bytes are.
type Category uint8

const (
	Activation     Category = iota // forward outputs and inputs of a step (the default)
	Parameter                      // model weights and buffers
	Gradient                       // gradients: of parameters, and of activations during backward
	OptimizerState                 // momentum, Adam moments
	Workspace                      // scratch a library asks for (cuBLAS workspace)
	Temporary                      // scratch an op frees before it returns
	NumCategories
)

var categoryNames = [NumCategories]string{"activation", "parameter", "gradient", "optimizer_state", "workspace", "temporary"}

func (c Category) String() string {
	if c < NumCategories {
		return categoryNames[c]
	}
	return fmt.Sprintf("category(%d)", c)
}

// ParseCategory is the inverse of Category.String.
func ParseCategory(s string) (Category, error) {
	for i, n := range categoryNames {
		if n == s {
			return Category(i), nil
		}
	}
	return 0, fmt.Errorf("unknown memory category %q", s)
}

// Stat is one statistic, shaped like PyTorch's: the current value, the peak
// since the last reset, and the running totals of increases and decreases.
type Stat struct {
	Current   int64 `json:"current"`
	Peak      int64 `json:"peak"`
	Allocated int64 `json:"allocated"`
	Freed     int64 `json:"freed"`
}

// Current and Peak stay below an allocator's limit on reserved bytes
// (MaxBytes); the running totals saturate at math.MaxInt64 rather than
// wrap around to negative numbers.
func (s *Stat) add(n int64) {
	s.Current += n
	s.Allocated = saturatingAdd(s.Allocated, n)
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
}

func (s *Stat) sub(n int64) {
	s.Current -= n
	s.Freed = saturatingAdd(s.Freed, n)
}

func saturatingAdd(a, n int64) int64 {
	if a > math.MaxInt64-n {
		return math.MaxInt64
	}
	return a + n
}

func (s *Stat) resetPeak() { s.Peak = s.Current }

// Stats is a snapshot of an allocator's statistics. Byte counts are of
// blocks as handed out (sizes rounded up to the allocator's granularity),
// as PyTorch's memory_allocated() counts them.
type Stats struct {
	// AllocatedBytes: bytes in blocks handed out and not yet freed.
	// PyTorch: memory_allocated(), max_memory_allocated().
	AllocatedBytes Stat
	// ReservedBytes: bytes obtained from the system, cached or not.
	// PyTorch: memory_reserved(), max_memory_reserved().
	ReservedBytes Stat
	// ActiveBytes: allocated bytes plus freed blocks that another stream
	// may still be using (not yet reusable).
	ActiveBytes Stat
	// RequestedBytes: the sizes callers asked for, before rounding.
	RequestedBytes Stat
	// Allocations, Segments and ActiveBlocks count blocks and segments.
	Allocations  Stat
	Segments     Stat
	ActiveBlocks Stat
	// ByCategory breaks AllocatedBytes down by what the bytes hold.
	ByCategory [NumCategories]Stat
	// CacheFlushes counts times the cache was emptied to satisfy an
	// allocation (PyTorch: num_alloc_retries).
	CacheFlushes int64
	// OOMs counts allocations that failed (PyTorch: num_ooms).
	OOMs int64
	// Capacity is the allocator's cap on reserved bytes; 0 means none.
	Capacity int64
}

// Flat returns the statistics under PyTorch's flat keys
// ("allocated_bytes.all.peak", "allocated_bytes.activation.current", ...),
// so numbers compare one to one with torch.cuda.memory_stats().
func (s Stats) Flat() map[string]int64 {
	m := map[string]int64{
		"num_alloc_retries": s.CacheFlushes,
		"num_ooms":          s.OOMs,
		"capacity_bytes":    s.Capacity,
	}
	put := func(prefix string, st Stat) {
		m[prefix+".current"] = st.Current
		m[prefix+".peak"] = st.Peak
		m[prefix+".allocated"] = st.Allocated
		m[prefix+".freed"] = st.Freed
	}
	put("allocated_bytes.all", s.AllocatedBytes)
	put("reserved_bytes.all", s.ReservedBytes)
	put("active_bytes.all", s.ActiveBytes)
	put("requested_bytes.all", s.RequestedBytes)
	put("allocation.all", s.Allocations)
	put("segment.all", s.Segments)
	put("active.all", s.ActiveBlocks)
	for c := Category(0); c < NumCategories; c++ {
		put("allocated_bytes."+c.String(), s.ByCategory[c])
	}
	return m
}

// MarshalJSON writes the flat form.
func (s Stats) MarshalJSON() ([]byte, error) { return json.Marshal(s.Flat()) }

// String summarises the statistics in one line for people.
func (s Stats) String() string {
	str := fmt.Sprintf("%s allocated (peak %s), %s reserved (peak %s)",
		FormatBytes(s.AllocatedBytes.Current), FormatBytes(s.AllocatedBytes.Peak),
		FormatBytes(s.ReservedBytes.Current), FormatBytes(s.ReservedBytes.Peak))
	if s.Capacity > 0 {
		str += " of " + FormatBytes(s.Capacity) + " capacity"
	}
	return str
}

// FormatBytes writes n in binary units with two decimals: "16.00 MiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		if f < unit && f > -unit {
			return fmt.Sprintf("%.2f %s", f, u)
		}
	}
	return fmt.Sprintf("%.2f EiB", f/unit)
}

// OutOfMemoryError is returned when an allocation does not fit, even after
// the cache was flushed. It carries the statistics at the moment of failure.
type OutOfMemoryError struct {
	Device    string
	Requested int64 // bytes asked for
	Category  Category
	Stats     Stats
	// Free is the capacity left, FreeCached the bytes cached but too
	// fragmented to serve the request.
	Free, FreeCached int64
}

func (e *OutOfMemoryError) Error() string {
	free := ""
	if e.Stats.Capacity > 0 { // without a cap, the allocator does not know what is free
		free = ", " + FormatBytes(e.Free) + " free"
	}
	return fmt.Sprintf("%s out of memory: tried to allocate %s (%s); %s%s, %s cached but unusable. %s",
		e.Device, FormatBytes(e.Requested), e.Category, e.Stats, free, FormatBytes(e.FreeCached), e.Advice())
}

// Advice says what would make an allocation of e's category fit. The batch
// size is advice only for memory that grows with it: parameters and
// optimizer state do not.
func (e *OutOfMemoryError) Advice() string {
	larger := "open the device with a larger capacity"
	if e.Stats.Capacity == 0 {
		larger = "use a device with more memory"
	}
	switch e.Category {
	case Parameter:
		return "The model's parameters do not fit: use a smaller model (fewer or narrower layers), or " + larger
	case OptimizerState:
		return "The optimizer's state does not fit beside the model: use an optimizer that keeps less " +
			"(SGD without momentum keeps none; AdamW keeps two tensors per parameter), a smaller model, or " + larger
	case Gradient:
		return "Gradients do not fit: lower the batch size (gradients of activations grow with it), " +
			"apply each parameter's update as its gradient is ready (optim.InBackward), or " + larger
	case Workspace:
		return "A library's scratch space does not fit: free memory first (lower the batch size, offload activations), or " + larger
	default: // activations and the temporaries of ops grow with the batch
		return "Lower the batch size, offload activations (see `ferry plan`), or " + larger
	}
}
