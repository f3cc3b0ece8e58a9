// TurboQuant-Prod kernels written once over a vector-traits class and stamped
// out per ISA: src/cpu/tq_prod_avx2.cpp and tq_prod_avx512.cpp include this
// header under their own compile flags (CMakeLists.txt). Never include it from
// baseline files. Everything is in an unnamed namespace (see qjl_simd.h). The
// QJL part runs on the QJL kernels of the same ISA (V::qjl()). Operation
// order: tq_prod_kernels.h.
//
// Traits V extend the QJL traits (qjl_simd.h) with: fma, I (32-bit lanes),
// codes<BITS>(p, k) (the BITS-bit codes of coordinates Wk..Wk+W-1 in the low
// bits of lanes 0..W-1, higher bits: neighbours), lut (the replicated codebook
// cb16 looked up by those low bits), quantize (number of boundaries strictly
// below each lane), store_codes (W codes as W bytes, aligned), widen_store (W
// floats -> W doubles, aligned), fwht_lane (F: the Hadamard stages of span < W,
// D: of span < DW, inside one register, ascending). AVX2 reads 8 codes from
// one broadcast 32-bit load shifted lane-wise (up to 3 bytes past a token's MSE
// codes); AVX-512 reads 16 by a lane-wise shift (1, 2 bits) or a VBMI
// multishift (3 bits) (up to 2 bytes past). A token's sign bytes and the
// block's scalars always follow its MSE codes.
#pragma once

#include "qjl_simd.h"
#include "tq_prod_kernels.h"

namespace turbokv::cpu::detail {
namespace {

struct ProdAvx2 : QjlAvx2 {
  using I = __m256i;
  static const QjlKernels& qjl() { return qjl_avx2_kernels(); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F load_cb(const float* cb16) { return _mm256_load_ps(cb16); }
  static F lut(F cbv, I c) { return _mm256_permutevar8x32_ps(cbv, c); }
  template <int BITS>
  static I codes(const std::uint8_t* p, int k) {
    std::uint32_t v;
    std::memcpy(&v, p + BITS * k, 4);
    constexpr int B = BITS;
    return _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)),
                             _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B));
  }
  static I quantize(F v, const float* bnd, int nb) {
    I c = _mm256_setzero_si256();
    for (int b = 0; b < nb; ++b)
      c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_set1_ps(bnd[b]), _CMP_GT_OQ)));
    return c;
  }
  static void store_codes(std::uint8_t* p, I c) {
    // byte 0 of each dword -> bytes 0..3 of each 128-bit lane
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
    const __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(c, pick), join);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(b8));
  }
  static void widen_store(double* y, F c) {
    _mm256_store_pd(y, _mm256_cvtps_pd(_mm256_castps256_ps128(c)));
    _mm256_store_pd(y + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1)));
  }
  template <int IMM>
  static F bfly(F v, __m256i idx) {
    const F p = _mm256_permutevar8x32_ps(v, idx);
    return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), IMM);
  }
  static F fwht_lane(F v) {  // stages 1, 2, 4
    v = bfly<0xaa>(v, _mm256_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6));
    v = bfly<0xcc>(v, _mm256_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5));
    return bfly<0xf0>(v, _mm256_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3));
  }
  static D fwht_lane(D v) {  // stages 1, 2
    D p = _mm256_permute_pd(v, 0x5);  // lanes 1, 0, 3, 2
    v = _mm256_blend_pd(_mm256_add_pd(v, p), _mm256_sub_pd(p, v), 0xa);
    p = _mm256_permute2f128_pd(v, v, 1);  // lanes 2, 3, 0, 1
    return _mm256_blend_pd(_mm256_add_pd(v, p), _mm256_sub_pd(p, v), 0xc);
  }
};

