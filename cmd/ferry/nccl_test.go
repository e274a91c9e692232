package main

import (
	"errors"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/dist"
	"ferry/dist/nccl"
	"ferry/dist/nccl/standin"
)

// deviceComm bootstraps NCCL as ferry train does under mpirun on CUDA:
// on two fake GPUs with the NCCL stand-in, rank 0's unique id reaches
// rank 1 over the host communicator, both join the clique, and an
// all-reduce on the devices sums; on the CPU the run stays on the host
// path, without a word.
func TestDeviceCommBootstrap(t *testing.T) {
	path, err := standin.Build(t.TempDir())
	if errors.Is(err, standin.ErrNoCompiler) {
		t.Skipf("the NCCL stand-in needs a C compiler: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	lib, err := standin.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FERRY_LIBNCCL", path)
	lib.Reset()
	const size = 2
	for _, tc := range []struct {
		name string
		gpu  bool
		want string // "-": no communicator and no note; "": a communicator on the GPU
	}{{"cpu", false, "-"}, {"gpu", true, ""}} {
		comms := dist.NewGroup(size)
		errs := make([]error, size)
		done := make(chan int)
		for r := range size {
			go func() {
				defer func() { done <- r }()
				var dev device.Device
				if tc.gpu {
					g, err := cuda.Open(fake.New(fake.Options{HostAddresses: true}), 0, device.Options{})
					if err != nil {
						errs[r] = err
						return
					}
					defer g.Close()
					dev = g
				} else {
					c, err := device.Open("cpu", device.Options{})
					if err != nil {
						errs[r] = err
						return
					}
					defer c.Close()
					dev = c
				}
				dc, closeDC, note, err := deviceComm(comms[r], dev)
				if err != nil {
					errs[r] = err
					return
				}
				defer closeDC()
				switch {
				case tc.want == "-" && (dc != nil || note != ""):
					errs[r] = errors.New("a CPU run got NCCL or a note: " + note)
				case tc.want == "":
					if dc == nil {
						errs[r] = errors.New("no NCCL on the GPUs: " + note)
						return
					}
					nd := dc.(*nccl.DeviceComm)
					nd.Settle = func(s cu.Stream) error { return lib.StreamWait(uintptr(s), 10*time.Second) }
					x := ferry.FromFloat32s(dev, []float32{float32(r + 1), 10}, 2)
					defer x.Release()
					b, off := x.Block()
					sp := device.Span{Block: b, Off: int64(off) * 4, Len: 8}
					if err := dc.AllReduce(sp, 2, dev.Compute()); err != nil {
						errs[r] = err
						return
					}
					if got := x.Float32s(); got[0] != 3 || got[1] != 20 {
						errs[r] = errors.New("the all-reduce gave " + ferry.FromFloat32s(dev, got, 2).String())
					}
				}
			}()
		}
		for range size {
			<-done
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	if n := lib.Violations(); n != 0 {
		t.Fatalf("%d calls broke NCCL's API:\n%s", n, lib.Report())
	}
}

// Under mpirun, --device cuda is the GPU of the rank's place on its
// machine; an index given, and other devices, are kept.
func TestRankDeviceName(t *testing.T) {
	if got := rankDeviceName("cuda"); got != "cuda" {
		t.Fatalf("outside mpirun: %q", got)
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "3")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
	for in, want := range map[string]string{"cuda": "cuda:1", "cuda:0": "cuda:0", "cpu": "cpu"} {
		if got := rankDeviceName(in); got != want {
			t.Errorf("rankDeviceName(%q) = %q, want %q", in, got, want)
		}
	}
}
