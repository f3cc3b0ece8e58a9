// PVQ kernels (product VQ with smoothing + Hadamard, src/ref/pvq.cpp) over the
// traits of rvq_simd.h; stamped out by pvq_avx2.cpp and pvq_avx512.cpp. Never
// include from baseline files.
#pragma once

#include "pvq_internal.h"
#include "rvq_simd.h"
#include "turbokv/pack.h"

namespace turbokv::cpu::detail::vq {
namespace {

/// argmin_k ||z - C_s[k]||^2, ties to the lowest k: each distance is summed in
/// ascending coordinate order with separately rounded fp32 ops (as the
/// reference's nearest()), so the minimum and its first index are the reference's.
template <class V, int G>
inline int pvq_nearest(const PvqState& st, int s, const float* z) {
  constexpr int W = V::W;
  const int K = st.k;
  alignas(64) float dist[256];
  const float* ct = st.cent_t.data() + static_cast<std::size_t>(s) * G * K;
  auto mn = V::set1(INFINITY);
  for (int kv = 0; kv < K; kv += W) {
    auto acc = V::zero();
    for (int i = 0; i < G; ++i) {
      const auto e = V::sub(V::set1(z[i]), V::load(ct + i * K + kv));
      acc = V::add(acc, V::mul(e, e));
    }
    V::store(dist + kv, acc);
    mn = V::min(mn, acc);
  }
  const auto m = V::set1(V::hmin(mn));
  for (int kv = 0; kv < K; kv += W) {
    const unsigned hit = V::eq_mask(V::load(dist + kv), m);
    if (hit) return kv + __builtin_ctz(hit);
  }
  return 0;  // every distance is +inf (or NaN): the reference keeps k = 0
}

/// One token's codes -> one byte (C = 8: the bytes themselves) or unpacked 6-bit codes.
template <int C>
inline void pvq_codes(const PvqState& st, const std::uint8_t* tc, std::uint8_t* cb) {
  if constexpr (C == 8)
    std::memcpy(cb, tc, static_cast<std::size_t>(st.nsub));
  else
    unpack_groups<C>(tc, st.nsub, cb);  // C = 6: nsub = d / 2 is a multiple of 8
}

template <class V, int G, int C>
void pvq_encode(const PvqState& st, const float* x, std::size_t count, std::uint8_t* codes) {
  constexpr int W = V::W;
  const int d = st.dim;
  alignas(64) float xs[kMaxDim], z[kMaxDim];
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(d);
    for (int k = 0; k < d; k += W) V::store(xs + k, V::div(V::load(xt + k), V::load(st.lambda.data() + k)));
    rotate_forward<V>(st.rot, xs, z);
    std::uint8_t* out = codes + t * st.code_bytes;
    for (int s = 0; s < st.nsub; ++s) {
      const int best = pvq_nearest<V, G>(st, s, z + s * G);
      if constexpr (C == 8)
        out[s] = static_cast<std::uint8_t>(best);
      else
        put_code(out, static_cast<std::size_t>(s), C, static_cast<std::uint32_t>(best));
    }
  }
}

template <class V, int G, int C>
void pvq_decode(const PvqState& st, const std::uint8_t* codes, std::size_t count, float* out) {
  constexpr int W = V::W;
  const int d = st.dim, K = st.k;
  alignas(64) float z[kMaxDim], xr[kMaxDim];
  alignas(64) std::uint8_t cb[kMaxDim + 16];
  for (std::size_t t = 0; t < count; ++t) {
    pvq_codes<C>(st, codes + t * st.code_bytes, cb);
    for (int s = 0; s < st.nsub; ++s)
      std::memcpy(z + s * G, st.cent.data() + (static_cast<std::size_t>(s) * K + cb[s]) * G, sizeof(float) * G);
    rotate_inverse<V>(st.rot, z, xr);
    float* o = out + t * static_cast<std::size_t>(d);
    for (int k = 0; k < d; k += W) V::store(o + k, V::mul(V::load(st.lambda.data() + k), V::load(xr + k)));
  }
}

/// Look-up-table scoring: lane j of a vector holds sub-vector s = v + j; its
/// entry LUT[s * K + code_s] is gathered, and the lanes are summed at the end.
template <class V, int G, int C>
void pvq_scores(const PvqState& st, const float* lut, const std::uint8_t* codes, std::size_t count, float* out) {
  constexpr int W = V::W;
  alignas(64) std::uint8_t cb[kMaxDim + 16] = {};
  alignas(64) std::int32_t offs[kMaxDim + 16];
  for (int s = 0; s < st.nsub_pad; ++s) offs[s] = s * st.k;
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* tc = codes + t * st.code_bytes;
    auto acc = V::zero();
    if constexpr (C == 6) {
      // nsub = d / 2, a multiple of 8 (and of W = 16 unless d % 32 != 0): codes
      // unpacked in registers, 8 per 6 bytes; lanes >= nsub see code 0 of a zero LUT row.
      for (int v = 0; v < st.nsub; v += W) {
        const std::uint64_t a = load_le<6>(tc + v / 8 * 6);
        const std::uint64_t b = (W == 16 && v + 8 < st.nsub) ? load_le<6>(tc + v / 8 * 6 + 6) : 0;
        const __m128i c8 = _mm_set_epi64x(static_cast<long long>(_pdep_u64(b, kByteMask[6])),
                                          static_cast<long long>(_pdep_u64(a, kByteMask[6])));
        acc = V::add(acc, V::gather(lut, V::addi(V::u8_to_i(c8), V::loadi(offs + v))));
      }
    } else {
      pvq_codes<C>(st, tc, cb);  // bytes nsub.. stay 0: padding rows of the LUT are 0
      for (int v = 0; v < st.nsub; v += W)
        acc = V::add(acc, V::gather(lut, V::addi(V::load_u8(cb + v), V::loadi(offs + v))));
    }
    out[t] = V::hsum(acc);
  }
}

/// acc[s*G .. s*G+G) += w * C_s[code_s].
template <int G>
inline void pvq_axpy(float* acc, float w, const float* c) {
  if constexpr (G == 8) {
    _mm256_storeu_ps(acc, _mm256_fmadd_ps(_mm256_set1_ps(w), _mm256_loadu_ps(c), _mm256_loadu_ps(acc)));
  } else if constexpr (G == 4) {
    _mm_storeu_ps(acc, _mm_fmadd_ps(_mm_set1_ps(w), _mm_loadu_ps(c), _mm_loadu_ps(acc)));
  } else {
    acc[0] += w * c[0];
    acc[1] += w * c[1];
  }
}

template <class V, int G, int C>
void pvq_accumulate(const PvqState& st, const std::uint8_t* codes, std::size_t count, const float* w, float* acc) {
  const int K = st.k;
  alignas(64) std::uint8_t cb[kMaxDim + 16];
  for (std::size_t t = 0; t < count; ++t) {
    pvq_codes<C>(st, codes + t * st.code_bytes, cb);
    const float wt = w[t];
    if (wt == 0.0f) continue;
    for (int s = 0; s < st.nsub; ++s)
      pvq_axpy<G>(acc + s * G, wt, st.cent.data() + (static_cast<std::size_t>(s) * K + cb[s]) * G);
  }
}

/// Eight sub-vectors' codewords of 2 floats (G = 2: 3- and 4-bit PVQ) into y[0, 16): one 64-bit gather
/// per 8 codewords (4 on AVX2) at codeword indices off + code (off: s K for the eight sub-vectors s,
/// codes c8[0, 8)).
inline void pvq_gather8_g2(const float* cent, __m256i off, const std::uint8_t* c8, float* y) {
  const __m256i idx = _mm256_add_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c8))), off);
  const auto* base = reinterpret_cast<const long long*>(cent);
#ifdef __AVX512F__
  _mm512_storeu_si512(y, _mm512_i32gather_epi64(idx, base, 8));
#else
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm256_i32gather_epi64(base, _mm256_castsi256_si128(idx), 8));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 8),
                      _mm256_i32gather_epi64(base, _mm256_extracti128_si256(idx, 1), 8));
#endif
}

/// y[t * d + s * G + i] = C_s[code_{t,s}][i]: the codec domain (rotated, smoothed) of count tokens.
/// G = 2 (3- and 4-bit): 64-bit gathers of 8 codewords (session 17; the sub-vector-by-sub-vector copy
/// of 2 floats cost about four instructions per sub-vector, and 4-bit PVQ's copied its code bytes with
/// a run-time-sized memcpy call per token first).
template <class V, int G, int C>
void pvq_decode_domain(const PvqState& st, const std::uint8_t* codes, std::size_t count, float* y) {
  const int K = st.k, d = st.dim;
  alignas(64) std::uint8_t cb[kMaxDim + 16];
  if constexpr (G == 2) {  // nsub = d / 2: a multiple of 8
    const __m256i off0 = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(K));
    const __m256i step = _mm256_set1_epi32(8 * K);  // the next eight sub-vectors' codeword offsets
    for (std::size_t t = 0; t < count; ++t) {
      const std::uint8_t* tc = codes + t * st.code_bytes;
      const std::uint8_t* c = tc;  // C = 8: the code bytes themselves
      if constexpr (C != 8) {
        pvq_codes<C>(st, tc, cb);
        c = cb;
      }
      float* yt = y + t * static_cast<std::size_t>(d);
      __m256i off = off0;
      for (int s = 0; s < st.nsub; s += 8, off = _mm256_add_epi32(off, step))
        pvq_gather8_g2(st.cent.data(), off, c + s, yt + s * G);
    }
    return;
  }
  for (std::size_t t = 0; t < count; ++t) {
    pvq_codes<C>(st, codes + t * st.code_bytes, cb);
    float* yt = y + t * static_cast<std::size_t>(d);
    const float* cent = st.cent.data();
    for (int s = 0; s < st.nsub; ++s) {
      const float* c = cent + (static_cast<std::size_t>(s) * K + cb[s]) * G;
      if constexpr (G == 8) {
        _mm256_storeu_ps(yt + s * G, _mm256_loadu_ps(c));
      } else if constexpr (G == 4) {
        _mm_storeu_ps(yt + s * G, _mm_loadu_ps(c));
      } else {
        _mm_storel_pi(reinterpret_cast<__m64*>(yt + s * G), _mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64*>(c)));
      }
    }
  }
}

/// bits -> (g, c): 1 -> (8, 8), 2 -> (4, 8), 3 -> (2, 6), 4 -> (2, 8) (src/ref/pvq.cpp).
template <class V>
PvqKernels pvq_table(int bits) {
  switch (bits) {
    case 1: return {pvq_encode<V, 8, 8>, pvq_decode<V, 8, 8>, pvq_scores<V, 8, 8>, pvq_accumulate<V, 8, 8>,
                    pvq_decode_domain<V, 8, 8>};
    case 2: return {pvq_encode<V, 4, 8>, pvq_decode<V, 4, 8>, pvq_scores<V, 4, 8>, pvq_accumulate<V, 4, 8>,
                    pvq_decode_domain<V, 4, 8>};
    case 3: return {pvq_encode<V, 2, 6>, pvq_decode<V, 2, 6>, pvq_scores<V, 2, 6>, pvq_accumulate<V, 2, 6>,
                    pvq_decode_domain<V, 2, 6>};
    default: return {pvq_encode<V, 2, 8>, pvq_decode<V, 2, 8>, pvq_scores<V, 2, 8>, pvq_accumulate<V, 2, 8>,
                    pvq_decode_domain<V, 2, 8>};
  }
}

}  // namespace
}  // namespace turbokv::cpu::detail::vq
