// TurboQuant-Prod kernels, AVX-512 (F, BW, VL, DQ, VBMI; F16C, BMI2).
// Compiled with its own flags (CMakeLists.txt); called only when simd_level()
// is kAvx512. The QJL part runs on the QJL kernels (qjl_avx512.cpp). 16
// coordinates' (b-1)-bit codes come from one broadcast load: a lane-wise shift
// (1, 2 bits) or a VBMI multishift (3 bits) puts code l in the low bits of lane
// l, and vpermps looks it up in the replicated codebook. Reading the codes
// this way may read up to 2 bytes past a token's MSE codes; its sign bytes and
// the block's scalars always follow them. Operation order: tq_prod_kernels.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tq_prod_kernels.h"

namespace turbokv::cpu::detail {
namespace {

inline constexpr std::uint64_t kByteMask[4] = {0, 0x0101010101010101ull, 0x0303030303030303ull,
                                               0x0707070707070707ull};

inline float half_at(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

/// Codes of coordinates 16k..16k+15 (BITS wide) in the low bits of lanes 0..15 (higher bits: neighbours).
template <int BITS>
inline __m512i codes16(const std::uint8_t* p, int k) {
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
    const __m512i sh = _mm512_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B, 8 * B, 9 * B, 10 * B, 11 * B,
                                         12 * B, 13 * B, 14 * B, 15 * B);
    return _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(v)), sh);
  }
}

// ---------------------------------------------------------------- rotation

/// One in-register FWHT stage of span h < 16: lanes without bit h get a + b, lanes with it a - b.
inline __m512 bfly16(__m512 v, __m512i idx, __mmask16 hi) {
  const __m512 p = _mm512_permutexvar_ps(idx, v);
  return _mm512_mask_sub_ps(_mm512_add_ps(v, p), hi, p, v);
}

void fwht(float* y, int d) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i i1 = _mm512_xor_si512(lane, _mm512_set1_epi32(1)), i2 = _mm512_xor_si512(lane, _mm512_set1_epi32(2));
  const __m512i i4 = _mm512_xor_si512(lane, _mm512_set1_epi32(4)), i8 = _mm512_xor_si512(lane, _mm512_set1_epi32(8));
  // Stages 1, 2, 4, 8 stay inside each vector, so running them vector by vector keeps the order.
  for (int k = 0; k < d; k += 16) {
    __m512 v = _mm512_loadu_ps(y + k);
    v = bfly16(v, i1, 0xaaaa);
    v = bfly16(v, i2, 0xcccc);
    v = bfly16(v, i4, 0xf0f0);
    v = bfly16(v, i8, 0xff00);
    _mm512_storeu_ps(y + k, v);
  }
  for (int h = 16; h < d; h <<= 1)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; j += 16) {
        const __m512 a = _mm512_loadu_ps(y + j), b = _mm512_loadu_ps(y + j + h);
        _mm512_storeu_ps(y + j, _mm512_add_ps(a, b));
        _mm512_storeu_ps(y + j + h, _mm512_sub_ps(a, b));
      }
}

inline __m512d bfly8(__m512d v, __m512i idx, __mmask8 hi) {
  const __m512d p = _mm512_permutexvar_pd(idx, v);
  return _mm512_mask_sub_pd(_mm512_add_pd(v, p), hi, p, v);
}

void fwht_d(double* y, int d) {
  const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i i1 = _mm512_xor_si512(lane, _mm512_set1_epi64(1)), i2 = _mm512_xor_si512(lane, _mm512_set1_epi64(2));
  const __m512i i4 = _mm512_xor_si512(lane, _mm512_set1_epi64(4));
  for (int k = 0; k < d; k += 8) {
    __m512d v = _mm512_loadu_pd(y + k);
    v = bfly8(v, i1, 0xaa);
    v = bfly8(v, i2, 0xcc);
    v = bfly8(v, i4, 0xf0);
    _mm512_storeu_pd(y + k, v);
  }
  for (int h = 8; h < d; h <<= 1)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; j += 8) {
        const __m512d a = _mm512_loadu_pd(y + j), b = _mm512_loadu_pd(y + j + h);
        _mm512_storeu_pd(y + j, _mm512_add_pd(a, b));
        _mm512_storeu_pd(y + j + h, _mm512_sub_pd(a, b));
      }
}

