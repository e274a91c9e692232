package plan

import "ferry/device/meta"

// cpuProfile is this project's development machine as `ferry calibrate`
// measured it (see the "cpu" entry of builtin).
var cpuProfile = meta.Profile{Name: "cpu"}
