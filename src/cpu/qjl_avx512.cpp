// QJL kernels, AVX-512 (F, BW, VL, DQ; F16C). Compiled with its own flags
// (CMakeLists.txt); called only when simd_level() is kAvx512. The packed sign
// bits are the mask registers: 16 rows = 2 bytes = one __mmask16, bit i = row i
// (the LSB-first stream of turbokv/pack.h). Operation order: qjl_kernels.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qjl_kernels.h"

namespace turbokv::cpu::detail {
namespace {

inline __mmask16 load_mask16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return static_cast<__mmask16>(v);
}
inline float half_at(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

float sumsq(const float* x, int d) {
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < d; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
  }
  // ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

template <int NB>
inline void colacc_block(const float* at, std::size_t ldt, const float* x, int nj, float* out) {
  __m512 a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm512_setzero_ps();
  for (int j = 0; j < nj; ++j) {
    const __m512 xj = _mm512_set1_ps(x[j]);
    const float* col = at + static_cast<std::size_t>(j) * ldt;
    for (int b = 0; b < NB; ++b) a[b] = _mm512_add_ps(a[b], _mm512_mul_ps(_mm512_loadu_ps(col + 16 * b), xj));
  }
  for (int b = 0; b < NB; ++b) _mm512_storeu_ps(out + 16 * b, a[b]);
}

void colacc(const float* at, std::size_t ldt, int rows, const float* x, int nj, float* out) {
  for (int i0 = 0; i0 < rows; i0 += 128) {
    const float* a = at + i0;
    float* o = out + i0;
    switch (std::min(8, (rows - i0) / 16)) {
      case 1: colacc_block<1>(a, ldt, x, nj, o); break;
      case 2: colacc_block<2>(a, ldt, x, nj, o); break;
      case 3: colacc_block<3>(a, ldt, x, nj, o); break;
      case 4: colacc_block<4>(a, ldt, x, nj, o); break;
      case 5: colacc_block<5>(a, ldt, x, nj, o); break;
      case 6: colacc_block<6>(a, ldt, x, nj, o); break;
      case 7: colacc_block<7>(a, ldt, x, nj, o); break;
      default: colacc_block<8>(a, ldt, x, nj, o); break;
    }
  }
}

void signs(const SketchState& sk, const float* r, std::uint8_t* out) {
  alignas(64) float acc[kQjlMaxRows];
  colacc(sk.st.data(), static_cast<std::size_t>(sk.mp), sk.mp, r, sk.d, acc);
  const __m512 zero = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= sk.m; i += 16) {
    const std::uint16_t k = _mm512_cmp_ps_mask(_mm512_load_ps(acc + i), zero, _CMP_GE_OQ);
    std::memcpy(out + i / 8, &k, 2);
  }
  if (i < sk.m) out[i / 8] = static_cast<std::uint8_t>(_mm512_cmp_ps_mask(_mm512_load_ps(acc + i), zero, _CMP_GE_OQ));
}

void encode(const SketchState& sk, const float* x, std::size_t count, std::uint8_t* codes, float* norms) {
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(sk.d);
    norms[t] = std::sqrt(sumsq(xt, sk.d));
    signs(sk, xt, codes + t * sk.sign_bytes);
  }
}

template <int NB>
inline void rowcomb_block(const float* a, std::size_t lda, int rows, const double* coef, double* y) {
  __m512d acc[NB];
  for (int b = 0; b < NB; ++b) acc[b] = _mm512_loadu_pd(y + 8 * b);
  for (int i = 0; i < rows; ++i) {
    const __m512d c = _mm512_set1_pd(coef[i]);
    const float* row = a + static_cast<std::size_t>(i) * lda;
    for (int b = 0; b < NB; ++b)
      acc[b] = _mm512_add_pd(acc[b], _mm512_mul_pd(c, _mm512_cvtps_pd(_mm256_loadu_ps(row + 8 * b))));
  }
  for (int b = 0; b < NB; ++b) _mm512_storeu_pd(y + 8 * b, acc[b]);
}

void rowcomb(const float* a, std::size_t lda, int rows, int cols, const double* coef, double* y) {
  for (int j0 = 0; j0 < cols; j0 += 64) {
    const float* aj = a + j0;
    double* yj = y + j0;
    switch (std::min(8, (cols - j0) / 8)) {
      case 1: rowcomb_block<1>(aj, lda, rows, coef, yj); break;
      case 2: rowcomb_block<2>(aj, lda, rows, coef, yj); break;
      case 3: rowcomb_block<3>(aj, lda, rows, coef, yj); break;
      case 4: rowcomb_block<4>(aj, lda, rows, coef, yj); break;
      case 5: rowcomb_block<5>(aj, lda, rows, coef, yj); break;
      case 6: rowcomb_block<6>(aj, lda, rows, coef, yj); break;
      case 7: rowcomb_block<7>(aj, lda, rows, coef, yj); break;
      default: rowcomb_block<8>(aj, lda, rows, coef, yj); break;
    }
  }
}

