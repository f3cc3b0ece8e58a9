// PolarQuant (src/ref/polar.cpp; Han et al., arXiv 2502.02617) prepared for
// the per-ISA kernels src/cpu/polar_avx2.cpp, polar_avx512.cpp. Conventions in
// rvq_internal.h. Baseline-safe; not public API.
#pragma once

#include "rvq_internal.h"

namespace turbokv::cpu::detail::vq {

struct PolarState {
  int dim = 0, b1 = 0, b2 = 0;         ///< d; level-1 angle bits; level 2..4 angle bits
  int n_hi = 0;                        ///< 7d/16 angles of levels 2..4
  std::size_t l1_bytes = 0;            ///< packed_bytes(d/2, b1)
  std::size_t code_bytes = 0;          ///< l1_bytes + packed_bytes(n_hi, b2)
  RotPlan rot;
  alignas(64) float cos1[16] = {};     ///< level-1 centroid cosines (fp32 table of the reference)
  alignas(64) float sin1[16] = {};
  float cosh[4][16] = {}, sinh[4][16] = {};  ///< levels 2..4 (index l - 1)
  double tanh[4][3] = {};              ///< levels 2..4: fp64 tangents of the boundaries (index l - 1)
};

struct PolarKernels {
  /// x: [count, d] -> codes of count tokens and out16: count * d/16 fp16 radii (token-major).
  /// The rotation is SIMD; the polar transform is formats.h's fp64 arithmetic (polar_radius, polar_cell1,
  /// polar_cell_hi), so the bytes are the reference's.
  void (*encode)(const PolarState& st, const float* x, std::size_t count, std::uint8_t* codes,
                 std::uint8_t* radii16);
  /// -> out: [count, d] = Pi^T y_hat, bit-exact.
  void (*decode)(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16, std::size_t count,
                 float* out);
  /// out[t] = <qr, y_hat_t>; qr: [d] rotated query.
  void (*scores)(const PolarState& st, const float* qr, const std::uint8_t* codes, const std::uint8_t* radii16,
                 std::size_t count, float* out);
  /// acc[d] += sum_t w[t] y_hat_t (rotated domain).
  void (*accumulate)(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16, std::size_t count,
                     const float* w, float* acc);
  /// y: [count, d] = y_hat_t, the codec domain (rotated) of count tokens.
  void (*decode_domain)(const PolarState& st, const std::uint8_t* codes, const std::uint8_t* radii16,
                        std::size_t count, float* y);
};

/// The kernels for level-1 bits b1 (2..4).
const PolarKernels& polar_avx2_kernels(int b1);
const PolarKernels& polar_avx512_kernels(int b1);

}  // namespace turbokv::cpu::detail::vq