/// y = Pi x in fp32 (rotation.h order).
void forward(const ProdState& ps, const float* x, float* y) {
  const int d = ps.d;
  if (ps.rot == Rot::kHadamard) {
    for (int k = 0; k < d; k += 16)
      _mm512_storeu_ps(y + k, _mm512_mul_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(ps.signs.data() + k)));
    fwht(y, d);
    const __m512 sc = _mm512_set1_ps(ps.scale);
    for (int k = 0; k < d; k += 16) _mm512_storeu_ps(y + k, _mm512_mul_ps(_mm512_loadu_ps(y + k), sc));
  } else if (ps.rot == Rot::kDense) {
    qjl_avx512_kernels().colacc(ps.mat_t.data(), static_cast<std::size_t>(d), d, x, d, y);
  } else {
    std::memcpy(y, x, sizeof(float) * static_cast<std::size_t>(d));
  }
}

/// x = Pi^T y in fp64 (rotation.h order).
void inverse(const ProdState& ps, const double* y, double* x) {
  const int d = ps.d;
  if (ps.rot == Rot::kHadamard) {
    std::memcpy(x, y, sizeof(double) * static_cast<std::size_t>(d));
    fwht_d(x, d);
    for (int k = 0; k < d; k += 8)
      _mm512_storeu_pd(x + k, _mm512_mul_pd(_mm512_loadu_pd(x + k), _mm512_loadu_pd(ps.inv_scale.data() + k)));
  } else if (ps.rot == Rot::kDense) {
    std::fill(x, x + d, 0.0);
    qjl_avx512_kernels().rowcomb(ps.mat.data(), static_cast<std::size_t>(d), d, d, y, x);
  } else {
    std::memcpy(x, y, sizeof(double) * static_cast<std::size_t>(d));
  }
}

// ---------------------------------------------------------------- encode / decode

void encode(const ProdState& ps, const float* x, std::size_t count, std::uint8_t* codes, float* scal) {
  const int d = ps.d, bits = ps.bits;
  const QjlKernels& qk = qjl_avx512_kernels();
  alignas(64) float y[kProdMaxDim], u[kProdMaxDim];
  alignas(64) std::uint8_t cb[kProdMaxDim];
  const __m512 cbv = _mm512_load_ps(ps.cb16);
  const __m512i one = _mm512_set1_epi32(1);
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(d);
    std::uint8_t* out = codes + t * ps.code_bytes;
    const float norm = std::sqrt(qk.sumsq(xt, d));
    forward(ps, xt, y);
    const __m512 inv = _mm512_set1_ps(norm > 0 ? 1.0f / norm : 0.0f);
    for (int k = 0; k < d; k += 16) {
      __m512 v = _mm512_mul_ps(_mm512_load_ps(y + k), inv);
      if (bits > 0) {
        __m512i c = _mm512_setzero_si512();
        for (int b = 0; b < ps.nbnd; ++b)
          c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, _mm512_set1_ps(ps.bnd[b]), _CMP_GT_OQ), c, one);
        v = _mm512_sub_ps(v, _mm512_permutexvar_ps(c, cbv));
        _mm_store_si128(reinterpret_cast<__m128i*>(cb + k), _mm512_cvtepi32_epi8(c));
      }
      _mm512_store_ps(u + k, v);
    }
    for (int g = 0; bits > 0 && g < d / 8; ++g) {
      std::uint64_t v;
      std::memcpy(&v, cb + 8 * g, 8);
      const std::uint64_t p = _pext_u64(v, kByteMask[bits]);
      std::memcpy(out + g * bits, &p, static_cast<std::size_t>(bits));  // little-endian host
    }
    const float gamma = std::sqrt(qk.sumsq(u, d));
    qk.signs(ps.sk, u, out + ps.mse_bytes);
    scal[2 * t] = norm;
    scal[2 * t + 1] = gamma;
  }
}