void decode(const SketchState& sk, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
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
    for (int j = 0; j < d; j += 8) _mm256_storeu_ps(o + j, _mm512_cvtpd_ps(_mm512_load_pd(y + j)));
  }
}

template <int NB>
inline void project_block(const float* at, std::size_t ldt, const double* q, int nj, float* out) {
  __m512d a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm512_setzero_pd();
  for (int j = 0; j < nj; ++j) {
    const __m512d qj = _mm512_set1_pd(q[j]);
    const float* col = at + static_cast<std::size_t>(j) * ldt;
    for (int b = 0; b < NB; ++b)
      a[b] = _mm512_add_pd(a[b], _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(col + 8 * b)), qj));
  }
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out + 8 * b, _mm512_cvtpd_ps(a[b]));
}

void project(const SketchState& sk, const double* q, float* sq) {
  const std::size_t ldt = static_cast<std::size_t>(sk.mp);
  for (int i0 = 0; i0 < sk.mp; i0 += 64) {
    switch (std::min(8, (sk.mp - i0) / 8)) {
      case 2: project_block<2>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); break;
      case 4: project_block<4>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); break;
      case 6: project_block<6>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); break;
      default: project_block<8>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); break;
    }
  }
}

/// sum_i (bit_i ? sq_i : -sq_i) over mp rows (rows >= m of sq and nsq are +-0).
inline float signed_sum(const float* sq, const float* nsq, const std::uint8_t* bits, int nfull, bool half) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int c = 0;
  for (; c + 2 <= nfull; c += 2) {
    a0 = _mm512_add_ps(a0, _mm512_mask_blend_ps(load_mask16(bits + 2 * c), _mm512_load_ps(nsq + 16 * c),
                                                _mm512_load_ps(sq + 16 * c)));
    a1 = _mm512_add_ps(a1, _mm512_mask_blend_ps(load_mask16(bits + 2 * c + 2), _mm512_load_ps(nsq + 16 * c + 16),
                                                _mm512_load_ps(sq + 16 * c + 16)));
  }
  if (c < nfull) {
    a0 = _mm512_add_ps(a0, _mm512_mask_blend_ps(load_mask16(bits + 2 * c), _mm512_load_ps(nsq + 16 * c),
                                                _mm512_load_ps(sq + 16 * c)));
    ++c;
  }
  if (half)  // 8 rows: one byte; lanes 8..15 pick nsq = -0
    a1 = _mm512_add_ps(a1, _mm512_mask_blend_ps(static_cast<__mmask16>(bits[2 * c]), _mm512_load_ps(nsq + 16 * c),
                                                _mm512_load_ps(sq + 16 * c)));
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

void sign_sums(const SketchState& sk, const float* sq, const std::uint8_t* bits, std::size_t stride,
               std::size_t count, float* out) {
  alignas(64) float ps[kQjlMaxRows], ns[kQjlMaxRows];
  for (int i = 0; i < sk.mp; i += 16) {
    const __m512 v = _mm512_loadu_ps(sq + i);
    _mm512_store_ps(ps + i, v);
    _mm512_store_ps(ns + i, _mm512_sub_ps(_mm512_setzero_ps(), v));
  }
  for (int i = sk.m; i < sk.mp; ++i) ps[i] = 0.0f, ns[i] = -0.0f;
  const int nfull = sk.m / 16;
  const bool half = (sk.m % 16) != 0;
  for (std::size_t t = 0; t < count; ++t) out[t] = signed_sum(ps, ns, bits + t * stride, nfull, half);
}

void scores(const SketchState& sk, const float* sq, const std::uint8_t* block, std::size_t n, std::size_t t0,
            std::size_t t1, float* out) {
  sign_sums(sk, sq, block + t0 * sk.sign_bytes, sk.sign_bytes, t1 - t0, out);
  const std::uint8_t* scal = block + n * sk.sign_bytes;
  for (std::size_t t = t0; t < t1; ++t) out[t - t0] *= sk.kappa_f * half_at(scal + 2 * t);
}

