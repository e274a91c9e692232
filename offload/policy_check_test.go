package offload

import (
	"strings"
	"testing"
)

// Policies that encoding/json reads without complaint but that cannot be
// meant are refused, each problem named.
func TestParsePolicyRefusesAmbiguity(t *testing.T) {
	for _, tc := range []struct {
		body string
		want []string
	}{
		{`{"version":1,"default":"keep","layers":{"l.0":"host","l.0":"disk"}}`,
			[]string{`layers["l.0"] is given twice, with different values ("host" and "disk")`}},
		{`{"version":1,"default":"keep","default":"host"}`, []string{"default is given twice"}},
		{`{"version":1,"default":"keep","layers":{"l.0":null,"l.1":null}}`,
			[]string{`layers["l.0"] is null`, `layers["l.1"] is null`}},
		{`{"version":1,"default":null}`, []string{"default is null"}},
		{`{"version":1,"default":"keep","tensors":[null]}`, []string{"tensors[0] is null"}},
		{`{"version":1,"default":"keep","rules":[{"module":"a","slot":null,"placement":"host"}]}`, []string{"rules[0].slot is null"}},
		{`null`, []string{"the policy is null"}},
		{`{"version":1,"default":"keep","tensors":[{"module":"a","slot":0,"placement":"host"},{"module":"a","slot":0,"placement":"disk"}]}`,
			[]string{"tensors[0] and tensors[1] both place a slot 0, as host and disk"}},
		{`{"version":1,"default":"keep","rules":[{"module":"a","placement":"host"},{"module":"a","placement":"keep"}]}`,
			[]string{"rules[0] and rules[1] both match module \"a\""}},
		{`{"version":1,"default":"keep","layer":{"a":"host"}}`, []string{"unknown field"}},
		{`{"version":1,"default":"keep"} {"version":1}`, []string{"more than one JSON value"}},
	} {
		_, err := ParsePolicy([]byte(tc.body))
		if err == nil {
			t.Errorf("%s: accepted", tc.body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", tc.body, err, w)
			}
		}
	}
	// Identical duplicates of an entry are harmless and accepted.
	if _, err := ParsePolicy([]byte(`{"version":1,"default":"keep","tensors":[{"module":"a","slot":0,"placement":"host"},{"module":"a","slot":0,"placement":"host"}]}`)); err != nil {
		t.Errorf("identical duplicate tensors entries: %v", err)
	}
}

// UsesDisk sees a disk placement wherever a policy can hold one, ferry
// plan's tensor-by-tensor list included (ferry train refused --disk-dir
// for such a policy, reading only the default, layers and rules).
func TestPolicyUsesDisk(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Policy
		want bool
	}{
		{"nothing", Policy{Default: Keep, Layers: map[string]Placement{"a": Host}, Rules: []Rule{{Module: "a", Placement: Host}},
			Tensors: []TensorPlacement{{Module: "a", Placement: Keep}}}, false},
		{"default", Policy{Default: Disk}, true},
		{"layer", Policy{Layers: map[string]Placement{"a": Disk}}, true},
		{"rule", Policy{Rules: []Rule{{Module: "a", Placement: Disk}}}, true},
		{"tensor", Policy{Version: 2, Tensors: []TensorPlacement{{Module: "a", Placement: Host}, {Module: "b", Slot: 1, Placement: Disk}}}, true},
	} {
		if got := c.p.UsesDisk(); got != c.want {
			t.Errorf("%s: UsesDisk %v, want %v", c.name, got, c.want)
		}
	}
}
