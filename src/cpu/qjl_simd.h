// QJL kernels written once over a vector-traits class and stamped out per
// ISA: src/cpu/qjl_avx2.cpp and qjl_avx512.cpp include this header under their
// own compile flags (CMakeLists.txt), and tq_prod_simd.h builds on its traits.
// Never include it from baseline files. Everything is in an unnamed namespace
// so that no inline function compiled with AVX-512 flags can be picked by the
// linker for an AVX2 caller. Operation order: qjl_kernels.h.
//
// Traits V (QjlAvx2: W = 8, QjlAvx512: W = 16; DW doubles per D vector):
// fp32 F and fp64 D vectors, load/store (loada: aligned) and add/sub/mul (the
// separately rounded ops) overloaded for both, zero/set1 and dzero/dset1, hsum
// (the ISA's fixed reduction order), cvt_load / store_cvt (DW floats <-> DW
// doubles), ge0_mask (bit i = lane i >= 0) and the sign-bit selects:
// select(bits, neg, pos) takes pos in lane i when bit i of the W / 8 bytes at
// bits is set. AVX2 broadcasts a byte and shifts row i's bit into lane i's
// sign bit for blendv; AVX-512 uses the bytes as a mask register (16 rows =
// 2 bytes = one __mmask16, LSB-first as turbokv/pack.h).
// With W = 16 the last 8 rows of m may be half a vector: select_byte, add_lo
// (lanes 0..7 only) and zero_hi (lanes 8..15 zeroed) handle that chunk.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "qjl_kernels.h"

