package hftok_test

import (
	"fmt"
	"strings"

	"ferry/data/hftok"
)

// A model's tokenizer.json (here one trained for ferry's tests in Llama
// 3's form) encodes text to the ids the model reads, and back.
func Example() {
	tok, err := hftok.Load("../../testdata/hftok/llama3style.tokenizer.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode([]byte("func main() {\n\treturn\n}"))
	var tokens []string
	for _, id := range ids {
		tokens = append(tokens, fmt.Sprintf("%q", tok.Token(id)))
	}
	fmt.Println(strings.Join(tokens, " "))
	fmt.Printf("%q\n", tok.Decode(ids))
	// Output:
	// "func" "Ġmain" "()" "Ġ{Ċ" "ĉreturn" "Ċ" "}"
	// "func main() {\n\treturn\n}"
}
