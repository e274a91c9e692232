// Package digest computes the checksums ferry writes into and checks
// against its files: SHA-256 (checkpoint and data hashes), CRC-32C (the
// Castagnoli polynomial, safetensors checksums) and 64-bit FNV-1a (dropout
// op ids), plus lowercase hex for printing them.
//
// Every function gives bit for bit what the standard library gives
// (crypto/sha256, hash/crc32 with the Castagnoli table, hash/fnv's New64a,
// encoding/hex), so no file format changes; the tests compare them on
// every path. The package exists so that ferry's packages need not link
// those in: crypto/sha256 alone brings the FIPS 140 module's packages,
// hash/crc32 and golang.org/x/sys/cpu more. It imports only math/bits and
// ferry/internal/isa.
//
// On amd64 the SHA-256 block function uses the SHA extensions
// (sha256block_amd64.s) where isa.HasSHA, isa.HasSSSE3 and isa.HasSSE41
// say the CPU has them, and CRC-32C uses SSE4.2's CRC32 instruction
// (crc32c_amd64.s) where isa.HasSSE42; elsewhere, and under the purego
// build tag, portable Go runs. GODEBUG=cpu.sha=off or cpu.sse42=off turns
// the assembly off, as it does for the standard library.
package digest