template <int BITS>
void decode_t(const ProdState& ps, const std::uint8_t* codes, const std::uint8_t* scal16, std::size_t count,
              float* out) {
  const int d = ps.d, m = ps.sk.m;
  const QjlKernels& qk = qjl_avx512_kernels();
  alignas(64) double y[kProdMaxDim], xr[kProdMaxDim];
  alignas(64) double coef[kQjlMaxRows];
  const __m512 cbv = _mm512_load_ps(ps.cb16);
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* p = codes + t * ps.code_bytes;
    for (int k = 0; k < d; k += 16) {
      __m512 c = _mm512_setzero_ps();
      if constexpr (BITS > 0) c = _mm512_permutexvar_ps(codes16<BITS>(p, k / 16), cbv);
      _mm512_store_pd(y + k, _mm512_cvtps_pd(_mm512_castps512_ps256(c)));
      _mm512_store_pd(y + k + 8, _mm512_cvtps_pd(_mm512_extractf32x8_ps(c, 1)));
    }
    const double norm = half_at(scal16 + 4 * t);
    const double sg = ps.sk.kappa * static_cast<double>(half_at(scal16 + 4 * t + 2));
    const std::uint8_t* bits = p + ps.mse_bytes;
    for (int i = 0; i < m; ++i) coef[i] = ((bits[i >> 3] >> (i & 7)) & 1) ? sg : -sg;
    qk.rowcomb(ps.sk.s.data(), static_cast<std::size_t>(d), m, d, coef, y);
    inverse(ps, y, xr);
    const __m512d nv = _mm512_set1_pd(norm);
    float* o = out + t * static_cast<std::size_t>(d);
    for (int k = 0; k < d; k += 8) _mm256_storeu_ps(o + k, _mm512_cvtpd_ps(_mm512_mul_pd(nv, _mm512_load_pd(xr + k))));
  }
}

void decode(const ProdState& ps, const std::uint8_t* codes, const std::uint8_t* scal16, std::size_t count,
            float* out) {
  switch (ps.bits) {
    case 0: decode_t<0>(ps, codes, scal16, count, out); break;
    case 1: decode_t<1>(ps, codes, scal16, count, out); break;
    case 2: decode_t<2>(ps, codes, scal16, count, out); break;
    default: decode_t<3>(ps, codes, scal16, count, out); break;
  }
}

// ---------------------------------------------------------------- scores / accumulate

constexpr std::size_t kBatch = 256;

template <int BITS>
void scores_t(const ProdState& ps, const float* state, const std::uint8_t* block, std::size_t n, std::size_t t0,
              std::size_t t1, float* out) {
  const int d = ps.d;
  const QjlKernels& qk = qjl_avx512_kernels();
  const std::uint8_t* scal = block + n * ps.code_bytes;
  const __m512 cbv = _mm512_load_ps(ps.cb16);
  alignas(64) float ss[kBatch];
  for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
    const std::size_t cnt = std::min(kBatch, t1 - b0);
    qk.sign_sums(ps.sk, state + d, block + b0 * ps.code_bytes + ps.mse_bytes, ps.code_bytes, cnt, ss);
    for (std::size_t i = 0; i < cnt; ++i) {
      const std::size_t t = b0 + i;
      float dot = 0.0f;
      if constexpr (BITS > 0) {
        const std::uint8_t* p = block + t * ps.code_bytes;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int k = 0;
        for (; k + 2 <= d / 16; k += 2) {
          a0 = _mm512_fmadd_ps(_mm512_loadu_ps(state + 16 * k), _mm512_permutexvar_ps(codes16<BITS>(p, k), cbv), a0);
          a1 = _mm512_fmadd_ps(_mm512_loadu_ps(state + 16 * k + 16), _mm512_permutexvar_ps(codes16<BITS>(p, k + 1), cbv),
                               a1);
        }
        if (k < d / 16)
          a0 = _mm512_fmadd_ps(_mm512_loadu_ps(state + 16 * k), _mm512_permutexvar_ps(codes16<BITS>(p, k), cbv), a0);
        dot = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
      }
      dot += ps.sk.kappa_f * half_at(scal + 4 * t + 2) * ss[i];
      out[t - t0] = half_at(scal + 4 * t) * dot;
    }
  }
}

void scores(const ProdState& ps, const float* state, const std::uint8_t* block, std::size_t n, std::size_t t0,
            std::size_t t1, float* out) {
  switch (ps.bits) {
    case 0: scores_t<0>(ps, state, block, n, t0, t1, out); break;
    case 1: scores_t<1>(ps, state, block, n, t0, t1, out); break;
    case 2: scores_t<2>(ps, state, block, n, t0, t1, out); break;
    default: scores_t<3>(ps, state, block, n, t0, t1, out); break;
  }
}

