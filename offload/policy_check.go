package offload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// checkPolicyJSON finds what encoding/json reads without complaint but a
// policy must not hold: a key given twice in one object (json keeps the
// last silently, so two placements for one layer would both look meant)
// and null values (read as the zero placement, "keep"). It names every
// one, by its path in the file.
func checkPolicyJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var problems []string
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case nil:
			where := path
			if where == "" {
				where = "the policy"
			}
			problems = append(problems, where+" is null (give a value, or leave the key out)")
		case json.Delim:
			switch t {
			case '{':
				seen := map[string]string{}
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return err
					}
					k := kt.(string)
					child := path + "." + k
					if path == "" {
						child = k
					} else if strings.HasSuffix(path, "layers") {
						child = path + "[" + strconv.Quote(k) + "]"
					}
					start := dec.InputOffset()
					if err := walk(child); err != nil {
						return err
					}
					val := strings.TrimSpace(strings.TrimLeft(string(b[start:dec.InputOffset()]), " \t\r\n:"))
					if prev, dup := seen[k]; dup {
						how := "twice, with the same value"
						if prev != val {
							how = fmt.Sprintf("twice, with different values (%s and %s)", prev, val)
						}
						problems = append(problems, fmt.Sprintf("%s is given %s; keep one", child, how))
					}
					seen[k] = val
				}
			case '[':
				for i := 0; dec.More(); i++ {
					if err := walk(fmt.Sprintf("%s[%d]", path, i)); err != nil {
						return err
					}
				}
			}
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return err
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty policy")
		}
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		problems = append(problems, "more than one JSON value in the file")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// checkConflicts names every pair of entries that place the same saved
// tensors differently: two tensors entries for one module and slot, or
// two rules for one module, op and slot (the second would never apply).
func (p *Policy) checkConflicts() error {
	var problems []string
	tensors := map[tensorKey]int{}
	for i, t := range p.Tensors {
		k := tensorKey{t.Module, t.Slot}
		if j, ok := tensors[k]; ok {
			if p.Tensors[j].Placement != t.Placement {
				problems = append(problems, fmt.Sprintf("tensors[%d] and tensors[%d] both place %s slot %d, as %s and %s",
					j, i, t.Module, t.Slot, p.Tensors[j].Placement, t.Placement))
			}
			continue
		}
		tensors[k] = i
	}
	type ruleKey struct {
		module, op string
		slot       int // -1: every slot
	}
	rules := map[ruleKey]int{}
	for i, r := range p.Rules {
		k := ruleKey{r.Module, r.Op, -1}
		if r.Slot != nil {
			k.slot = *r.Slot
		}
		if j, ok := rules[k]; ok {
			if p.Rules[j].Placement != r.Placement {
				problems = append(problems, fmt.Sprintf("rules[%d] and rules[%d] both match module %q op %q, as %s and %s (the first wins, the second never applies)",
					j, i, r.Module, r.Op, p.Rules[j].Placement, r.Placement))
			}
			continue
		}
		rules[k] = i
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
