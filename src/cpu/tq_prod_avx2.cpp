// TurboQuant-Prod kernels, AVX2 (FMA, F16C, BMI2). Compiled with its own flags
// (CMakeLists.txt); called only when simd_level() is kAvx2. The QJL part runs
// on the QJL kernels (qjl_avx2.cpp). 8 coordinates' (b-1)-bit codes come from
// one broadcast 32-bit load shifted lane-wise; vpermps looks them up in the
// replicated codebook. Reading the codes this way may read up to 3 bytes past
// a token's MSE codes; its sign bytes and the block's scalars always follow
// them. Operation order: tq_prod_kernels.h.
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

/// Codes of coordinates 8k..8k+7 (BITS wide) in the low bits of lanes 0..7 (higher bits: neighbours).
template <int BITS>
inline __m256i codes8(const std::uint8_t* p, int k) {
  std::uint32_t v;
  std::memcpy(&v, p + BITS * k, 4);
  constexpr int B = BITS;
  return _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)), _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B));
}

// ---------------------------------------------------------------- rotation

template <int IMM>
inline __m256 bfly8(__m256 v, __m256i idx) {
  const __m256 p = _mm256_permutevar8x32_ps(v, idx);
  return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), IMM);
}

void fwht(float* y, int d) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i i1 = _mm256_xor_si256(lane, _mm256_set1_epi32(1)), i2 = _mm256_xor_si256(lane, _mm256_set1_epi32(2));
  const __m256i i4 = _mm256_xor_si256(lane, _mm256_set1_epi32(4));
  // Stages 1, 2, 4 stay inside each vector, so running them vector by vector keeps the order.
  for (int k = 0; k < d; k += 8) {
    __m256 v = _mm256_loadu_ps(y + k);
    v = bfly8<0xaa>(v, i1);
    v = bfly8<0xcc>(v, i2);
    v = bfly8<0xf0>(v, i4);
    _mm256_storeu_ps(y + k, v);
  }
  for (int h = 8; h < d; h <<= 1)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(y + j), b = _mm256_loadu_ps(y + j + h);
        _mm256_storeu_ps(y + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(y + j + h, _mm256_sub_ps(a, b));
      }
}

void fwht_d(double* y, int d) {
  for (int k = 0; k < d; k += 4) {
    __m256d v = _mm256_loadu_pd(y + k);
    __m256d p = _mm256_permute_pd(v, 0x5);  // lanes 1, 0, 3, 2
    v = _mm256_blend_pd(_mm256_add_pd(v, p), _mm256_sub_pd(p, v), 0xa);
    p = _mm256_permute2f128_pd(v, v, 1);  // lanes 2, 3, 0, 1
    v = _mm256_blend_pd(_mm256_add_pd(v, p), _mm256_sub_pd(p, v), 0xc);
    _mm256_storeu_pd(y + k, v);
  }
  for (int h = 4; h < d; h <<= 1)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; j += 4) {
        const __m256d a = _mm256_loadu_pd(y + j), b = _mm256_loadu_pd(y + j + h);
        _mm256_storeu_pd(y + j, _mm256_add_pd(a, b));
        _mm256_storeu_pd(y + j + h, _mm256_sub_pd(a, b));
      }
}

/// y = Pi x in fp32 (rotation.h order).
void forward(const ProdState& ps, const float* x, float* y) {
  const int d = ps.d;
  if (ps.rot == Rot::kHadamard) {
    for (int k = 0; k < d; k += 8)
      _mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(ps.signs.data() + k)));
    fwht(y, d);
    const __m256 sc = _mm256_set1_ps(ps.scale);
    for (int k = 0; k < d; k += 8) _mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_loadu_ps(y + k), sc));
  } else if (ps.rot == Rot::kDense) {
    qjl_avx2_kernels().colacc(ps.mat_t.data(), static_cast<std::size_t>(d), d, x, d, y);
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
    for (int k = 0; k < d; k += 4)
      _mm256_storeu_pd(x + k, _mm256_mul_pd(_mm256_loadu_pd(x + k), _mm256_loadu_pd(ps.inv_scale.data() + k)));
  } else if (ps.rot == Rot::kDense) {
    std::fill(x, x + d, 0.0);
    qjl_avx2_kernels().rowcomb(ps.mat.data(), static_cast<std::size_t>(d), d, d, y, x);
  } else {
    std::memcpy(x, y, sizeof(double) * static_cast<std::size_t>(d));
  }
}

