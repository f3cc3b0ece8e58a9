// The AVX-512 vector traits `avx512::T` that kernels_simd.h is stamped out
// over (see kernels_simd.h for what T provides). ISA code: include only from
// files compiled with the AVX-512 flags (kernels_avx512.cpp,
// tq_mse_bf16_avx512.cpp). T sits in an unnamed namespace, so each including
// file has its own copy and files built with different flags never share one.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels.h"

namespace turbokv::cpu::detail {
namespace avx512 {
namespace {

struct T {
  static constexpr int W = 16;
  static constexpr bool kNeedWide = false;  // vpermps looks up 16 entries directly
  static constexpr int kScoreHeads = 8;
  static constexpr int sc(int gh) { return gh <= 2 ? 8 : 4; }
  using F = __m512;
  using I = __m512i;

  static F zero() { return _mm512_setzero_ps(); }
  static I zeroi() { return _mm512_setzero_si512(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static I loadi(const std::int32_t* p) { return _mm512_loadu_si512(p); }
  static void storei(std::int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }
  static float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F tail(F v, int cnt, float fill) {
    if (cnt >= W) return v;
    return _mm512_mask_blend_ps(static_cast<__mmask16>((1u << cnt) - 1u), _mm512_set1_ps(fill), v);
  }
  static I srl(I v, int n) { return _mm512_srl_epi32(v, _mm_cvtsi32_si128(n)); }
  static I srlv(I v, I n) { return _mm512_srlv_epi32(v, n); }
  /// Lane i: b where mask lane i is non-zero, else a.
  static I selecti(I mask, I a, I b) { return _mm512_mask_blend_epi32(_mm512_test_epi32_mask(mask, mask), a, b); }
  static F select(I mask, F a, F b) { return _mm512_mask_blend_ps(_mm512_test_epi32_mask(mask, mask), a, b); }
  template <int N>
  static I srli(I v) {
    if constexpr (N == 0) return v; else return _mm512_srli_epi32(v, N);
  }
  template <bool WIDE>
  static F lut(I idx, F lo, F) { return _mm512_permutexvar_ps(idx, lo); }
  static I load_u8(const std::uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  /// 16 bytes -> their values as fp32 (exact).
  static F from_u8(const std::uint8_t* p) { return _mm512_cvtepi32_ps(load_u8(p)); }
  /// 16 OCP e4m3 bytes -> their values times 2^-8, exactly: each byte s eeee mmm becomes the fp16
  /// s 0 eeee mmm 0000000 (bias 15 instead of 7, subnormals included), then fp32.
  static F from_e4m3(const std::uint8_t* p) {
    const __m256i w = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 8);
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(w, 1), _mm256_set1_epi16(static_cast<short>(0xBF80))));
  }
  static F from_f16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F from_bf16(const std::uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }

  template <int BITS>
  static constexpr int group_bytes() { return BITS == 4 ? 64 : BITS == 2 ? 32 : BITS == 1 ? 16 : 64; }
  template <int BITS>
  static I groups(const std::uint8_t* p) {
    if constexpr (BITS == 4) {
      return _mm512_loadu_si512(p);
    } else if constexpr (BITS == 2) {
      return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else if constexpr (BITS == 1) {
      return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      // group j = bytes 3j, 3j+1, 3j+2 -> 32-bit lane j (the 4th byte repeats 3j+2;
      // only the low 24 bits matter, the codebook is replicated to 16 entries).
      const __m512i idx = _mm512_set_epi8(47, 47, 46, 45, 44, 44, 43, 42, 41, 41, 40, 39, 38, 38, 37, 36,  //
                                          35, 35, 34, 33, 32, 32, 31, 30, 29, 29, 28, 27, 26, 26, 25, 24,  //
                                          23, 23, 22, 21, 20, 20, 19, 18, 17, 17, 16, 15, 14, 14, 13, 12,  //
                                          11, 11, 10, 9, 8, 8, 7, 6, 5, 5, 4, 3, 2, 2, 1, 0);
      return _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(p));
    }
  }