/// acc[16 * (c0 + b) ...] += sum_t wn[t] * c[code] for NB coordinate vectors starting at c0.
template <int BITS, int NB>
inline void mse_accumulate_block(const ProdState& ps, const std::uint8_t* codes, std::size_t count, const float* wn,
                                 int c0, float* acc) {
  const __m512 cbv = _mm512_load_ps(ps.cb16);
  __m512 a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm512_loadu_ps(acc + 16 * (c0 + b));
  for (std::size_t t = 0; t < count; ++t) {
    const __m512 w = _mm512_set1_ps(wn[t]);
    const std::uint8_t* p = codes + t * ps.code_bytes;
    for (int b = 0; b < NB; ++b) a[b] = _mm512_fmadd_ps(w, _mm512_permutexvar_ps(codes16<BITS>(p, c0 + b), cbv), a[b]);
  }
  for (int b = 0; b < NB; ++b) _mm512_storeu_ps(acc + 16 * (c0 + b), a[b]);
}

template <int BITS>
void mse_accumulate(const ProdState& ps, const std::uint8_t* codes, std::size_t count, const float* wn, float* acc) {
  const int nc = ps.d / 16;
  for (int c0 = 0; c0 < nc; c0 += 8) {
    switch (std::min(8, nc - c0)) {
      case 1: mse_accumulate_block<BITS, 1>(ps, codes, count, wn, c0, acc); break;
      case 2: mse_accumulate_block<BITS, 2>(ps, codes, count, wn, c0, acc); break;
      case 3: mse_accumulate_block<BITS, 3>(ps, codes, count, wn, c0, acc); break;
      case 4: mse_accumulate_block<BITS, 4>(ps, codes, count, wn, c0, acc); break;
      case 5: mse_accumulate_block<BITS, 5>(ps, codes, count, wn, c0, acc); break;
      case 6: mse_accumulate_block<BITS, 6>(ps, codes, count, wn, c0, acc); break;
      case 7: mse_accumulate_block<BITS, 7>(ps, codes, count, wn, c0, acc); break;
      default: mse_accumulate_block<BITS, 8>(ps, codes, count, wn, c0, acc); break;
    }
  }
}

void accumulate(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                const float* w, float* acc) {
  const QjlKernels& qk = qjl_avx512_kernels();
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
void decode_domain_t(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) {
  const int d = ps.d;
  const std::size_t ds = static_cast<std::size_t>(d + ps.sk.mp);
  const QjlKernels& qk = qjl_avx512_kernels();
  const std::uint8_t* scal = block + n * ps.code_bytes;
  const __m512 cbv = _mm512_load_ps(ps.cb16);
  (void)cbv;
  alignas(64) float sg[kBatch];
  for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
    const std::size_t cnt = std::min(kBatch, t1 - b0);
    for (std::size_t i = 0; i < cnt; ++i) {
      const std::size_t t = b0 + i;
      const float nrm = half_at(scal + 4 * t);
      const std::uint8_t* p = block + t * ps.code_bytes;
      (void)p;
      float* o = y + (t - t0) * ds;
        if constexpr (BITS > 0) {
          const __m512 nv = _mm512_set1_ps(nrm);
          for (int k = 0; k < d / 16; ++k)
            _mm512_storeu_ps(o + 16 * k, _mm512_mul_ps(nv, _mm512_permutexvar_ps(codes16<BITS>(p, k), cbv)));
        } else {
          for (int k = 0; k < d; k += 16) _mm512_storeu_ps(o + k, _mm512_setzero_ps());
        }
      sg[i] = nrm * ps.sk.kappa_f * half_at(scal + 4 * t + 2);
    }
    qk.sign_expand(ps.sk, block + b0 * ps.code_bytes + ps.mse_bytes, ps.code_bytes, cnt, sg, y + (b0 - t0) * ds + d,
                   ds);
  }
}

void decode_domain(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                   float* y) {
  switch (ps.bits) {
    case 0: decode_domain_t<0>(ps, block, n, t0, t1, y); break;
    case 1: decode_domain_t<1>(ps, block, n, t0, t1, y); break;
    case 2: decode_domain_t<2>(ps, block, n, t0, t1, y); break;
    default: decode_domain_t<3>(ps, block, n, t0, t1, y); break;
  }
}

}  // namespace

const ProdKernels& tq_prod_avx512_kernels() {
  static const ProdKernels k{&qjl_avx512_kernels(), encode, decode, scores, accumulate, inverse, decode_domain};
  return k;
}

}  // namespace turbokv::cpu::detail
