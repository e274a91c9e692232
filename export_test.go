package ferry

// SetWidenAlways makes every op widen its bfloat16 inputs into float32
// temporaries, even on a device that takes bfloat16 views, and returns the
// function that restores the setting.
func SetWidenAlways(on bool) func() {
	prev := widenAlways
	widenAlways = on
	return func() { widenAlways = prev }
}
