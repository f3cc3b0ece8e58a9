// AVX2 kernels (AVX2, FMA, F16C, BMI2). Compiled with its own flags
// (CMakeLists.txt); called only when simd_level() is kAvx2.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels.h"

namespace turbokv::cpu::detail {
namespace avx2 {

struct T {
  static constexpr int W = 8;
  static constexpr bool kNeedWide = true;  // vpermps looks up 8 entries: 16-entry books need two + a blend
  static constexpr int kScoreHeads = 4;
  static constexpr int sc(int gh) { return gh == 1 ? 8 : gh == 2 ? 4 : 2; }
  using F = __m256;
  using I = __m256i;

  static F zero() { return _mm256_setzero_ps(); }
  static I zeroi() { return _mm256_setzero_si256(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static I loadi(const std::int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void storei(std::int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  static float hmax(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F tail(F v, int cnt, float fill) {
    if (cnt >= W) return v;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), lane));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, keep);
  }
  static I srl(I v, int n) { return _mm256_srl_epi32(v, _mm_cvtsi32_si128(n)); }
  static I srlv(I v, I n) { return _mm256_srlv_epi32(v, n); }
  /// Lane i: b where mask lane i is all ones, else a (mask lanes are 0 or ~0).
  static I selecti(I mask, I a, I b) { return _mm256_blendv_epi8(a, b, mask); }
  static F select(I mask, F a, F b) { return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(mask)); }
  template <int N>
  static I srli(I v) {
    if constexpr (N == 0) return v; else return _mm256_srli_epi32(v, N);
  }
  template <bool WIDE>
  static F lut(I idx, F lo, F hi) {
    if constexpr (WIDE) {
      const __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
      return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    } else {
      return _mm256_permutevar8x32_ps(lo, idx);
    }
  }
  static I load_u8(const std::uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  /// 8 bytes -> their values as fp32 (exact).
  static F from_u8(const std::uint8_t* p) { return _mm256_cvtepi32_ps(load_u8(p)); }
  /// 8 OCP e4m3 bytes -> their values times 2^-8, exactly (see the AVX-512 traits).
  static F from_e4m3(const std::uint8_t* p) {
    const __m128i w = _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 8);
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(w, 1), _mm_set1_epi16(static_cast<short>(0xBF80))));
  }
  static F from_f16(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F from_bf16(const std::uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }

  template <int BITS>
  static constexpr int group_bytes() { return BITS == 4 ? 32 : BITS == 2 ? 16 : BITS == 1 ? 8 : 24; }
  template <int BITS>
  static I groups(const std::uint8_t* p) {
    if constexpr (BITS == 4) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    } else if constexpr (BITS == 2) {
      return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else if constexpr (BITS == 1) {
      return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    } else {
      // bytes 0..15 in the low lane, bytes 8..23 in the high lane; group j = bytes 3j..3j+2.
      const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 8),
                                            reinterpret_cast<const __m128i*>(p));
      const __m256i idx = _mm256_setr_epi8(0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11,  //
                                           4, 5, 6, 6, 7, 8, 9, 9, 10, 11, 12, 12, 13, 14, 15, 15);
      return _mm256_shuffle_epi8(v, idx);
    }
  }

  // ---- encode (mul then add: no FMA in the code path)
  static float sumsq8(const float* x, int d) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
  }
  static F fwht_lane(F x, int h) {
    const F sum = _mm256_add_ps(x, h == 1 ? _mm256_permute_ps(x, 0xB1)
                                   : h == 2 ? _mm256_permute_ps(x, 0x4E)
                                            : _mm256_permute2f128_ps(x, x, 1));
    const F s = h == 1 ? _mm256_permute_ps(x, 0xB1) : h == 2 ? _mm256_permute_ps(x, 0x4E) : _mm256_permute2f128_ps(x, x, 1);
    const F diff = _mm256_sub_ps(s, x);
    switch (h) {
      case 1: return _mm256_blend_ps(sum, diff, 0xAA);
      case 2: return _mm256_blend_ps(sum, diff, 0xCC);
      default: return _mm256_blend_ps(sum, diff, 0xF0);
    }
  }
  static I quantize(F t, const TqState& st) {
    I code = _mm256_setzero_si256();
    for (int k = 0; k < st.nbnd; ++k)
      code = _mm256_sub_epi32(code, _mm256_castps_si256(_mm256_cmp_ps(t, _mm256_set1_ps(st.bnd16[k]), _CMP_GT_OQ)));
    return code;
  }
  /// Bit i = (lane i of t > b) (the 1-bit quantize: one boundary).
  static std::uint8_t gt_bits(F t, float b) {
    return static_cast<std::uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(t, _mm256_set1_ps(b), _CMP_GT_OQ)));
  }
  static void store_codes_u8(std::uint8_t* p, I code) {
    const __m256i w = _mm256_packus_epi32(code, code);
    const __m256i b = _mm256_packus_epi16(w, w);
    const std::uint32_t lo = static_cast<std::uint32_t>(_mm256_cvtsi256_si32(b));
    const std::uint32_t hi = static_cast<std::uint32_t>(_mm256_extract_epi32(b, 4));
    std::memcpy(p, &lo, 4);
    std::memcpy(p + 4, &hi, 4);
  }

  // ---- attention
  static bool any_gt(F v, float m) {
    return _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(m), _CMP_GT_OQ)) != 0;
  }
  /// In-place 8 x 8 transpose of 32-bit elements.
  static void transpose(I* r) {
    I t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int a = 0; a < 2; ++a) {
      u[4 * a + 0] = _mm256_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
      u[4 * a + 1] = _mm256_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
      u[4 * a + 2] = _mm256_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
      u[4 * a + 3] = _mm256_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    for (int b = 0; b < 4; ++b) {
      r[b] = _mm256_permute2x128_si256(u[b], u[4 + b], 0x20);
      r[b + 4] = _mm256_permute2x128_si256(u[b], u[4 + b], 0x31);
    }
  }
  static int slot(int t) { return t; }
  static F reduce_tokens(const float* p) {
    const F t0 = _mm256_hadd_ps(load(p), load(p + 8)), t1 = _mm256_hadd_ps(load(p + 16), load(p + 24));
    const F t2 = _mm256_hadd_ps(load(p + 32), load(p + 40)), t3 = _mm256_hadd_ps(load(p + 48), load(p + 56));
    const F u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  }
  static F exp(F x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
    const F n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    F y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  static std::uint64_t stream(const std::uint8_t* p, std::size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
      a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
      a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
      a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
      a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    alignas(32) std::uint64_t w[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(w), a);
    std::uint64_t r = w[0] ^ w[1] ^ w[2] ^ w[3];
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t v;
      std::memcpy(&v, p + i, 8);
      r ^= v;
    }
    for (; i < bytes; ++i) r ^= p[i];
    return r;
  }
};

}  // namespace avx2
}  // namespace turbokv::cpu::detail
#define KNS avx2
#include "kernels_simd.h"
#undef KNS

namespace turbokv::cpu::detail {
const Kernels& avx2_kernels() { return avx2::table(); }
}  // namespace turbokv::cpu::detail