// ---------------------------------------------------------------- encode / decode

void encode(const ProdState& ps, const float* x, std::size_t count, std::uint8_t* codes, float* scal) {
  const int d = ps.d, bits = ps.bits;
  const QjlKernels& qk = qjl_avx2_kernels();
  alignas(32) float y[kProdMaxDim], u[kProdMaxDim];
  alignas(32) std::uint8_t cb[kProdMaxDim];
  const __m256 cbv = _mm256_load_ps(ps.cb16);
  // byte 0 of each dword -> bytes 0..3 of each 128-bit lane
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(d);
    std::uint8_t* out = codes + t * ps.code_bytes;
    const float norm = std::sqrt(qk.sumsq(xt, d));
    forward(ps, xt, y);
    const __m256 inv = _mm256_set1_ps(norm > 0 ? 1.0f / norm : 0.0f);
    for (int k = 0; k < d; k += 8) {
      __m256 v = _mm256_mul_ps(_mm256_load_ps(y + k), inv);
      if (bits > 0) {
        __m256i c = _mm256_setzero_si256();
        for (int b = 0; b < ps.nbnd; ++b)
          c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_set1_ps(ps.bnd[b]), _CMP_GT_OQ)));
        v = _mm256_sub_ps(v, _mm256_permutevar8x32_ps(cbv, c));
        const __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(c, pick), join);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(cb + k), _mm256_castsi256_si128(b8));
      }
      _mm256_store_ps(u + k, v);
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
  const QjlKernels& qk = qjl_avx2_kernels();
  alignas(32) double y[kProdMaxDim], xr[kProdMaxDim];
  alignas(32) double coef[kQjlMaxRows];
  const __m256 cbv = _mm256_load_ps(ps.cb16);
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* p = codes + t * ps.code_bytes;
    for (int k = 0; k < d; k += 8) {
      __m256 c = _mm256_setzero_ps();
      if constexpr (BITS > 0) c = _mm256_permutevar8x32_ps(cbv, codes8<BITS>(p, k / 8));
      _mm256_store_pd(y + k, _mm256_cvtps_pd(_mm256_castps256_ps128(c)));
      _mm256_store_pd(y + k + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1)));
    }
    const double norm = half_at(scal16 + 4 * t);
    const double sg = ps.sk.kappa * static_cast<double>(half_at(scal16 + 4 * t + 2));
    const std::uint8_t* bits = p + ps.mse_bytes;
    for (int i = 0; i < m; ++i) coef[i] = ((bits[i >> 3] >> (i & 7)) & 1) ? sg : -sg;
    qk.rowcomb(ps.sk.s.data(), static_cast<std::size_t>(d), m, d, coef, y);
    inverse(ps, y, xr);
    const __m256d nv = _mm256_set1_pd(norm);
    float* o = out + t * static_cast<std::size_t>(d);
    for (int k = 0; k < d; k += 4) _mm_storeu_ps(o + k, _mm256_cvtpd_ps(_mm256_mul_pd(nv, _mm256_load_pd(xr + k))));
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

inline float hsum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

