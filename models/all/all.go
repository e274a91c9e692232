// Package all registers every model family ferry ships: import it for
// its side effect, as ferry's commands do.
//
//	import _ "ferry/models/all"
package all

import (
	_ "ferry/models/gpt"
	_ "ferry/models/llama"
	_ "ferry/models/mlp"
)
