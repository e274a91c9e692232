package bpe_test

import (
	"fmt"

	"ferry/data/bpe"
)

func ExampleEncode() {
	ids := bpe.Encode([]byte("Hello world"))
	fmt.Println(ids, bpe.Vocab())
	fmt.Printf("%q\n", bpe.Decode(append(ids, bpe.EndOfText)))
	// Output:
	// [15496 995] 50257
	// "Hello world<|endoftext|>"
}