  // ---- encode (mul then add: no FMA in the code path)
  static float sumsq8(const float* x, int d) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // a_i + a_{i+4}
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));  // (b0 + b2), (b1 + b3)
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
  }
  static F fwht_lane(F x, int h) {
    F s;
    __mmask16 m;
    switch (h) {
      case 1: s = _mm512_permute_ps(x, 0xB1); m = 0xAAAA; break;
      case 2: s = _mm512_permute_ps(x, 0x4E); m = 0xCCCC; break;
      case 4: s = _mm512_shuffle_f32x4(x, x, 0xB1); m = 0xF0F0; break;
      default: s = _mm512_shuffle_f32x4(x, x, 0x4E); m = 0xFF00; break;
    }
    return _mm512_mask_sub_ps(_mm512_add_ps(x, s), m, s, x);
  }
  static I quantize(F t, const TqState& st) {
    // Binary search over the sorted boundaries (padded with +inf): the number
    // of boundaries strictly below t.
    const F b = _mm512_load_ps(st.bnd16);
    I code = _mm512_setzero_si512();
    for (int step = 1 << (st.bits - 1); step >= 1; step >>= 1) {
      const F bv = _mm512_permutexvar_ps(_mm512_add_epi32(code, _mm512_set1_epi32(step - 1)), b);
      const __mmask16 gt = _mm512_cmp_ps_mask(t, bv, _CMP_GT_OQ);
      code = _mm512_mask_add_epi32(code, gt, code, _mm512_set1_epi32(step));
    }
    return code;
  }
  static void store_codes_u8(std::uint8_t* p, I code) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(code));
  }
  /// Bit i = (lane i of t > b) (the 1-bit quantize: one boundary).
  static std::uint16_t gt_bits(F t, float b) { return _mm512_cmp_ps_mask(t, _mm512_set1_ps(b), _CMP_GT_OQ); }

  // ---- attention
  static bool any_gt(F v, float m) { return _mm512_cmp_ps_mask(v, _mm512_set1_ps(m), _CMP_GT_OQ) != 0; }
  /// In-place 16 x 16 transpose of 32-bit elements (r[i] lane j -> r[j] lane i).
  static void transpose(I* r) {
    I t[16], u[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int a = 0; a < 4; ++a) {
      u[4 * a + 0] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
      u[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
      u[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
      u[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    // u[4a + b], 128-bit lane L: rows 4a..4a+3 of column 4L + b.
    for (int b = 0; b < 4; ++b) {
      const I v0 = _mm512_shuffle_i32x4(u[b], u[4 + b], 0x88), v1 = _mm512_shuffle_i32x4(u[b], u[4 + b], 0xDD);
      const I v2 = _mm512_shuffle_i32x4(u[8 + b], u[12 + b], 0x88), v3 = _mm512_shuffle_i32x4(u[8 + b], u[12 + b], 0xDD);
      r[b] = _mm512_shuffle_i32x4(v0, v2, 0x88);
      r[b + 8] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
      r[b + 4] = _mm512_shuffle_i32x4(v1, v3, 0x88);
      r[b + 12] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
  }
  static int slot(int t) { return (t & 3) * 4 + (t >> 2); }
  /// v: 16 vectors; token t's partial sums are at v[slot(t)]. Returns lane t = sum of them.
  static F reduce_tokens(const float* p) {
    F t8[8];
    for (int i = 0; i < 8; ++i) {
      const F a = load(p + (2 * i) * W), b = load(p + (2 * i + 1) * W);
      t8[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    F u[4];
    for (int i = 0; i < 4; ++i)
      u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t8[2 * i], t8[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(t8[2 * i], t8[2 * i + 1], 0xDD));
    const F p01 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    const F p23 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(p01, p23, 0x44), _mm512_shuffle_ps(p01, p23, 0xEE));
  }
  static F exp(F x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.72283f));
    const F n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    F y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
  }
  static std::uint64_t stream(const std::uint8_t* p, std::size_t bytes) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 256 <= bytes; i += 256) {
      a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(p + i));
      a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(p + i + 64));
      a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(p + i + 128));
      a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(p + i + 192));
    }
    const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    alignas(64) std::uint64_t w[8];
    _mm512_store_si512(w, a);
    std::uint64_t r = 0;
    for (auto v : w) r ^= v;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t v;
      std::memcpy(&v, p + i, 8);
      r ^= v;
    }
    for (; i < bytes; ++i) r ^= p[i];
    return r;
  }
};

}  // namespace
}  // namespace avx512
}  // namespace turbokv::cpu::detail
