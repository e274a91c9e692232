package main

// modeName is the memory mode a train run reports, in its header and its
// summary alike: "policy" for a --policy run (which validate routes
// through the offloader, so o.mode alone would say "offload"), else
// --mode.
func (o *trainOptions) modeName() string {
	if o.policy != "" {
		return "policy"
	}
	return o.mode
}
