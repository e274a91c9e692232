// Package safetensors reads and writes the safetensors format, the weight
// files PyTorch and Hugging Face exchange: an 8-byte little-endian header
// length N, N bytes of JSON header, then the data buffer.
//
//	{"__metadata__": {"format": "pt"},
//	 "0.weight": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, 512]},
//	 ...}
//
// The header may be padded with spaces; each tensor's data_offsets are
// relative to the data buffer, and together the tensors must cover it
// exactly. Package nn builds on it to save and load a module's parameters.
//
// Safety. Parse and ReadFile treat a file as hostile: every length and
// offset is checked against the file before it is used, nothing larger
// than the file (or MaxHeaderBytes for the header) is allocated, and any
// inconsistency is an *Error naming the file, the tensor and what is
// wrong, never a panic. FuzzRead keeps it so.
//
// Checksums. Writers here record a CRC-32C of every tensor in
// __metadata__ under ChecksumKey; readers verify it when it is there.
// Files from PyTorch carry none and load all the same.
//
// Why not github.com/nlpodyssey/safetensors. It was evaluated (version
// v0.0.0-20250209183917-bfb01cc25f7c) and is careful about offsets and
// overflow, but it decodes the header with encoding/json into maps, so a
// tensor name (or a field, or __metadata__) given twice is silently
// resolved to the last one; it accepts a header that is not valid UTF-8
// (bytes become U+FFFD, so a name no longer matches its writer's); its
// errors do not say which file; and it pulls in testify. The format is
// small enough that a strict reader of our own (read.go) costs less than
// wrapping and patching one.
package safetensors
