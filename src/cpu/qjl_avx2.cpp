// QJL kernels, AVX2 (FMA, F16C, BMI2). Compiled with its own flags
// (CMakeLists.txt); called only when simd_level() is kAvx2. A byte of packed
// sign bits (8 rows) is broadcast and shifted lane-wise so that row i's bit
// lands in lane i's sign bit, which blendv reads directly. Operation order:
// qjl_kernels.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qjl_kernels.h"

namespace turbokv::cpu::detail {
namespace {

inline float half_at(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}
/// Lane i's sign bit = bit i of byte b.
inline __m256 sign_mask8(std::uint8_t b) {
  const __m256i shl = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  return _mm256_castsi256_ps(_mm256_sllv_epi32(_mm256_set1_epi32(b), shl));
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
  __m256 a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm256_setzero_ps();
  for (int j = 0; j < nj; ++j) {
    const __m256 xj = _mm256_set1_ps(x[j]);
    const float* col = at + static_cast<std::size_t>(j) * ldt;
    for (int b = 0; b < NB; ++b) a[b] = _mm256_add_ps(a[b], _mm256_mul_ps(_mm256_loadu_ps(col + 8 * b), xj));
  }
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out + 8 * b, a[b]);
}

void colacc(const float* at, std::size_t ldt, int rows, const float* x, int nj, float* out) {
  for (int i0 = 0; i0 < rows; i0 += 64) {
    const float* a = at + i0;
    float* o = out + i0;
    switch (std::min(8, (rows - i0) / 8)) {
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
  alignas(32) float acc[kQjlMaxRows];
  colacc(sk.st.data(), static_cast<std::size_t>(sk.mp), sk.mp, r, sk.d, acc);
  const __m256 zero = _mm256_setzero_ps();
  for (int i = 0; i < sk.m; i += 8)
    out[i / 8] = static_cast<std::uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(acc + i), zero, _CMP_GE_OQ)));
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
  __m256d acc[NB];
  for (int b = 0; b < NB; ++b) acc[b] = _mm256_loadu_pd(y + 4 * b);
  for (int i = 0; i < rows; ++i) {
    const __m256d c = _mm256_set1_pd(coef[i]);
    const float* row = a + static_cast<std::size_t>(i) * lda;
    for (int b = 0; b < NB; ++b)
      acc[b] = _mm256_add_pd(acc[b], _mm256_mul_pd(c, _mm256_cvtps_pd(_mm_loadu_ps(row + 4 * b))));
  }
  for (int b = 0; b < NB; ++b) _mm256_storeu_pd(y + 4 * b, acc[b]);
}

void rowcomb(const float* a, std::size_t lda, int rows, int cols, const double* coef, double* y) {
  for (int j0 = 0; j0 < cols; j0 += 32) {
    const float* aj = a + j0;
    double* yj = y + j0;
    switch (std::min(8, (cols - j0) / 4)) {
      case 2: rowcomb_block<2>(aj, lda, rows, coef, yj); break;
      case 4: rowcomb_block<4>(aj, lda, rows, coef, yj); break;
      case 6: rowcomb_block<6>(aj, lda, rows, coef, yj); break;
      default: rowcomb_block<8>(aj, lda, rows, coef, yj); break;
    }
  }
}

void decode(const SketchState& sk, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
            float* out) {
  const int d = sk.d;
  alignas(32) double coef[kQjlMaxRows];
  alignas(32) double y[kQjlMaxDim];
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* bits = codes + t * sk.sign_bytes;
    const double scale = sk.kappa * static_cast<double>(half_at(norms16 + 2 * t));
    for (int i = 0; i < sk.m; ++i) coef[i] = ((bits[i >> 3] >> (i & 7)) & 1) ? scale : -scale;
    std::fill(y, y + d, 0.0);
    rowcomb(sk.s.data(), static_cast<std::size_t>(d), sk.m, d, coef, y);
    float* o = out + t * static_cast<std::size_t>(d);
    for (int j = 0; j < d; j += 4) _mm_storeu_ps(o + j, _mm256_cvtpd_ps(_mm256_load_pd(y + j)));
  }
}

template <int NB>
inline void project_block(const float* at, std::size_t ldt, const double* q, int nj, float* out) {
  __m256d a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm256_setzero_pd();
  for (int j = 0; j < nj; ++j) {
    const __m256d qj = _mm256_set1_pd(q[j]);
    const float* col = at + static_cast<std::size_t>(j) * ldt;
    for (int b = 0; b < NB; ++b)
      a[b] = _mm256_add_pd(a[b], _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(col + 4 * b)), qj));
  }
  for (int b = 0; b < NB; ++b) _mm_storeu_ps(out + 4 * b, _mm256_cvtpd_ps(a[b]));
}

void project(const SketchState& sk, const double* q, float* sq) {
  const std::size_t ldt = static_cast<std::size_t>(sk.mp);
  for (int i0 = 0; i0 < sk.mp; i0 += 32) {
    switch (std::min(8, (sk.mp - i0) / 4)) {
      case 4: project_block<4>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); break;
      default: project_block<8>(sk.st.data() + i0, ldt, q, sk.d, sq + i0); break;
    }
  }
}

