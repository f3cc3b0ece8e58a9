// Internal helpers shared by the reference codecs (not public API).
#pragma once

#include <cstdint>
#include <vector>

#include "turbokv/codebook.h"
#include "turbokv/codec.h"
#include "turbokv/formats.h"
#include "turbokv/rotation.h"

namespace turbokv::ref {

/// Rotation + Lloyd-Max scalar quantizer on a unit vector (TurboQuant-MSE core).
/// encode: y = Pi x, norm = sqrt(sumsq_spec(x)), codes_i = cb.quantize(y_i / norm);
/// returns the norm (0 for the zero vector, whose codes are cb.quantize(0)).
/// `unit` (optional, size dim) receives y_i / norm in fp32.
struct RotatedScalar {
  RotatedScalar(int dim, int bits, RotationKind rot, CodebookKind cbk, std::uint64_t seed);
  float encode(const float* x, std::uint8_t* packed, float* unit) const;
  /// y_hat (rotated domain, unit scale) from packed codes.
  void centroids(const std::uint8_t* packed, float* y) const;

  int dim, bits;
  Rotation rotation;
  const ScalarCodebook* codebook;
};

/// QJL sketch S: m x dim, rows i.i.d. N(0, I) or orthogonalised unit rows.
/// <q, r> is estimated by kappa * ||r|| * <S q, sign(S r)>.
struct Sketch {
  Sketch(int rows, int dim, bool orthogonal, std::uint64_t seed);
  /// Packs sign bits of S r (bit 1 for (S r)_i >= 0) into out[packed_bytes(m, 1)] (zeroed by caller).
  void signs(const float* r, std::uint8_t* out) const;
  /// out[m] = S q in fp64.
  void project(const double* q, double* out) const;
  /// out[dim] += scale * S^T s, s in {-1, +1}^m from packed bits.
  void transpose_signs(const std::uint8_t* bits, double scale, double* out) const;
  /// sum_i sq[i] * s_i for s from packed bits.
  static double signed_sum(const double* sq, const std::uint8_t* bits, int m);
  void transpose();

  int m, dim;
  bool orthogonal;
  std::vector<float> s;   // row-major m x dim
  std::vector<float> st;  // the same, transposed (dim x m), for row-parallel loops
  double kappa;          // sqrt(pi/2)/m (Gaussian) or 1/(m E|u_1|) (orthogonal unit rows)
};

/// Throws if cfg.bits is not one of the listed values.
void check_bits(const CodecConfig& cfg, const std::vector<double>& allowed);
int int_bits(const CodecConfig& cfg);

std::unique_ptr<Codec> make_tq_mse(const CodecConfig& cfg);
std::unique_ptr<Codec> make_tq_prod(const CodecConfig& cfg);
std::unique_ptr<Codec> make_qjl(const CodecConfig& cfg);
std::unique_ptr<Codec> make_rvq(const CodecConfig& cfg);
std::unique_ptr<Codec> make_pvq(const CodecConfig& cfg);
std::unique_ptr<Codec> make_polar(const CodecConfig& cfg);
std::unique_ptr<Codec> make_kivi(const CodecConfig& cfg);
std::unique_ptr<Codec> make_fp8(const CodecConfig& cfg);
std::unique_ptr<Codec> make_fp16(const CodecConfig& cfg);
/// Wraps `inner` so that it codes x - mu (see CodecConfig::center).
std::unique_ptr<Codec> make_centered(const CodecConfig& cfg, std::unique_ptr<Codec> inner);

}  // namespace turbokv::ref