template <int BITS>
void scores_t(const ProdState& ps, const float* state, const std::uint8_t* block, std::size_t n, std::size_t t0,
              std::size_t t1, float* out) {
  const int d = ps.d;
  const QjlKernels& qk = qjl_avx2_kernels();
  const std::uint8_t* scal = block + n * ps.code_bytes;
  const __m256 cbv = _mm256_load_ps(ps.cb16);
  alignas(32) float ss[kBatch];
  for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
    const std::size_t cnt = std::min(kBatch, t1 - b0);
    qk.sign_sums(ps.sk, state + d, block + b0 * ps.code_bytes + ps.mse_bytes, ps.code_bytes, cnt, ss);
    for (std::size_t i = 0; i < cnt; ++i) {
      const std::size_t t = b0 + i;
      float dot = 0.0f;
      if constexpr (BITS > 0) {
        const std::uint8_t* p = block + t * ps.code_bytes;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int k = 0; k < d / 8; k += 2) {  // d is a multiple of 16
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(state + 8 * k), _mm256_permutevar8x32_ps(cbv, codes8<BITS>(p, k)), a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(state + 8 * k + 8), _mm256_permutevar8x32_ps(cbv, codes8<BITS>(p, k + 1)),
                               a1);
        }
        dot = hsum(_mm256_add_ps(a0, a1));
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

/// acc[8 * (c0 + b) ...] += sum_t wn[t] * c[code] for NB coordinate vectors starting at c0.
template <int BITS, int NB>
inline void mse_accumulate_block(const ProdState& ps, const std::uint8_t* codes, std::size_t count, const float* wn,
                                 int c0, float* acc) {
  const __m256 cbv = _mm256_load_ps(ps.cb16);
  __m256 a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm256_loadu_ps(acc + 8 * (c0 + b));
  for (std::size_t t = 0; t < count; ++t) {
    const __m256 w = _mm256_set1_ps(wn[t]);
    const std::uint8_t* p = codes + t * ps.code_bytes;
    for (int b = 0; b < NB; ++b)
      a[b] = _mm256_fmadd_ps(w, _mm256_permutevar8x32_ps(cbv, codes8<BITS>(p, c0 + b)), a[b]);
  }
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(acc + 8 * (c0 + b), a[b]);
}

template <int BITS>
void mse_accumulate(const ProdState& ps, const std::uint8_t* codes, std::size_t count, const float* wn, float* acc) {
  const int nc = ps.d / 8;
  for (int c0 = 0; c0 < nc; c0 += 8) {
    switch (std::min(8, nc - c0)) {
      case 2: mse_accumulate_block<BITS, 2>(ps, codes, count, wn, c0, acc); break;
      case 4: mse_accumulate_block<BITS, 4>(ps, codes, count, wn, c0, acc); break;
      case 6: mse_accumulate_block<BITS, 6>(ps, codes, count, wn, c0, acc); break;
      default: mse_accumulate_block<BITS, 8>(ps, codes, count, wn, c0, acc); break;
    }
  }
}

void accumulate(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                const float* w, float* acc) {
  const QjlKernels& qk = qjl_avx2_kernels();
  const std::uint8_t* scal = block + n * ps.code_bytes;
  alignas(32) float wn[kBatch], wg[kBatch];
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
  const QjlKernels& qk = qjl_avx2_kernels();
  const std::uint8_t* scal = block + n * ps.code_bytes;
  const __m256 cbv = _mm256_load_ps(ps.cb16);
  (void)cbv;
  alignas(32) float sg[kBatch];
  for (std::size_t b0 = t0; b0 < t1; b0 += kBatch) {
    const std::size_t cnt = std::min(kBatch, t1 - b0);
    for (std::size_t i = 0; i < cnt; ++i) {
      const std::size_t t = b0 + i;
      const float nrm = half_at(scal + 4 * t);
      const std::uint8_t* p = block + t * ps.code_bytes;
      (void)p;
      float* o = y + (t - t0) * ds;
        if constexpr (BITS > 0) {
          const __m256 nv = _mm256_set1_ps(nrm);
          for (int k = 0; k < d / 8; ++k)
            _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(nv, _mm256_permutevar8x32_ps(cbv, codes8<BITS>(p, k))));
        } else {
          for (int k = 0; k < d; k += 8) _mm256_storeu_ps(o + k, _mm256_setzero_ps());
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

const ProdKernels& tq_prod_avx2_kernels() {
  static const ProdKernels k{&qjl_avx2_kernels(), encode, decode, scores, accumulate, inverse, decode_domain};
  return k;
}

}  // namespace turbokv::cpu::detail