template <int NB>
inline void accumulate_block(const SketchState& sk, const std::uint8_t* bits0, std::size_t stride, std::size_t count,
                             const float* wg, int c0, float* acc) {
  __m512 a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm512_loadu_ps(acc + 16 * (c0 + b));
  const int nfull = sk.m / 16;
  for (std::size_t t = 0; t < count; ++t) {
    const __m512 pw = _mm512_set1_ps(wg[t]), nw = _mm512_set1_ps(-wg[t]);
    const std::uint8_t* bits = bits0 + t * stride + 2 * c0;
    for (int b = 0; b < NB; ++b) {
      if (c0 + b < nfull)
        a[b] = _mm512_add_ps(a[b], _mm512_mask_blend_ps(load_mask16(bits + 2 * b), nw, pw));
      else  // the last 8 rows: one byte; lanes 8..15 (padding) untouched
        a[b] = _mm512_mask_add_ps(a[b], 0x00ff, a[b],
                                  _mm512_mask_blend_ps(static_cast<__mmask16>(bits[2 * b]), nw, pw));
    }
  }
  for (int b = 0; b < NB; ++b) _mm512_storeu_ps(acc + 16 * (c0 + b), a[b]);
}

void sign_accumulate(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                     const float* wg, float* acc) {
  const int nc = sk.mp / 16;
  for (int c0 = 0; c0 < nc; c0 += 8) {
    switch (std::min(8, nc - c0)) {
      case 1: accumulate_block<1>(sk, bits, stride, count, wg, c0, acc); break;
      case 2: accumulate_block<2>(sk, bits, stride, count, wg, c0, acc); break;
      case 3: accumulate_block<3>(sk, bits, stride, count, wg, c0, acc); break;
      case 4: accumulate_block<4>(sk, bits, stride, count, wg, c0, acc); break;
      case 5: accumulate_block<5>(sk, bits, stride, count, wg, c0, acc); break;
      case 6: accumulate_block<6>(sk, bits, stride, count, wg, c0, acc); break;
      case 7: accumulate_block<7>(sk, bits, stride, count, wg, c0, acc); break;
      default: accumulate_block<8>(sk, bits, stride, count, wg, c0, acc); break;
    }
  }
}

void accumulate(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                const float* w, float* acc) {
  const std::uint8_t* scal = block + n * sk.sign_bytes;
  for (std::size_t b0 = t0; b0 < t1; b0 += 256) {  // weights w * kappa * ||k||, 256 tokens at a time
    const std::size_t b1 = std::min(t1, b0 + 256);
    alignas(64) float wg[256];
    for (std::size_t t = b0; t < b1; ++t) wg[t - b0] = w[t - t0] * sk.kappa_f * half_at(scal + 2 * t);
    sign_accumulate(sk, block + b0 * sk.sign_bytes, sk.sign_bytes, b1 - b0, wg, acc);
  }
}


void sign_expand(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                 const float* sc, float* y, std::size_t ystride) {
  const int nfull = sk.m / 16;
  const bool half = (sk.m % 16) != 0;
  for (std::size_t t = 0; t < count; ++t) {
    const __m512 pv = _mm512_set1_ps(sc[t]), nv = _mm512_set1_ps(-sc[t]);
    const std::uint8_t* b = bits + t * stride;
    float* o = y + t * ystride;
    for (int c = 0; c < nfull; ++c) _mm512_storeu_ps(o + 16 * c, _mm512_mask_blend_ps(load_mask16(b + 2 * c), nv, pv));
    if (half)  // the last 8 rows: one byte; lanes 8..15 (padding) zero
      _mm512_storeu_ps(o + 16 * nfull,
                       _mm512_maskz_mov_ps(0x00ff, _mm512_mask_blend_ps(static_cast<__mmask16>(b[2 * nfull]), nv, pv)));
  }
}

void decode_domain(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                   float* y) {
  const std::uint8_t* scal = block + n * sk.sign_bytes;
  const std::size_t mp = static_cast<std::size_t>(sk.mp);
  alignas(64) float sc[256];
  for (std::size_t b0 = t0; b0 < t1; b0 += 256) {
    const std::size_t b1 = std::min(t1, b0 + 256);
    for (std::size_t t = b0; t < b1; ++t) sc[t - b0] = sk.kappa_f * half_at(scal + 2 * t);
    sign_expand(sk, block + b0 * sk.sign_bytes, sk.sign_bytes, b1 - b0, sc, y + (b0 - t0) * mp, mp);
  }
}

}  // namespace

const QjlKernels& qjl_avx512_kernels() {
  static const QjlKernels k{"avx512", encode, decode, project, scores, accumulate, rowcomb, signs, sumsq, colacc,
                                sign_sums, sign_accumulate, sign_expand, decode_domain};
  return k;
}

}  // namespace turbokv::cpu::detail