namespace turbokv::cpu::detail {
namespace {

inline float half_at(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

/// fn(std::integral_constant<int, c>) for the c in [Lo, Hi] equal to v (none: Hi): a runtime
/// count or width as a template argument (register-block widths 1..8, code widths 0..3).
template <int Lo, int Hi, class Fn>
inline void by_value(int v, Fn&& fn) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((v == Lo + I || Lo + I == Hi ? (fn(std::integral_constant<int, Lo + I>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, Hi - Lo + 1>{});
}
/// fn(std::integral_constant<int, nb>) for nb in 1..8 (larger: 8): the register-block
/// width of the blocked loops below.
template <class Fn>
inline void by_nb(int nb, Fn&& fn) {
  by_value<1, 8>(nb, fn);
}

struct QjlAvx2 {
  static constexpr const char* kIsa = "avx2";
  static constexpr int W = 8;
  static constexpr int DW = 4;
  using F = __m256;
  using D = __m256d;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F loada(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void storea(float* p, F v) { _mm256_store_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static float hsum(F a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static unsigned ge0_mask(F v) {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ)));
  }
  /// Lane i: pos if bit i of bits[0] is set, else neg.
  static F select(const std::uint8_t* bits, F neg, F pos) {
    const __m256i shl = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
    return _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(_mm256_sllv_epi32(_mm256_set1_epi32(bits[0]), shl)));
  }
  static D dzero() { return _mm256_setzero_pd(); }
  static D dset1(double x) { return _mm256_set1_pd(x); }
  static D load(const double* p) { return _mm256_loadu_pd(p); }
  static D loada(const double* p) { return _mm256_load_pd(p); }
  static void store(double* p, D v) { _mm256_storeu_pd(p, v); }
  static D add(D a, D b) { return _mm256_add_pd(a, b); }
  static D sub(D a, D b) { return _mm256_sub_pd(a, b); }
  static D mul(D a, D b) { return _mm256_mul_pd(a, b); }
  static D cvt_load(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
  static void store_cvt(float* p, D v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
};

#ifdef __AVX512F__
struct QjlAvx512 {
  static constexpr const char* kIsa = "avx512";
  static constexpr int W = 16;
  static constexpr int DW = 8;
  using F = __m512;
  using D = __m512d;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F loada(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void storea(float* p, F v) { _mm512_store_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static float hsum(F a) { return _mm512_reduce_add_ps(a); }
  static unsigned ge0_mask(F v) { return _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ); }
  /// Lane i: pos if bit i of the 2 bytes at bits is set, else neg.
  static F select(const std::uint8_t* bits, F neg, F pos) {
    std::uint16_t v;
    std::memcpy(&v, bits, 2);
    return _mm512_mask_blend_ps(static_cast<__mmask16>(v), neg, pos);
  }
  /// The same from one byte (8 rows); lanes 8..15 get neg.
  static F select_byte(std::uint8_t b, F neg, F pos) {
    return _mm512_mask_blend_ps(static_cast<__mmask16>(b), neg, pos);
  }
  /// a + v in lanes 0..7, a in lanes 8..15.
  static F add_lo(F a, F v) { return _mm512_mask_add_ps(a, 0x00ff, a, v); }
  /// v in lanes 0..7, 0 in lanes 8..15.
  static F zero_hi(F v) { return _mm512_maskz_mov_ps(0x00ff, v); }
  static D dzero() { return _mm512_setzero_pd(); }
  static D dset1(double x) { return _mm512_set1_pd(x); }
  static D load(const double* p) { return _mm512_loadu_pd(p); }
  static D loada(const double* p) { return _mm512_load_pd(p); }
  static void store(double* p, D v) { _mm512_storeu_pd(p, v); }
  static D add(D a, D b) { return _mm512_add_pd(a, b); }
  static D sub(D a, D b) { return _mm512_sub_pd(a, b); }
  static D mul(D a, D b) { return _mm512_mul_pd(a, b); }
  static D cvt_load(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
  static void store_cvt(float* p, D v) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(v)); }
};
#endif

template <class V>
struct QjlSimd {
  using F = typename V::F;
  using D = typename V::D;
  static constexpr int W = V::W;
  static constexpr int DW = V::DW;
  static constexpr int kChunkBytes = W / 8;  ///< sign bytes of one W-row chunk

  /// 8-wide on every ISA: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
  static float sumsq(const float* x, int d) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
  }

  template <int NB>
  static void colacc_block(const float* at, std::size_t ldt, const float* x, int nj, float* out) {
    F a[NB];
    for (int b = 0; b < NB; ++b) a[b] = V::zero();
    for (int j = 0; j < nj; ++j) {
      const F xj = V::set1(x[j]);
      const float* col = at + static_cast<std::size_t>(j) * ldt;
      for (int b = 0; b < NB; ++b) a[b] = V::add(a[b], V::mul(V::load(col + W * b), xj));
    }
    for (int b = 0; b < NB; ++b) V::store(out + W * b, a[b]);
  }

  static void colacc(const float* at, std::size_t ldt, int rows, const float* x, int nj, float* out) {
    for (int i0 = 0; i0 < rows; i0 += 8 * W)
      by_nb(std::min(8, (rows - i0) / W),
            [&](auto nb) { colacc_block<decltype(nb)::value>(at + i0, ldt, x, nj, out + i0); });
  }

  static void signs(const SketchState& sk, const float* r, std::uint8_t* out) {
    alignas(64) float acc[kQjlMaxRows];
    colacc(sk.st.data(), static_cast<std::size_t>(sk.mp), sk.mp, r, sk.d, acc);
    int i = 0;
    for (; i + W <= sk.m; i += W) {
      const unsigned k = V::ge0_mask(V::loada(acc + i));
      std::memcpy(out + i / 8, &k, kChunkBytes);  // little-endian host
    }
    if (i < sk.m) out[i / 8] = static_cast<std::uint8_t>(V::ge0_mask(V::loada(acc + i)));
  }

  static void encode(const SketchState& sk, const float* x, std::size_t count, std::uint8_t* codes, float* norms) {
    for (std::size_t t = 0; t < count; ++t) {
      const float* xt = x + t * static_cast<std::size_t>(sk.d);
      norms[t] = std::sqrt(sumsq(xt, sk.d));
      signs(sk, xt, codes + t * sk.sign_bytes);
    }
  }

  template <int NB>
  static void rowcomb_block(const float* a, std::size_t lda, int rows, const double* coef, double* y) {
    D acc[NB];
    for (int b = 0; b < NB; ++b) acc[b] = V::load(y + DW * b);
    for (int i = 0; i < rows; ++i) {
      const D c = V::dset1(coef[i]);
      const float* row = a + static_cast<std::size_t>(i) * lda;
      for (int b = 0; b < NB; ++b) acc[b] = V::add(acc[b], V::mul(c, V::cvt_load(row + DW * b)));
    }
    for (int b = 0; b < NB; ++b) V::store(y + DW * b, acc[b]);
  }

  static void rowcomb(const float* a, std::size_t lda, int rows, int cols, const double* coef, double* y) {
    for (int j0 = 0; j0 < cols; j0 += 8 * DW)
      by_nb(std::min(8, (cols - j0) / DW),
            [&](auto nb) { rowcomb_block<decltype(nb)::value>(a + j0, lda, rows, coef, y + j0); });
  }

  static void decode(const SketchState& sk, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                     float* out) {
    const int d = sk.d;
    alignas(64) double coef[kQjlMaxRows];
    alignas(64) double y[kQjlMaxDim];
    for (std::size_t t = 0; t < count; ++t) {
      const std::uint8_t* bits = codes + t * sk.sign_bytes;
      const double scale = sk.kappa * static_cast<double>(half_at(norms16 + 2 * t));
      for (int i = 0; i < sk.m; ++i) coef[i] = ((bits[i >> 3] >> (i & 7)) & 1) ? scale : -scale;
      std::fill(y, y + d, 0.0);
      rowcomb(sk.s.data(), static_cast<std::size_t>(d), sk.m, d, coef, y);
      float* o = out + t * static_cast<std::size_t>(d);
      for (int j = 0; j < d; j += DW) V::store_cvt(o + j, V::loada(y + j));
    }
  }

  template <int NB>
  static void project_block(const float* at, std::size_t ldt, const double* q, int nj, float* out) {
    D a[NB];
    for (int b = 0; b < NB; ++b) a[b] = V::dzero();
    for (int j = 0; j < nj; ++j) {
      const D qj = V::dset1(q[j]);
      const float* col = at + static_cast<std::size_t>(j) * ldt;
      for (int b = 0; b < NB; ++b) a[b] = V::add(a[b], V::mul(V::cvt_load(col + DW * b), qj));
    }
    for (int b = 0; b < NB; ++b) V::store_cvt(out + DW * b, a[b]);
  }

  static void project(const SketchState& sk, const double* q, float* sq) {
    const std::size_t ldt = static_cast<std::size_t>(sk.mp);
    for (int i0 = 0; i0 < sk.mp; i0 += 8 * DW)
      by_nb(std::min(8, (sk.mp - i0) / DW),
            [&](auto nb) { project_block<decltype(nb)::value>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); });
  }

  /// sum_i (bit_i ? sq_i : -sq_i): rows [0, full) in whole W-row chunks (full a multiple of W),
  /// then (half) 8 rows whose other lanes pick nsq = -0. Chunks alternate between two accumulators.
  static float signed_sum(const float* sq, const float* nsq, const std::uint8_t* bits, int full, bool half) {
    F a0 = V::zero(), a1 = V::zero();
    int i = 0;
    for (; i + 2 * W <= full; i += 2 * W) {
      a0 = V::add(a0, V::select(bits + i / 8, V::loada(nsq + i), V::loada(sq + i)));
      a1 = V::add(a1, V::select(bits + i / 8 + kChunkBytes, V::loada(nsq + i + W), V::loada(sq + i + W)));
    }
    if (i < full) {
      a0 = V::add(a0, V::select(bits + i / 8, V::loada(nsq + i), V::loada(sq + i)));
      i += W;
    }
    if constexpr (W > 8) {
      if (half) a1 = V::add(a1, V::select_byte(bits[i / 8], V::loada(nsq + i), V::loada(sq + i)));
    }
    return V::hsum(V::add(a0, a1));
  }

  static void sign_sums(const SketchState& sk, const float* sq, const std::uint8_t* bits, std::size_t stride,
                        std::size_t count, float* out) {
    alignas(64) float ps[kQjlMaxRows], ns[kQjlMaxRows];
    const int rows = W * ((sk.m + W - 1) / W);  // whole chunks: m (W = 8) or mp (W = 16)
    for (int i = 0; i < rows; i += W) {
      const F v = V::load(sq + i);
      V::storea(ps + i, v);
      V::storea(ns + i, V::sub(V::zero(), v));
    }
    if constexpr (W > 8) {
      for (int i = sk.m; i < rows; ++i) ps[i] = 0.0f, ns[i] = -0.0f;
    }
    const int full = W * (sk.m / W);
    const bool half = (sk.m % W) != 0;
    for (std::size_t t = 0; t < count; ++t) out[t] = signed_sum(ps, ns, bits + t * stride, full, half);
  }

  static void scores(const SketchState& sk, const float* sq, const std::uint8_t* block, std::size_t n, std::size_t t0,
                     std::size_t t1, float* out) {
    sign_sums(sk, sq, block + t0 * sk.sign_bytes, sk.sign_bytes, t1 - t0, out);
    const std::uint8_t* scal = block + n * sk.sign_bytes;
    for (std::size_t t = t0; t < t1; ++t) out[t - t0] *= sk.kappa_f * half_at(scal + 2 * t);
  }

  template <int NB>
  static void accumulate_block(const SketchState& sk, const std::uint8_t* bits0, std::size_t stride,
                               std::size_t count, const float* wg, int c0, float* acc) {
    F a[NB];
    for (int b = 0; b < NB; ++b) a[b] = V::load(acc + W * (c0 + b));
    const int nfull = sk.m / W;
    for (std::size_t t = 0; t < count; ++t) {
      const F pw = V::set1(wg[t]), nw = V::set1(-wg[t]);
      const std::uint8_t* bits = bits0 + t * stride + kChunkBytes * c0;
      for (int b = 0; b < NB; ++b) {
        if (W == 8 || c0 + b < nfull) {
          a[b] = V::add(a[b], V::select(bits + kChunkBytes * b, nw, pw));
        } else if constexpr (W > 8) {  // the last 8 rows: one byte; lanes 8..15 (padding) untouched
          a[b] = V::add_lo(a[b], V::select_byte(bits[kChunkBytes * b], nw, pw));
        }
      }
    }
    for (int b = 0; b < NB; ++b) V::store(acc + W * (c0 + b), a[b]);
  }

  static void sign_accumulate(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                              const float* wg, float* acc) {
    const int nc = (sk.m + W - 1) / W;
    for (int c0 = 0; c0 < nc; c0 += 8)
      by_nb(std::min(8, nc - c0),
            [&](auto nb) { accumulate_block<decltype(nb)::value>(sk, bits, stride, count, wg, c0, acc); });
  }

  static void accumulate(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0,
                         std::size_t t1, const float* w, float* acc) {
    const std::uint8_t* scal = block + n * sk.sign_bytes;
    for (std::size_t b0 = t0; b0 < t1; b0 += 256) {  // weights w * kappa * ||k||, 256 tokens at a time
      const std::size_t b1 = std::min(t1, b0 + 256);
      alignas(64) float wg[256];
      for (std::size_t t = b0; t < b1; ++t) wg[t - b0] = w[t - t0] * sk.kappa_f * half_at(scal + 2 * t);
      sign_accumulate(sk, block + b0 * sk.sign_bytes, sk.sign_bytes, b1 - b0, wg, acc);
    }
  }

  static void sign_expand(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                          const float* sc, float* y, std::size_t ystride) {
    const int nfull = sk.m / W;
    const bool half = (sk.m % W) != 0;
    for (std::size_t t = 0; t < count; ++t) {
      const F pv = V::set1(sc[t]), nv = V::set1(-sc[t]);
      const std::uint8_t* b = bits + t * stride;
      float* o = y + t * ystride;
      for (int c = 0; c < nfull; ++c) V::store(o + W * c, V::select(b + kChunkBytes * c, nv, pv));
      if (half) {  // the last 8 rows: one byte; lanes 8..15 (padding) zero
        if constexpr (W > 8) V::store(o + W * nfull, V::zero_hi(V::select_byte(b[kChunkBytes * nfull], nv, pv)));
      } else if (W == 8 && sk.mp > sk.m) {  // W = 8: mp - m is 0 or 8, one zero vector
        V::store(o + sk.m, V::zero());
      }
    }
  }

  static void decode_domain(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0,
                            std::size_t t1, float* y) {
    const std::uint8_t* scal = block + n * sk.sign_bytes;
    const std::size_t mp = static_cast<std::size_t>(sk.mp);
    alignas(64) float sc[256];
    for (std::size_t b0 = t0; b0 < t1; b0 += 256) {
      const std::size_t b1 = std::min(t1, b0 + 256);
      for (std::size_t t = b0; t < b1; ++t) sc[t - b0] = sk.kappa_f * half_at(scal + 2 * t);
      sign_expand(sk, block + b0 * sk.sign_bytes, sk.sign_bytes, b1 - b0, sc, y + (b0 - t0) * mp, mp);
    }
  }

  static const QjlKernels& table() {
    static const QjlKernels k{V::kIsa,  encode,    decode,    project,         scores,      accumulate, rowcomb,
                              signs,    sumsq,     colacc,    sign_sums,       sign_accumulate, sign_expand,
                              decode_domain};
    return k;
  }
};

}  // namespace
}  // namespace turbokv::cpu::detail