#ifdef __AVX512F__
struct ProdAvx512 : QjlAvx512 {
  using I = __m512i;
  static const QjlKernels& qjl() { return qjl_avx512_kernels(); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F load_cb(const float* cb16) { return _mm512_load_ps(cb16); }
  static F lut(F cbv, I c) { return _mm512_permutexvar_ps(c, cbv); }
  template <int BITS>
  static I codes(const std::uint8_t* p, int k) {
    if constexpr (BITS == 3) {
      std::uint64_t v;
      std::memcpy(&v, p + 6 * k, 8);
      const __m512i ctrl = _mm512_set_epi8(45, 45, 45, 45, 42, 42, 42, 42, 39, 39, 39, 39, 36, 36, 36, 36,  //
                                           33, 33, 33, 33, 30, 30, 30, 30, 27, 27, 27, 27, 24, 24, 24, 24,  //
                                           21, 21, 21, 21, 18, 18, 18, 18, 15, 15, 15, 15, 12, 12, 12, 12,  //
                                           9, 9, 9, 9, 6, 6, 6, 6, 3, 3, 3, 3, 0, 0, 0, 0);
      return _mm512_multishift_epi64_epi8(ctrl, _mm512_set1_epi64(static_cast<long long>(v)));
    } else {
      std::uint32_t v;
      std::memcpy(&v, p + 2 * BITS * k, 4);
      constexpr int B = BITS;
      const __m512i sh = _mm512_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B, 8 * B, 9 * B, 10 * B,
                                           11 * B, 12 * B, 13 * B, 14 * B, 15 * B);
      return _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(v)), sh);
    }
  }
  static I quantize(F v, const float* bnd, int nb) {
    const __m512i one = _mm512_set1_epi32(1);
    I c = _mm512_setzero_si512();
    for (int b = 0; b < nb; ++b)
      c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, _mm512_set1_ps(bnd[b]), _CMP_GT_OQ), c, one);
    return c;
  }
  static void store_codes(std::uint8_t* p, I c) {
    _mm_store_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(c));
  }
  static void widen_store(double* y, F c) {
    _mm512_store_pd(y, _mm512_cvtps_pd(_mm512_castps512_ps256(c)));
    _mm512_store_pd(y + 8, _mm512_cvtps_pd(_mm512_extractf32x8_ps(c, 1)));
  }
  /// Lanes without bit h get a + b, lanes with it (hi) a - b.
  static F bfly(F v, __m512i idx, __mmask16 hi) {
    const F p = _mm512_permutexvar_ps(idx, v);
    return _mm512_mask_sub_ps(_mm512_add_ps(v, p), hi, p, v);
  }
  static F fwht_lane(F v) {  // stages 1, 2, 4, 8
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    v = bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi32(1)), 0xaaaa);
    v = bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi32(2)), 0xcccc);
    v = bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi32(4)), 0xf0f0);
    return bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi32(8)), 0xff00);
  }
  static D bfly(D v, __m512i idx, __mmask8 hi) {
    const D p = _mm512_permutexvar_pd(idx, v);
    return _mm512_mask_sub_pd(_mm512_add_pd(v, p), hi, p, v);
  }
  static D fwht_lane(D v) {  // stages 1, 2, 4
    const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    v = bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi64(1)), 0xaa);
    v = bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi64(2)), 0xcc);
    return bfly(v, _mm512_xor_si512(lane, _mm512_set1_epi64(4)), 0xf0);
  }
};
#endif

inline constexpr std::uint64_t kProdByteMask[4] = {0, 0x0101010101010101ull, 0x0303030303030303ull,
                                                   0x0707070707070707ull};

template <class V>
struct ProdSimd {
  using F = typename V::F;
  using D = typename V::D;
  static constexpr int W = V::W;
  static constexpr int DW = V::DW;
  static constexpr std::size_t kBatch = 256;

  // ---------------------------------------------------------------- rotation

  /// In-place FWHT of y[d] (float: fp32 forward; double: fp64 inverse), L lanes per vector.
  template <class T>
  static void fwht(T* y, int d) {
    constexpr int L = std::is_same_v<T, float> ? W : DW;
    // The stages of span < L stay inside each vector, so running them vector by vector keeps the order.
    for (int k = 0; k < d; k += L) V::store(y + k, V::fwht_lane(V::load(y + k)));
    for (int h = L; h < d; h <<= 1)
      for (int i = 0; i < d; i += 2 * h)
        for (int j = i; j < i + h; j += L) {
          const auto a = V::load(y + j), b = V::load(y + j + h);
          V::store(y + j, V::add(a, b));
          V::store(y + j + h, V::sub(a, b));
        }
  }

