package offload

import (
	"errors"
	"fmt"
	"os"

	"ferry/device"
)

// The disk tier. Files are written and read on one goroutine (a workq.Queue), in
// the order the work was queued; the training goroutine learns that an
// operation finished through its ioOp. Each file is unlinked as soon as it
// is created, so it disappears when closed or when the process ends, even
// if it is killed: a failed or interrupted step leaves nothing behind.
//
// A dropped record's file is not closed but kept open, as a spare, for the
// next write of the same size: a training step saves tensors of the same
// sizes every step, and writing over a file's pages costs a fraction of
// creating a file, filling it and closing it. On ext4, with 59 files of
// 154 KiB alive at once (a small GPT's step), a new file cost 140 µs a
// round trip (create 68, write 39, read 15, close 18) and a spare one 15
// µs (docs/plan.md, "The machine at its own speed"). The files alive and
// the spare ones together never hold more bytes than the most the tier
// held alive at once (Stats.DiskPeakBytes): spare files are closed to
// keep it so (trimSpares). Spares are only touched on the training
// goroutine; a spare handed to a write belongs to that write's record.

// ioOp is one disk operation's completion: err and result are written by
// the I/O goroutine before ch is closed, and read only after.
type ioOp struct {
	ch     chan struct{}
	err    error
	result any // the *diskFile written, or the device.Event of a copy after a read
}

func newIOOp() *ioOp { return &ioOp{ch: make(chan struct{})} }

func (op *ioOp) finish(result any, err error) {
	op.result, op.err = result, err
	close(op.ch)
}

func (op *ioOp) done() bool {
	select {
	case <-op.ch:
		return true
	default:
		return false
	}
}

func (op *ioOp) wait() { <-op.ch }

// diskFile is one record's file, already unlinked (name is kept only where
// unlinking an open file failed, to remove it at close).
type diskFile struct {
	f    *os.File
	name string
}

func (d *diskFile) close() error {
	err := d.f.Close()
	if d.name != "" {
		if e := os.Remove(d.name); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// startDiskWrite queues the write of r's data to a new file: straight from
// device memory when the process can address it (direct), else from the
// host staging block once the copy into it (r.out) has finished.
func (o *Offloader) startDiskWrite(r *record, src device.Span, direct bool) {
	var data []byte
	if direct {
		data = blockBytes(src.Block)
	} else {
		data = blockBytes(r.host)
	}
	op := newIOOp()
	r.outIO = op
	after, dir, n := r.out, o.cfg.DiskDir, r.bytes
	r.out = nil // the I/O goroutine waits for it
	f := o.takeSpare(n)
	if f == nil {
		o.filesMade++
	}
	o.push(op, func() {
		if after != nil {
			if err := after.Synchronize(); err != nil {
				if f != nil {
					f.close()
				}
				op.finish(nil, err)
				return
			}
		}
		if f == nil {
			var err error
			if f, err = createUnlinked(dir); err != nil {
				op.finish(nil, fmt.Errorf("disk tier: cannot create a file in %s: %w; check that the directory exists and is writable", dir, err))
				return
			}
		}
		if _, err := f.f.WriteAt(data[:n], 0); err != nil {
			f.close()
			op.finish(nil, fmt.Errorf("disk tier: writing %s to %s failed: %w; free disk space, choose another DiskDir, or raise HostLimit", device.FormatBytes(n), dir, err))
			return
		}
		op.finish(f, nil)
	})
}

// takeFile moves the file a finished write produced into r.
func (r *record) takeFile() {
	if f, ok := r.outIO.result.(*diskFile); ok {
		r.file = f
		r.outIO.result = nil
	}
}

// startDiskRead queues the read of r's file into dst: directly when the
// process can address device memory, else into a host staging block
// followed by a copy to the device (whose event becomes the op's result).
func (o *Offloader) startDiskRead(r *record, dst device.Span) error {
	op := newIOOp()
	f, n := r.file, r.bytes
	if hostAddressable(dst.Block) {
		data := blockBytes(dst.Block)
		r.inIO = op
		o.push(op, func() {
			op.finish(nil, readFull(f, data[:n]))
		})
		return nil
	}
	hb, err := o.host.Allocator().Alloc(n, device.Activation)
	if err != nil {
		return err
	}
	r.host = hb
	r.inIO = op
	staging := blockBytes(hb)
	dev, h2d := o.dev, o.h2d
	o.push(op, func() {
		if err := readFull(f, staging[:n]); err != nil {
			op.finish(nil, err)
			return
		}
		if err := dev.Copy(h2d, dst, device.Whole(hb)); err != nil {
			op.finish(nil, err)
			return
		}
		op.finish(h2d.Record(), nil)
	})
	return nil
}

func readFull(f *diskFile, b []byte) error {
	m, err := f.f.ReadAt(b, 0)
	if err != nil || m != len(b) {
		return fmt.Errorf("disk tier: reading back %s: read %d bytes: %v", device.FormatBytes(int64(len(b))), m, err)
	}
	return nil
}

// push queues f on the disk goroutine; if the Offloader was closed, the
// operation fails at once instead of never finishing.
func (o *Offloader) push(op *ioOp, f func()) {
	if err := o.disk.Push(f); err != nil {
		op.finish(nil, fmt.Errorf("disk tier: %w (the Offloader was closed)", err))
	}
}

// takeSpare returns a spare file of exactly n bytes, or nil.
func (o *Offloader) takeSpare(n int64) *diskFile {
	files := o.spare[n]
	if len(files) == 0 {
		return nil
	}
	f := files[len(files)-1]
	o.spare[n] = files[:len(files)-1]
	o.spareBytes -= n
	return f
}

// keepSpare keeps f, a dropped record's file of n bytes written without
// error, for a later write of that size. The caller has already taken n
// off diskBytes, so the live and spare bytes together are unchanged and
// stay within the bound: only a new file adds to them (trimSpares).
func (o *Offloader) keepSpare(f *diskFile, n int64) {
	if o.spare == nil {
		o.spare = map[int64][]*diskFile{}
	}
	o.spare[n] = append(o.spare[n], f)
	o.spareBytes += n
}

// trimSpares closes spare files, on the disk goroutine, until the files
// alive and the spare ones hold no more than Stats.DiskPeakBytes.
func (o *Offloader) trimSpares() {
	if o.diskBytes+o.spareBytes <= o.stats.DiskPeakBytes {
		return
	}
	for n, files := range o.spare {
		for len(files) > 0 && o.diskBytes+o.spareBytes > o.stats.DiskPeakBytes {
			f := files[len(files)-1]
			files = files[:len(files)-1]
			o.spareBytes -= n
			if o.disk.Push(func() { f.close() }) != nil {
				f.close()
			}
		}
		o.spare[n] = files
	}
}

// closeSpares closes every spare file (the disk goroutine has stopped).
func (o *Offloader) closeSpares() error {
	var errs []error
	for n, files := range o.spare {
		for _, f := range files {
			errs = append(errs, f.close())
		}
		delete(o.spare, n)
	}
	o.spareBytes = 0
	return errors.Join(errs...)
}
