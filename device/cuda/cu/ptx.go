package cu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Entry is a kernel declared in a PTX image: its name and the byte size of
// each parameter, as the driver will copy them from kernelParams.
type Entry struct {
	Name   string
	Params []int
}

var (
	entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)`)
	paramRE = regexp.MustCompile(`\.param\s+(?:\.align\s+\d+\s+)?\.([busf])(8|16|32|64)\s+[\w$]+(?:\[(\d+)\])?`)
)

// ParsePTX lists the kernels (.entry) of a PTX image with their parameter
// sizes. The fake driver uses it to check every launch against what the
// real driver would read; tests use it to check the embedded PTX.
func ParsePTX(ptx []byte) ([]Entry, error) {
	var out []Entry
	for _, m := range entryRE.FindAllSubmatch(ptx, -1) {
		e := Entry{Name: string(m[1])}
		list := strings.TrimSpace(string(m[2]))
		if list != "" {
			for _, p := range strings.Split(list, ",") {
				pm := paramRE.FindStringSubmatch(p)
				if pm == nil {
					return nil, fmt.Errorf("ptx: kernel %s: cannot read parameter %q", e.Name, strings.TrimSpace(p))
				}
				bits, _ := strconv.Atoi(pm[2])
				n := bits / 8
				if pm[3] != "" {
					count, _ := strconv.Atoi(pm[3])
					n *= count
				}
				e.Params = append(e.Params, n)
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ptx: no .entry found")
	}
	return out, nil
}