  /// y = Pi x in fp32 (rotation.h order).
  static void forward(const ProdState& ps, const float* x, float* y) {
    const int d = ps.d;
    if (ps.rot == Rot::kHadamard) {
      for (int k = 0; k < d; k += W) V::store(y + k, V::mul(V::load(x + k), V::load(ps.signs.data() + k)));
      fwht(y, d);
      const F sc = V::set1(ps.scale);
      for (int k = 0; k < d; k += W) V::store(y + k, V::mul(V::load(y + k), sc));
    } else if (ps.rot == Rot::kDense) {
      V::qjl().colacc(ps.mat_t.data(), static_cast<std::size_t>(d), d, x, d, y);
    } else {
      std::memcpy(y, x, sizeof(float) * static_cast<std::size_t>(d));
    }
  }

  /// x = Pi^T y in fp64 (rotation.h order).
  static void inverse(const ProdState& ps, const double* y, double* x) {
    const int d = ps.d;
    if (ps.rot == Rot::kHadamard) {
      std::memcpy(x, y, sizeof(double) * static_cast<std::size_t>(d));
      fwht(x, d);
      for (int k = 0; k < d; k += DW) V::store(x + k, V::mul(V::load(x + k), V::load(ps.inv_scale.data() + k)));
    } else if (ps.rot == Rot::kDense) {
      std::fill(x, x + d, 0.0);
      V::qjl().rowcomb(ps.mat.data(), static_cast<std::size_t>(d), d, d, y, x);
    } else {
      std::memcpy(x, y, sizeof(double) * static_cast<std::size_t>(d));
    }
  }

  // ---------------------------------------------------------------- encode / decode

  static void encode(const ProdState& ps, const float* x, std::size_t count, std::uint8_t* codes, float* scal) {
    const int d = ps.d, bits = ps.bits;
    const QjlKernels& qk = V::qjl();
    alignas(64) float y[kProdMaxDim], u[kProdMaxDim];
    alignas(64) std::uint8_t cb[kProdMaxDim];
    const F cbv = V::load_cb(ps.cb16);
    for (std::size_t t = 0; t < count; ++t) {
      const float* xt = x + t * static_cast<std::size_t>(d);
      std::uint8_t* out = codes + t * ps.code_bytes;
      const float norm = std::sqrt(qk.sumsq(xt, d));
      forward(ps, xt, y);
      const F inv = V::set1(norm > 0 ? 1.0f / norm : 0.0f);
      for (int k = 0; k < d; k += W) {
        F v = V::mul(V::loada(y + k), inv);
        if (bits > 0) {
          const auto c = V::quantize(v, ps.bnd, ps.nbnd);
          v = V::sub(v, V::lut(cbv, c));
          V::store_codes(cb + k, c);
        }
        V::storea(u + k, v);
      }
      for (int g = 0; bits > 0 && g < d / 8; ++g) {
        std::uint64_t v;
        std::memcpy(&v, cb + 8 * g, 8);
        const std::uint64_t p = _pext_u64(v, kProdByteMask[bits]);
        std::memcpy(out + g * bits, &p, static_cast<std::size_t>(bits));  // little-endian host
      }
      const float gamma = std::sqrt(qk.sumsq(u, d));
      qk.signs(ps.sk, u, out + ps.mse_bytes);
      scal[2 * t] = norm;
      scal[2 * t + 1] = gamma;
    }
  }

