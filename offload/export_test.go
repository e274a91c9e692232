package offload

// SetEarlyFree makes o release device tensors as soon as their copy is
// enqueued (the bug that poisoned memory must catch).
func SetEarlyFree(o *Offloader, on bool) { o.earlyFree = on }

// DiskFiles reports how many files o's disk tier has created, and the
// bytes of its live and spare files.
func DiskFiles(o *Offloader) (made int, live, spare int64) {
	return o.filesMade, o.diskBytes, o.spareBytes
}
