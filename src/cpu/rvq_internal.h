// Internal interface between the baseline orchestration of the three vector
// quantizers' CPU fast paths (src/cpu/rvq.cpp, pvq.cpp, polar.cpp) and their
// per-ISA kernels (src/cpu/<method>_avx2.cpp, <method>_avx512.cpp). This file
// holds what the three share (the prepared rotation) and the RVQ part; PVQ and
// PolarQuant add pvq_internal.h and polar_internal.h. Baseline-safe: no
// intrinsics. Not public API.
//
// Conventions of every kernel here: head_dim d is a multiple of 16 in
// 16..kMaxDim; x/out rows are [d] fp32 at any alignment; `codes` points at
// token 0 of a run of `count` tokens of code_bytes each (token-major, the
// block layout of turbokv/formats.h); `norms16` at the first of those tokens'
// little-endian fp16 scalars. Encode kernels write every code byte of their
// tokens (the buffer is zeroed by CpuCodec::encode first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "turbokv/codebook.h"
#include "turbokv/rotation.h"

namespace turbokv::cpu::detail::vq {

/// Largest head_dim the kernels take (their stack buffers are this long).
constexpr int kMaxDim = 1024;

/**
 * A turbokv::Rotation prepared for SIMD kernels that reproduce its fp32
 * results bit for bit (operation order of turbokv/rotation.h):
 * kHadamard: y = (H (D x)) * scale, butterflies (a + b, a - b), inverse
 * x = H y * (scale * D); kHaar: y_i = sum_j Pi[i][j] x_j, ascending j, multiply
 * then add; kNone: the identity.
 */
struct RotPlan {
  int dim = 0;
  RotationKind kind = RotationKind::kNone;
  std::vector<float> signs;      ///< kHadamard: D, size dim
  std::vector<float> inv_scale;  ///< kHadamard: scale * D[i] (fp32), size dim
  float scale = 1;               ///< kHadamard: the float nearest 1/sqrt(dim)
  std::vector<float> mat;        ///< kHaar: Pi row-major, dim x dim
  std::vector<float> mat_t;      ///< kHaar: Pi transposed (mat_t[j*dim+i] = Pi[i][j])
  const Rotation* rotation = nullptr;  ///< the source (its fp64 paths serve queries and finalize)

  /// Prepares r (which must outlive the plan). Defined in src/cpu/rvq.cpp.
  void init(const Rotation& r);
};

/// Two-stage residual scalar quantizer (src/ref/rvq.cpp) prepared for the kernels.
struct RvqState {
  int dim = 0, bits = 0;             ///< d; b bits per stage and coordinate (1..4)
  std::size_t stage_bytes = 0;       ///< packed_bytes(d, b)
  std::size_t code_bytes = 0;        ///< 2 * stage_bytes
  RotPlan rot;
  alignas(64) float c1[16] = {};     ///< stage-1 centroids (entries >= 2^b: 0)
  alignas(64) float c2[16] = {};     ///< stage-2 (residual) centroids
  alignas(64) float bnd1[16] = {};   ///< stage-1 boundaries (fp32 midpoints), 2^b - 1 used
  alignas(64) float bnd2[16] = {};   ///< stage-2 boundaries
  int nbnd = 0;                      ///< 2^b - 1
};

/// RVQ kernels of one ISA (src/cpu/rvq_avx2.cpp, rvq_avx512.cpp).
struct RvqKernels {
  /// x: [count, d] fp32 -> both stages' codes of count tokens; norms: [count] fp32 ||x_t||.
  void (*encode)(const RvqState& st, const float* x, std::size_t count, std::uint8_t* codes, float* norms);
  /// codes, norms16 of count tokens -> out: [count, d] = norm * Pi^T (c1 + c2), bit-exact.
  void (*decode)(const RvqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                 float* out);
  /// out[t] = norm_t * <qr, c1 + c2> for count tokens; qr: [d] rotated query (fp32).
  void (*scores)(const RvqState& st, const float* qr, const std::uint8_t* codes, const std::uint8_t* norms16,
                 std::size_t count, float* out);
  /// acc[d] += sum_t w[t] * norm_t * (c1 + c2)_t (rotated domain).
  void (*accumulate)(const RvqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                     const float* w, float* acc);
  /// y: [count, d] = norm_t * (c1 + c2)_t, the codec domain (rotated) of count tokens.
  void (*decode_domain)(const RvqState& st, const std::uint8_t* codes, const std::uint8_t* norms16,
                        std::size_t count, float* y);
};

/// The kernels for b = bits (1..4).
const RvqKernels& rvq_avx2_kernels(int bits);
const RvqKernels& rvq_avx512_kernels(int bits);

}  // namespace turbokv::cpu::detail::vq
