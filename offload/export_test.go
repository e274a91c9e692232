package offload

// SetEarlyFree makes o release device tensors as soon as their copy is
// enqueued (the bug that poisoned memory must catch).
func SetEarlyFree(o *Offloader, on bool) { o.earlyFree = on }
