package main

import (
	"flag"
	"fmt"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/offload"
)

// stateFlags are --gradients and --parameters of ferry demo and train:
// where the gradients and the parameters live (device or host), with the
// optimizer's state (--optimizer-state, each command's own flag).
type stateFlags struct {
	grads, params string
}

func defineStateFlags(fs *flag.FlagSet) *stateFlags {
	s := &stateFlags{}
	fs.StringVar(&s.grads, "gradients", "device", "where gradients go as backward completes them: device, or host (needs --optimizer-state host; default: the policy's, else device)")
	fs.StringVar(&s.params, "parameters", "device", "where parameters live between uses: device, or host (streamed to the device around their uses; default: the policy's, else device)")
	return s
}

// resolve checks the flags, takes a policy's placements (refusing flags
// that contradict them) and says what the run does: gradients on the
// host, and which parameters live there.
func (s *stateFlags) resolve(set map[string]bool, pol *offload.Policy, policyFile, optimizerState string) (gradsOnHost bool, paramsOnHost []string, err error) {
	for _, v := range []struct{ flag, val string }{{"gradients", s.grads}, {"parameters", s.params}} {
		if v.val != "device" && v.val != "host" {
			return false, nil, fmt.Errorf("--%s %q: want device or host", v.flag, v.val)
		}
	}
	gradsOnHost = s.grads == "host"
	if s.params == "host" {
		paramsOnHost = []string{"*"}
	}
	if pol != nil {
		pg := pol.Gradients == "host"
		if set["gradients"] && gradsOnHost != pg {
			return false, nil, fmt.Errorf("--policy %s was planned with the gradients on the %s; drop --gradients %s, or plan again with it", policyFile, where(pg), s.grads)
		}
		pp := len(pol.ParametersOnHost) > 0
		if set["parameters"] && (s.params == "host") != pp {
			return false, nil, fmt.Errorf("--policy %s was planned with %s; drop --parameters %s, or plan again with it", policyFile, paramWords(pol.ParametersOnHost), s.params)
		}
		gradsOnHost, paramsOnHost = pg, pol.ParametersOnHost
	}
	if (gradsOnHost || len(paramsOnHost) > 0) && optimizerState != "host" {
		return false, nil, fmt.Errorf("gradients or parameters in host memory need the optimizer's state there too: add --optimizer-state host")
	}
	return gradsOnHost, paramsOnHost, nil
}

func where(host bool) string {
	if host {
		return "host"
	}
	return "device"
}

// paramWords says, for people, which parameters a policy puts on the host.
func paramWords(names []string) string {
	switch {
	case len(names) == 0:
		return "the parameters on the device"
	case len(names) == 1 && names[0] == "*":
		return "every parameter in host memory"
	}
	return fmt.Sprintf("%d parameters in host memory", len(names))
}

// checkHostPeak refuses, before any training, a policy whose predicted
// host peak the machine cannot hold (a device without data, meta, needs
// none).
func checkHostPeak(pol *offload.Policy, policyFile, dev string) error {
	if pol == nil || pol.HostPeakBytes <= 0 {
		return nil
	}
	if kind, _, _ := device.ParseName(dev); kind == "meta" {
		return nil
	}
	if avail := cpu.AvailableMemory(); avail > 0 && pol.HostPeakBytes > avail {
		return fmt.Errorf("--policy %s needs %s of host memory at its peak (offloaded tensors and the state placed there), and the machine has %s free: "+
			"plan again with --host-budget %s", policyFile, device.FormatBytes(pol.HostPeakBytes), device.FormatBytes(avail), device.FormatBytes(avail))
	}
	return nil
}