/// sum_i (bit_i ? sq_i : -sq_i) over m rows (m a multiple of 8).
inline float signed_sum(const float* sq, const float* nsq, const std::uint8_t* bits, int m) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= m; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_blendv_ps(_mm256_load_ps(nsq + i), _mm256_load_ps(sq + i), sign_mask8(bits[i / 8])));
    a1 = _mm256_add_ps(a1, _mm256_blendv_ps(_mm256_load_ps(nsq + i + 8), _mm256_load_ps(sq + i + 8),
                                            sign_mask8(bits[i / 8 + 1])));
  }
  if (i < m)
    a0 = _mm256_add_ps(a0, _mm256_blendv_ps(_mm256_load_ps(nsq + i), _mm256_load_ps(sq + i), sign_mask8(bits[i / 8])));
  const __m256 a = _mm256_add_ps(a0, a1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

void sign_sums(const SketchState& sk, const float* sq, const std::uint8_t* bits, std::size_t stride,
               std::size_t count, float* out) {
  alignas(32) float ps[kQjlMaxRows], ns[kQjlMaxRows];
  for (int i = 0; i < sk.m; i += 8) {
    const __m256 v = _mm256_loadu_ps(sq + i);
    _mm256_store_ps(ps + i, v);
    _mm256_store_ps(ns + i, _mm256_sub_ps(_mm256_setzero_ps(), v));
  }
  for (std::size_t t = 0; t < count; ++t) out[t] = signed_sum(ps, ns, bits + t * stride, sk.m);
}

void scores(const SketchState& sk, const float* sq, const std::uint8_t* block, std::size_t n, std::size_t t0,
            std::size_t t1, float* out) {
  sign_sums(sk, sq, block + t0 * sk.sign_bytes, sk.sign_bytes, t1 - t0, out);
  const std::uint8_t* scal = block + n * sk.sign_bytes;
  for (std::size_t t = t0; t < t1; ++t) out[t - t0] *= sk.kappa_f * half_at(scal + 2 * t);
}

template <int NB>
inline void accumulate_block(const std::uint8_t* bits0, std::size_t stride, std::size_t count, const float* wg,
                             int c0, float* acc) {
  __m256 a[NB];
  for (int b = 0; b < NB; ++b) a[b] = _mm256_loadu_ps(acc + 8 * (c0 + b));
  for (std::size_t t = 0; t < count; ++t) {
    const __m256 pw = _mm256_set1_ps(wg[t]), nw = _mm256_set1_ps(-wg[t]);
    const std::uint8_t* bits = bits0 + t * stride + c0;
    for (int b = 0; b < NB; ++b) a[b] = _mm256_add_ps(a[b], _mm256_blendv_ps(nw, pw, sign_mask8(bits[b])));
  }
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(acc + 8 * (c0 + b), a[b]);
}

void sign_accumulate(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                     const float* wg, float* acc) {
  const int nc = sk.m / 8;
  for (int c0 = 0; c0 < nc; c0 += 8) {
    switch (std::min(8, nc - c0)) {
      case 1: accumulate_block<1>(bits, stride, count, wg, c0, acc); break;
      case 2: accumulate_block<2>(bits, stride, count, wg, c0, acc); break;
      case 3: accumulate_block<3>(bits, stride, count, wg, c0, acc); break;
      case 4: accumulate_block<4>(bits, stride, count, wg, c0, acc); break;
      case 5: accumulate_block<5>(bits, stride, count, wg, c0, acc); break;
      case 6: accumulate_block<6>(bits, stride, count, wg, c0, acc); break;
      case 7: accumulate_block<7>(bits, stride, count, wg, c0, acc); break;
      default: accumulate_block<8>(bits, stride, count, wg, c0, acc); break;
    }
  }
}

void accumulate(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                const float* w, float* acc) {
  const std::uint8_t* scal = block + n * sk.sign_bytes;
  for (std::size_t b0 = t0; b0 < t1; b0 += 256) {  // weights w * kappa * ||k||, 256 tokens at a time
    const std::size_t b1 = std::min(t1, b0 + 256);
    alignas(32) float wg[256];
    for (std::size_t t = b0; t < b1; ++t) wg[t - b0] = w[t - t0] * sk.kappa_f * half_at(scal + 2 * t);
    sign_accumulate(sk, block + b0 * sk.sign_bytes, sk.sign_bytes, b1 - b0, wg, acc);
  }
}


void sign_expand(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                 const float* sc, float* y, std::size_t ystride) {
  const int nc = sk.m / 8;
  for (std::size_t t = 0; t < count; ++t) {
    const __m256 pv = _mm256_set1_ps(sc[t]), nv = _mm256_set1_ps(-sc[t]);
    const std::uint8_t* b = bits + t * stride;
    float* o = y + t * ystride;
    for (int c = 0; c < nc; ++c) _mm256_storeu_ps(o + 8 * c, _mm256_blendv_ps(nv, pv, sign_mask8(b[c])));
    if (sk.mp > sk.m) _mm256_storeu_ps(o + sk.m, _mm256_setzero_ps());  // mp - m is 0 or 8
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

const QjlKernels& qjl_avx2_kernels() {
  static const QjlKernels k{"avx2", encode, decode, project, scores, accumulate, rowcomb, signs, sumsq, colacc,
                                sign_sums, sign_accumulate, sign_expand, decode_domain};
  return k;
}

}  // namespace turbokv::cpu::detail
