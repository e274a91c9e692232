package main

import (
	"errors"
	"fmt"
	"strconv"

	"ferry/device"
	"ferry/device/cuda"
	"ferry/dist"
	"ferry/dist/mpi"
	"ferry/dist/nccl"
)

// rankDeviceName is the device a rank trains on. Under mpirun, "cuda"
// without an index is the GPU of the rank's place on its machine
// (OMPI_COMM_WORLD_LOCAL_RANK: rank 1 of a machine takes cuda:1), as a
// PyTorch job takes LOCAL_RANK's: NCCL refuses two ranks on one GPU. An
// index given (cuda:0) is kept, and so is every other name.
func rankDeviceName(name string) string {
	if name != "cuda" {
		return name
	}
	if l, ok, err := mpi.Launched(); err == nil && ok && l.Size > 1 && l.LocalRank >= 0 {
		return "cuda:" + strconv.Itoa(l.LocalRank)
	}
	return name
}

// deviceComm gives a data-parallel run on CUDA devices NCCL: every rank
// of c loads it, rank 0 makes the unique id, MPI carries it to the others
// (nccl.ExchangeID), and each rank joins the clique on its device
// (train.Config.DeviceComm: every stage's collectives then run on the
// device, never through host memory). It is a collective over c on every rank, whatever its device,
// so that no rank waits alone, at every ZeRO stage. It returns nil where
// the run stays on MPI's host path: a device that is not CUDA (no line),
// or NCCL missing on some rank (with a line for people saying why). close destroys the
// communicator.
func deviceComm(c dist.Comm, dev device.Device) (dc dist.DeviceComm, close func(), note string, err error) {
	close = func() {}
	gpu, isCUDA := dev.(*cuda.Device)
	var loadErr error
	if isCUDA {
		loadErr = nccl.Load()
	}
	// Each rank says whether it can: [not CUDA, NCCL missing].
	flags := []float32{0, 0}
	if !isCUDA {
		flags[0] = 1
	} else if loadErr != nil {
		flags[1] = 1
	}
	if err := c.AllReduce(flags).Synchronize(); err != nil {
		return nil, close, "", fmt.Errorf("agreeing on NCCL: %w", err)
	}
	switch {
	case flags[0] > 0:
		return nil, close, "", nil // not every rank on CUDA: MPI's host path (the ranks' settings check names a device that differs)
	case flags[1] > 0:
		why := "on another rank"
		if loadErr != nil {
			why = loadErr.Error()
		}
		return nil, close, fmt.Sprintf("NCCL is unavailable (%s): the gradients are averaged through host memory and MPI; install NCCL (libnccl2) or set FERRY_LIBNCCL for collectives on the device", why), nil
	}
	var id nccl.UniqueID
	var idErr error
	if c.Rank() == 0 {
		id, idErr = nccl.GetUniqueID()
	}
	if id, err = nccl.ExchangeID(c, id, idErr); err != nil {
		return nil, close, "", err
	}
	var nc *nccl.Comm
	// NCCL joins the clique on the device whose context is current on
	// the calling thread.
	err = gpu.Context().Do(func() error {
		var err error
		nc, err = nccl.InitRank(c.Size(), id, c.Rank())
		return err
	})
	if err != nil {
		if errors.Is(err, dist.ErrUnavailable) {
			return nil, close, "", err
		}
		return nil, close, "", fmt.Errorf("starting NCCL on %s: %w", dev.Name(), err)
	}
	return nccl.OnDevice(nc, gpu), func() { nc.Destroy() }, "", nil
}