  template <int BITS>
  static void decode_t(const ProdState& ps, const std::uint8_t* codes, const std::uint8_t* scal16, std::size_t count,
                       float* out) {
    const int d = ps.d, m = ps.sk.m;
    const QjlKernels& qk = V::qjl();
    alignas(64) double y[kProdMaxDim], xr[kProdMaxDim];
    alignas(64) double coef[kQjlMaxRows];
    const F cbv = V::load_cb(ps.cb16);
    for (std::size_t t = 0; t < count; ++t) {
      const std::uint8_t* p = codes + t * ps.code_bytes;
      for (int k = 0; k < d; k += W) {
        F c = V::zero();
        if constexpr (BITS > 0) c = V::lut(cbv, V::template codes<BITS>(p, k / W));
        V::widen_store(y + k, c);
      }
      const double norm = half_at(scal16 + 4 * t);
      const double sg = ps.sk.kappa * static_cast<double>(half_at(scal16 + 4 * t + 2));
      const std::uint8_t* bits = p + ps.mse_bytes;
      for (int i = 0; i < m; ++i) coef[i] = ((bits[i >> 3] >> (i & 7)) & 1) ? sg : -sg;
      qk.rowcomb(ps.sk.s.data(), static_cast<std::size_t>(d), m, d, coef, y);
      inverse(ps, y, xr);
      const D nv = V::dset1(norm);
      float* o = out + t * static_cast<std::size_t>(d);
      for (int k = 0; k < d; k += DW) V::store_cvt(o + k, V::mul(nv, V::loada(xr + k)));
    }
  }

  // ---------------------------------------------------------------- scores / accumulate

