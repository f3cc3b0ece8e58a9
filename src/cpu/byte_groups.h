// Byte-group bit packing of the per-ISA CPU kernels (BMI2 pext / pdep): groups of 8 codes of BITS
// bits are BITS whole bytes of the LSB-first stream (turbokv/pack.h), one code per byte unpacked.
// Include only from headers compiled with the AVX2 / AVX-512 files' flags (kernels_simd.h,
// rvq_simd.h); everything is in an unnamed namespace so that no inline function compiled with
// AVX-512 flags can be picked by the linker for an AVX2 caller.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace turbokv::cpu::detail {
namespace {

inline constexpr std::uint64_t kByteMask[9] = {0,
                                               0x0101010101010101ull,
                                               0x0303030303030303ull,
                                               0x0707070707070707ull,
                                               0x0f0f0f0f0f0f0f0full,
                                               0x1f1f1f1f1f1f1f1full,
                                               0x3f3f3f3f3f3f3f3full,
                                               0x7f7f7f7f7f7f7f7full,
                                               0xffffffffffffffffull};

/// Packs n codes (one per byte, n a multiple of 8) into the LSB-first stream
/// (turbokv/pack.h): each group of 8 codes is BITS whole bytes.
template <int BITS>
inline void pack_groups(const std::uint8_t* cb, int n, std::uint8_t* out) {
  for (int g = 0; g < n / 8; ++g) {
    std::uint64_t v;
    std::memcpy(&v, cb + 8 * g, 8);
    const std::uint64_t p = _pext_u64(v, kByteMask[BITS]);
    std::memcpy(out + g * BITS, &p, BITS);  // little-endian host
  }
}

/// The N (1..8) little-endian bytes at p, zero-extended, loaded straight into a
/// register: power-of-two pieces combined by shifts. (A memcpy of 3, 5, 6 or 7
/// bytes into a zeroed uint64_t compiles to narrow stores into a stack slot and
/// one wide reload, a store-forwarding stall on every group.)
template <int N>
inline std::uint64_t load_le(const std::uint8_t* p) {
  static_assert(N >= 1 && N <= 8);
  if constexpr (N == 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  } else {
    std::uint64_t v = 0;
    int o = 0;
    if constexpr ((N & 4) != 0) {
      std::uint32_t a;
      std::memcpy(&a, p, 4);
      v = a;
      o = 4;
    }
    if constexpr ((N & 2) != 0) {
      std::uint16_t b;
      std::memcpy(&b, p + o, 2);
      v |= static_cast<std::uint64_t>(b) << (8 * o);
      o += 2;
    }
    if constexpr ((N & 1) != 0) v |= static_cast<std::uint64_t>(p[o]) << (8 * o);
    return v;
  }
}

/// Unpacks ceil(n / 8) groups of 8 BITS-wide codes into one byte each; reads
/// BITS * ceil(n / 8) bytes of `packed` (callers pad short streams).
template <int BITS>
inline void unpack_groups(const std::uint8_t* packed, int n, std::uint8_t* cb) {
  for (int g = 0; g < (n + 7) / 8; ++g) {
    const std::uint64_t v = load_le<BITS>(packed + g * BITS);
    const std::uint64_t u = _pdep_u64(v, kByteMask[BITS]);
    std::memcpy(cb + 8 * g, &u, 8);
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail
