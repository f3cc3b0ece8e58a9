// turbokv — the one home of every encoded layout.
//
// A codec encodes a block of n tokens of one KV head (a whole sequence, or one
// page of a paged cache) into one buffer with two sections:
//
//   [ codes:   n * code_bytes bytes, token-major: token t at t * code_bytes ]
//   [ scalars: fp16 values, little-endian, starting at byte n * code_bytes   ]
//
// Inside a token's code bytes, packed codes use the LSB-first stream of
// turbokv/pack.h. Per-token scalars are token-major (token t's s-th scalar is
// scalar t * num_scalars + s). KIVI keys hold per-group scalars instead (see
// below). Nothing here depends on SIMD width or GPU tile shape.
//
// Per method (d = head_dim, m = sketch rows, b = bits):
//   tq-mse  b in 1..4:   codes packed(d, b) of the rotated unit vector;   scalars [||x||]
//   tq-mse  b + 0.5:     [outlier part: packed(d_o, b+1)][rest: packed(d - d_o, b)],
//                        d_o = d/2 channels chosen at calibration;        scalars [||x_o||, ||x_rest||]
//   tq-prod b in 1..4:   [MSE codes packed(d, b-1)][QJL signs packed(m, 1)]; scalars [||x||, gamma]
//                        gamma = ||u - u_mse|| of the unit vector's residual
//   qjl:                 signs packed(m, 1), bit 1 = (S k)_i >= 0;        scalars [||x||]
//   rvq     b in 1..4:   [stage 1 packed(d, b)][stage 2 packed(d, b)];    scalars [||x||]
//   pvq:                 packed(d/g, c) sub-vector codes (g, c from bits); no scalars
//   polar   b in 2..4:   [level-1 angles packed(d/2, b)][levels 2..4 angles packed(7d/16, max(1, b-2))],
//                        angles level by level, ascending index;        scalars: d/16 level-4 radii
//   kivi keys:           codes packed(d, b); scalars per group of G tokens, group-major:
//                        [channel][min, scale] for each of ceil(n/G) groups (last may be partial)
//   kivi values:         codes packed(d, b); scalars [group][min, scale] for d/G channel groups
//   fp8:                 d bytes e4m3 (OCP E4M3FN);                        scalars [scale = max|x|/448]
//   fp16:                d * 2 bytes fp16;                                no scalars
//
// Arithmetic that the bytes depend on is fixed here too, so fast paths can
// match the reference bit for bit (codes must be identical):
//   - every multiply-accumulate is a fp32 multiply and a separately rounded fp32
//     add (no fused multiply-add: the baseline x86-64 build has no FMA unit, and
//     a libm fma call per element is far too slow); the build passes
//     -ffp-contract=off, CUDA code uses __fmul_rn/__fadd_rn. What is fixed is
//     each rounded result: fma(+-1, y, o) rounds exactly like o +- y, so a
//     backend may use it for the Hadamard butterflies.
//   - sum of squares: 8 interleaved fp32 lanes, acc[i % 8] += x_i * x_i
//     for ascending i, then ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7));
//     norm = sqrtf(sum); the unit coordinate is y_i * (1.0f / norm).
//   - the rotation (turbokv/rotation.h) and sketch rows: acc += a_j * x_j in ascending j.
//   - nearest centroid: the number of fp32 midpoints strictly below the value.
//   - PolarQuant's polar transform: fp64 multiplies, adds, square roots and compares only, no libm
//     call per vector (atan2 and hypot differ between libms, so codes that depended on their last bit
//     could not be reproduced by another backend): polar_radius, polar_cell1, polar_cell_hi below. The
//     level 2..4 tangents they compare against come from the host libm once per codec (like the codebooks).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "turbokv/half.h"
#include "turbokv/pack.h"

namespace turbokv {

/// Per-token layout of a codec's block: code bytes and fp16 scalars per token.
struct TokenLayout {
  std::size_t code_bytes = 0;
  std::size_t num_scalars = 0;

  /// Start of token t's code bytes.
  TURBOKV_HD const std::uint8_t* codes(const std::uint8_t* block, std::size_t t) const {
    return block + t * code_bytes;
  }
  TURBOKV_HD std::uint8_t* codes(std::uint8_t* block, std::size_t t) const { return block + t * code_bytes; }
  /// Scalar s of token t in a block of n tokens, as fp32.
  TURBOKV_HD float scalar(const std::uint8_t* block, std::size_t n, std::size_t t, std::size_t s) const {
    const std::uint8_t* p = block + n * code_bytes + (t * num_scalars + s) * 2;
    return half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
  }
  /// Stores scalar s of token t (rounded to fp16) and returns the rounded value.
  TURBOKV_HD float set_scalar(std::uint8_t* block, std::size_t n, std::size_t t, std::size_t s, float v) const {
    const std::uint16_t h = float_to_half(v);
    std::uint8_t* p = block + n * code_bytes + (t * num_scalars + s) * 2;
    p[0] = static_cast<std::uint8_t>(h & 0xff);
    p[1] = static_cast<std::uint8_t>(h >> 8);
    return half_to_float(h);
  }
  /// Bytes of a block of n tokens.
  TURBOKV_HD std::size_t block_bytes(std::size_t n) const { return n * (code_bytes + 2 * num_scalars); }
};

/// Reads/writes a little-endian fp16 at p.
TURBOKV_HD float load_half(const std::uint8_t* p) {
  return half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
}
TURBOKV_HD float store_half_bits(std::uint8_t* p, std::uint16_t h) {
  p[0] = static_cast<std::uint8_t>(h & 0xff);
  p[1] = static_cast<std::uint8_t>(h >> 8);
  return half_to_float(h);
}
TURBOKV_HD float store_half(std::uint8_t* p, float v) {
  const std::uint16_t h = float_to_half(v);
  p[0] = static_cast<std::uint8_t>(h & 0xff);
  p[1] = static_cast<std::uint8_t>(h >> 8);
  return half_to_float(h);
}

/// fp64 a * b, a + b and sqrt(a), each correctly rounded on host and device (nvcc would otherwise
/// contract a multiply and an add into an fma in device code; host code relies on the build's
/// -ffp-contract=off, which turbokv's CMake sets for every file).
TURBOKV_HD double spec_dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TURBOKV_HD double spec_dadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
TURBOKV_HD double spec_dsqrt(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// PolarQuant (Han et al., arXiv 2502.02617, Sec. 3): the radius of a pair, sqrt(a0 * a0 + a1 * a1)
/// in fp64 with each operation rounded. Level 1 takes the pair (y_2i, y_2i+1) of the rotated fp32
/// vector (the squares are then exact), levels 2..4 the pair of the previous level's fp64 radii.
TURBOKV_HD double polar_radius(double a0, double a1) {
  return spec_dsqrt(spec_dadd(spec_dmul(a0, a0), spec_dmul(a1, a1)));
}

/// tan(pi / 8) = sqrt(2) - 1, the fp64 value nearest to it.
constexpr double kPolarTanPi8 = 0x1.a827999fcef32p-2;

/// PolarQuant level-1 code of the pair (a0, a1) (fp32 values): which of the 2^b equal cells of the
/// angle psi = atan2(a1, a0) in [0, 2 pi) (counter-clockwise from +x; cell c covers
/// [c, c + 1) * 2 pi / 2^b) holds it, b = 2, 3, 4, decided by compares instead of atan2:
///   - the quadrant q from the signs, and (u, v) = the pair turned by -q pi / 2 (u > 0, v >= 0);
///     a pair on the x axis (a1 = +-0) is at angle 0, or pi when a0 < 0 or a0 = -0 (atan2's signed
///     zeros; (0, 0) is at 0);
///   - b >= 3: the upper octant of the quadrant iff v >= u (a diagonal belongs to the upper cell);
///   - b = 4: in the lower octant the upper half iff v >= t * u, in the upper octant iff u <= t * v,
///     t = kPolarTanPi8 (fp64 products; no fp32 pair lies on these boundaries exactly).
/// Returns q 2^(b-2) + the cell within the quadrant. Axes and diagonals give the cells that a
/// correctly rounded atan2 gives them; elsewhere the two can differ only within ~1e-16 of a boundary.
TURBOKV_HD int polar_cell1(double a0, double a1, int b) {
  const int per_quadrant = 1 << (b - 2);
  if (a1 == 0.0) {
    std::uint64_t bits;
    std::memcpy(&bits, &a0, sizeof bits);
    return (bits >> 63) != 0 ? 2 * per_quadrant : 0;  // the sign bit: a0 < 0 or a0 = -0
  }
  int q;
  double u, v;
  if (a1 > 0.0) {
    if (a0 > 0.0) q = 0, u = a0, v = a1;
    else q = 1, u = a1, v = -a0;
  } else {
    if (a0 < 0.0) q = 2, u = -a0, v = -a1;
    else q = 3, u = -a1, v = a0;
  }
  int sub = 0;
  if (b == 3) {
    sub = v >= u ? 1 : 0;
  } else if (b == 4) {
    sub = v < u ? (v >= spec_dmul(kPolarTanPi8, u) ? 1 : 0) : (u <= spec_dmul(kPolarTanPi8, v) ? 3 : 2);
  }
  return q * per_quadrant + sub;
}

/// PolarQuant level 2..4 code of the radius pair (a0, a1) (fp64, >= 0): the number of the level's
/// boundaries b_k (ascending, in (0, pi/2)) that the angle atan2(a1, a0) exceeds, decided as
/// #{k < nb : a1 > tan_k * a0} with tan_k the fp64 tangent of b_k (ref::Polar::level_tangents) and
/// fp64 products. (0, 0) gives 0; a0 = 0 < a1 gives nb.
TURBOKV_HD unsigned polar_cell_hi(double a0, double a1, const double* tan_k, int nb) {
  unsigned c = 0;
  for (int k = 0; k < nb; ++k) c += a1 > spec_dmul(tan_k[k], a0) ? 1u : 0u;
  return c;
}

/// Sum of squares in the order the format fixes (see above). x: size n.
TURBOKV_HD float sumsq_spec(const float* x, std::size_t n) {
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) a[i & 7] += x[i] * x[i];
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

}  // namespace turbokv