  template <int BITS>
  static void scores_t(const ProdState& ps, const float* state, const std::uint8_t* block, std::size_t n,
                       std::size_t t0, std::size_t t1, float* out) {
    const int d = ps.d;
    const QjlKernels& qk = V::qjl();
    const std::uint8_t* scal = block + n * ps.code_bytes;
    const F cbv = V::load_cb(ps.cb16);
    alignas(64) float ss[kBatch];
    for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
      const std::size_t cnt = std::min(kBatch, t1 - b0);
      qk.sign_sums(ps.sk, state + d, block + b0 * ps.code_bytes + ps.mse_bytes, ps.code_bytes, cnt, ss);
      for (std::size_t i = 0; i < cnt; ++i) {
        const std::size_t t = b0 + i;
        float dot = 0.0f;
        if constexpr (BITS > 0) {
          const std::uint8_t* p = block + t * ps.code_bytes;
          F a0 = V::zero(), a1 = V::zero();
          int k = 0;
          for (; k + 2 <= d / W; k += 2) {  // chunks alternate between two accumulators
            a0 = V::fma(V::load(state + W * k), V::lut(cbv, V::template codes<BITS>(p, k)), a0);
            a1 = V::fma(V::load(state + W * k + W), V::lut(cbv, V::template codes<BITS>(p, k + 1)), a1);
          }
          if (k < d / W) a0 = V::fma(V::load(state + W * k), V::lut(cbv, V::template codes<BITS>(p, k)), a0);
          dot = V::hsum(V::add(a0, a1));
        }
        dot += ps.sk.kappa_f * half_at(scal + 4 * t + 2) * ss[i];
        out[t - t0] = half_at(scal + 4 * t) * dot;
      }
    }
  }

  /// acc[W * (c0 + b) ...] += sum_t wn[t] * c[code] for NB coordinate vectors starting at c0.
  template <int BITS, int NB>
  static void mse_accumulate_block(const ProdState& ps, const std::uint8_t* codes, std::size_t count,
                                   const float* wn, int c0, float* acc) {
    const F cbv = V::load_cb(ps.cb16);
    F a[NB];
    for (int b = 0; b < NB; ++b) a[b] = V::load(acc + W * (c0 + b));
    for (std::size_t t = 0; t < count; ++t) {
      const F w = V::set1(wn[t]);
      const std::uint8_t* p = codes + t * ps.code_bytes;
      for (int b = 0; b < NB; ++b) a[b] = V::fma(w, V::lut(cbv, V::template codes<BITS>(p, c0 + b)), a[b]);
    }
    for (int b = 0; b < NB; ++b) V::store(acc + W * (c0 + b), a[b]);
  }

  template <int BITS>
  static void mse_accumulate(const ProdState& ps, const std::uint8_t* codes, std::size_t count, const float* wn,
                             float* acc) {
    const int nc = ps.d / W;
    for (int c0 = 0; c0 < nc; c0 += 8)
      by_nb(std::min(8, nc - c0), [&](auto nb) {
        mse_accumulate_block<BITS, decltype(nb)::value>(ps, codes, count, wn, c0, acc);
      });
  }

  static void accumulate(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0,
                         std::size_t t1, const float* w, float* acc) {
    const QjlKernels& qk = V::qjl();
    const std::uint8_t* scal = block + n * ps.code_bytes;
    alignas(64) float wn[kBatch], wg[kBatch];
    for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
      const std::size_t cnt = std::min(kBatch, t1 - b0);
      for (std::size_t i = 0; i < cnt; ++i) {
        const std::size_t t = b0 + i;
        wn[i] = w[t - t0] * half_at(scal + 4 * t);
        wg[i] = wn[i] * ps.sk.kappa_f * half_at(scal + 4 * t + 2);
      }
      const std::uint8_t* codes = block + b0 * ps.code_bytes;
      switch (ps.bits) {
        case 1: mse_accumulate<1>(ps, codes, cnt, wn, acc); break;
        case 2: mse_accumulate<2>(ps, codes, cnt, wn, acc); break;
        case 3: mse_accumulate<3>(ps, codes, cnt, wn, acc); break;
        default: break;
      }
      qk.sign_accumulate(ps.sk, codes + ps.mse_bytes, ps.code_bytes, cnt, wg, acc + ps.d);
    }
  }

  // ---------------------------------------------------------------- codec domain

  template <int BITS>
  static void decode_domain_t(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0,
                              std::size_t t1, float* y) {
    const int d = ps.d;
    const std::size_t ds = static_cast<std::size_t>(d + ps.sk.mp);
    const QjlKernels& qk = V::qjl();
    const std::uint8_t* scal = block + n * ps.code_bytes;
    const F cbv = V::load_cb(ps.cb16);
    alignas(64) float sg[kBatch];
    for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
      const std::size_t cnt = std::min(kBatch, t1 - b0);
      for (std::size_t i = 0; i < cnt; ++i) {
        const std::size_t t = b0 + i;
        const float nrm = half_at(scal + 4 * t);
        float* o = y + (t - t0) * ds;
        if constexpr (BITS > 0) {
          const std::uint8_t* p = block + t * ps.code_bytes;
          const F nv = V::set1(nrm);
          for (int k = 0; k < d / W; ++k) V::store(o + W * k, V::mul(nv, V::lut(cbv, V::template codes<BITS>(p, k))));
        } else {
          (void)cbv;
          for (int k = 0; k < d; k += W) V::store(o + k, V::zero());
        }
        sg[i] = nrm * ps.sk.kappa_f * half_at(scal + 4 * t + 2);
      }
      qk.sign_expand(ps.sk, block + b0 * ps.code_bytes + ps.mse_bytes, ps.code_bytes, cnt, sg,
                     y + (b0 - t0) * ds + d, ds);
    }
  }

  static void decode(const ProdState& ps, const std::uint8_t* codes, const std::uint8_t* scal16, std::size_t count,
                     float* out) {
    by_value<0, 3>(ps.bits, [&](auto b) { decode_t<decltype(b)::value>(ps, codes, scal16, count, out); });
  }
  static void scores(const ProdState& ps, const float* state, const std::uint8_t* block, std::size_t n,
                     std::size_t t0, std::size_t t1, float* out) {
    by_value<0, 3>(ps.bits, [&](auto b) { scores_t<decltype(b)::value>(ps, state, block, n, t0, t1, out); });
  }
  static void decode_domain(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0,
                            std::size_t t1, float* y) {
    by_value<0, 3>(ps.bits, [&](auto b) { decode_domain_t<decltype(b)::value>(ps, block, n, t0, t1, y); });
  }

  static const ProdKernels& table() {
    static const ProdKernels k{&V::qjl(), encode, decode, scores, accumulate, inverse, decode_domain};
    return k;
  }
};

}  // namespace
}  // namespace turbokv::cpu::detail
