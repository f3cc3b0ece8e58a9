// Codec-domain decode of fractional TurboQuant-MSE (tq_mse_split.cpp) over the
// vector traits V of kivi_fp_simd.h: a per-ISA file (tq_mse_split_avx2.cpp,
// tq_mse_split_avx512.cpp) includes kivi_fp_simd.h under its ISA macro, then
// this header. Internal linkage only; never include it from baseline files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace turbokv::cpu::detail {
namespace {

/// W BITS-wide codes starting at byte p (code 0 at bit 0) -> 32-bit lanes.
template <int BITS>
inline V::I split_dom_codes(const std::uint8_t* p) {
#if defined(TURBOKV_LB_AVX2)
  if constexpr (BITS == 3) {  // V::codes<3> would reload a 3-byte memcpy through the stack
    std::uint16_t a;
    std::memcpy(&a, p, 2);
    const std::uint32_t w = a | (static_cast<std::uint32_t>(p[2]) << 16);
    const V::I sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), sh), _mm256_set1_epi32(7));
  }
#endif
  return V::template codes<BITS>(p, V::W);
}

/// y[dim] = norm * cb[codes] of one part of one token.
template <int BITS>
inline void split_dom_part(const SplitPart& part, float norm, const std::uint8_t* codes, float* y) {
  constexpr int W = V::W;
  const V::F nv = V::set1(norm);
  for (int k = 0; k < part.dim; k += W)
    V::store(y + k, V::mul(nv, V::lut16(split_dom_codes<BITS>(codes + k * BITS / 8), part.cb)));
}

template <int BH, int BL>
void split_domain_t(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                    float* y) {
  const SplitPart &a = p.part[0], &b = p.part[1];
  const std::size_t d = static_cast<std::size_t>(a.dim + b.dim);
  const std::uint8_t* sc = block + n * p.row_bytes;
  for (std::size_t t = t0; t < t1; ++t) {
    const std::uint8_t* row = block + t * p.row_bytes;
    float* yt = y + (t - t0) * d;
    split_dom_part<BH>(a, half_bits_to_float(load_u16(sc + 4 * t)), row + a.code_offset, yt + a.state_offset);
    split_dom_part<BL>(b, half_bits_to_float(load_u16(sc + 4 * t + 2)), row + b.code_offset, yt + b.state_offset);
  }
}

/// y[(t - t0) * d + i]: the codec domain of tokens [t0, t1): per part p,
/// norm_{t,p} * c_p[codes_{t,p}] at the part's state offset (both parts' rotated domains).
inline void split_decode_domain(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                                std::size_t t1, float* y) {
  switch (p.part[1].bits) {
    case 1: split_domain_t<2, 1>(p, block, n, t0, t1, y); break;
    case 2: split_domain_t<3, 2>(p, block, n, t0, t1, y); break;
    default: split_domain_t<4, 3>(p, block, n, t0, t1, y); break;
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail
