// PVQ (product VQ with smoothing + Hadamard, src/ref/pvq.cpp) prepared for the
// per-ISA kernels src/cpu/pvq_avx2.cpp, pvq_avx512.cpp. Conventions in
// rvq_internal.h. Baseline-safe; not public API.
#pragma once

#include "rvq_internal.h"

namespace turbokv::cpu::detail::vq {

struct PvqState {
  int dim = 0;
  int g = 0, c = 0, k = 0, nsub = 0;  ///< sub-vector length, code bits, K = 2^c, d / g
  int nsub_pad = 0;                   ///< nsub rounded up to 16 (rows of the query's look-up table)
  std::size_t code_bytes = 0;         ///< packed_bytes(nsub, c)
  RotPlan rot;
  std::vector<float> lambda;          ///< [d] smoothing factors (fp16-rounded)
  std::vector<float> cent;            ///< [nsub][K][g] centroids
  std::vector<float> cent_t;          ///< [nsub][g][K] the same (nearest-centroid search)
};

/// Query state of the PVQ fast path: [d] q' = Pi (lambda * q) (fp32; the codec-domain
/// query), then LUT[s][k] = <q'_s, C_s[k]>, [nsub_pad][K] fp32, rows >= nsub zero.
/// The kernels' `lut` points at the LUT.
struct PvqKernels {
  /// x: [count, d] -> count tokens' codes (argmin_k ||z_s - C_s[k]||^2, ties to the lowest k).
  void (*encode)(const PvqState& st, const float* x, std::size_t count, std::uint8_t* codes);
  /// codes of count tokens -> out: [count, d] = lambda * Pi^T concat_s C_s[code_s], bit-exact.
  void (*decode)(const PvqState& st, const std::uint8_t* codes, std::size_t count, float* out);
  /// out[t] = sum_s lut[s * K + code_{t,s}] (gathers from the look-up table).
  void (*scores)(const PvqState& st, const float* lut, const std::uint8_t* codes, std::size_t count, float* out);
  /// acc[d] += sum_t w[t] * concat_s C_s[code_{t,s}] (rotated, smoothed domain).
  void (*accumulate)(const PvqState& st, const std::uint8_t* codes, std::size_t count, const float* w, float* acc);
  /// y: [count, d] = concat_s C_s[code_{t,s}], the codec domain (rotated, smoothed) of count tokens.
  void (*decode_domain)(const PvqState& st, const std::uint8_t* codes, std::size_t count, float* y);
};

/// The kernels for the reference's nominal bits (1..4).
const PvqKernels& pvq_avx2_kernels(int bits);
const PvqKernels& pvq_avx512_kernels(int bits);

}  // namespace turbokv::cpu::detail::vq
