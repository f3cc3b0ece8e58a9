// turbokv — the one definition of the packed bit format (all widths 1..8).
//
// Format ("LSB-first bit stream"): a sequence of n codes c[0..n), each `bits`
// wide (1 <= bits <= 8), is stored as a bit stream of n*bits bits in
// packed_bytes(n, bits) = ceil(n*bits/8) bytes. Code i occupies stream bits
// [i*bits, (i+1)*bits), its least significant bit first; stream bit j is bit
// (j % 8) of byte (j / 8). Unused high bits of the last byte are zero.
//
// Consequences: 1-bit packs 8 codes per byte (code i -> bit i%8), 2-bit 4 per
// byte, 4-bit 2 per byte (even code in the low nibble), 3-bit packs 8 codes in
// 3 bytes, 8-bit is one code per byte. The byte order never depends on SIMD
// width or GPU tile shape: every backend reads and writes exactly these bytes.
//
// These helpers are usable on host and device. The reference loops in
// src/ref/common.cpp (pack_bits, unpack_bits) validate arguments; the inline helpers assume valid input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "turbokv/half.h"

namespace turbokv {

/// Bytes that n codes of `bits` bits occupy: ceil(n*bits/8).
TURBOKV_HD constexpr std::size_t packed_bytes(std::size_t n, int bits) {
  return (n * static_cast<std::size_t>(bits) + 7) / 8;
}

/// Reads code i (bits wide) from a packed stream. Valid for 1 <= bits <= 8.
TURBOKV_HD std::uint32_t get_code(const std::uint8_t* packed, std::size_t i, int bits) {
  const std::size_t bit = i * static_cast<std::size_t>(bits);
  const std::size_t byte = bit >> 3;
  const unsigned shift = static_cast<unsigned>(bit & 7);
  std::uint32_t word = packed[byte];
  if (shift + static_cast<unsigned>(bits) > 8) word |= static_cast<std::uint32_t>(packed[byte + 1]) << 8;
  return (word >> shift) & ((1u << bits) - 1u);
}

/// Writes code i (bits wide; high bits of `code` above `bits` must be zero)
/// into a packed stream whose bytes were zeroed first.
TURBOKV_HD void put_code(std::uint8_t* packed, std::size_t i, int bits, std::uint32_t code) {
  const std::size_t bit = i * static_cast<std::size_t>(bits);
  const std::size_t byte = bit >> 3;
  const unsigned shift = static_cast<unsigned>(bit & 7);
  packed[byte] = static_cast<std::uint8_t>(packed[byte] | ((code << shift) & 0xffu));
  if (shift + static_cast<unsigned>(bits) > 8)
    packed[byte + 1] = static_cast<std::uint8_t>(packed[byte + 1] | (code >> (8 - shift)));
}

/**
 * Packs codes into the LSB-first bit stream (reference implementation).
 * codes: input, size n, each < 2^bits; out: output, size packed_bytes(n, bits).
 * Throws std::invalid_argument if bits is outside 1..8 or a code does not fit.
 */
void pack_bits(const std::uint8_t* codes, std::size_t n, int bits, std::uint8_t* out);

/**
 * Unpacks n codes from the LSB-first bit stream (reference implementation).
 * packed: input, size packed_bytes(n, bits); codes: output, size n.
 * Throws std::invalid_argument if bits is outside 1..8.
 */
void unpack_bits(const std::uint8_t* packed, std::size_t n, int bits, std::uint8_t* codes);

}  // namespace turbokv
