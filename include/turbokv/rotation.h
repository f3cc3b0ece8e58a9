// turbokv — seeded random rotations applied before scalar quantization.
//
// TurboQuant (Zandieh et al., arXiv 2504.19874, Sec. 3) quantizes Pi*x for a
// random orthogonal Pi, which makes every coordinate of a unit vector follow
// the same known density whatever the input. Two kinds are provided:
//
// kHadamard (default): Pi = H_dim * D / sqrt(dim): random signs D[i] from
//   Rng(seed), then the Walsh-Hadamard transform, O(dim log dim). The float
//   operation order is part of the format, so every backend reproduces it bit
//   for bit: FWHT for h = 1, 2, 4, ..., dim/2: for each pair (j, j+h) with
//   j & h == 0, ascending j: (a, b) -> (a + b, a - b); then every element is
//   multiplied by the float nearest to 1/sqrt(dim).
//   If dim is not a power of two (80, 96, 112, ...) the rotation is the dense
//   Haar rotation below (kind() reports kHaar). A structured alternative,
//   three overlapping power-of-two Hadamard blocks ([0,p), [d-p,d), [0,p)),
//   was tried first: it is orthogonal and O(d log d) but a fixed input's
//   rotated coordinates do not follow the density the codebooks assume; on
//   Gaussian rows with two outlier channels (tests/test_codecs.cpp data)
//   TurboQuant-MSE at 3 bits, dim 96 measured 11.6% above its Lloyd-Max
//   distortion. The dense rotation matches it in expectation for any input
//   and costs dim^2 multiply-adds per encoded vector.
// kHaar: a dense Haar-distributed orthogonal matrix (QR of a dim x dim
//   Gaussian matrix from Rng(seed), columns sign-fixed by diag(R)), stored in
//   fp32, row-major. y_i = sum_j Pi[i][j] x_j accumulated (multiply, then
//   add) in ascending j. O(dim^2) per vector.
// kNone: the identity.
#pragma once

#include <cstdint>
#include <vector>

namespace turbokv {

enum class RotationKind { kNone, kHadamard, kHaar };

/// Parses "none", "hadamard" or "haar"; throws std::invalid_argument otherwise.
RotationKind parse_rotation(const char* name);
const char* rotation_name(RotationKind kind);

class Rotation {
 public:

  /// dim: vector length, >= 1 (multiple of 8 for the quantizers). Throws
  /// std::invalid_argument for dim < 1.
  Rotation(int dim, RotationKind kind, std::uint64_t seed);

  int dim() const { return dim_; }
  /// The rotation actually used (kHaar for kHadamard at a non-power-of-two dim).
  RotationKind kind() const { return kind_; }

  /// y = Pi x. x, y: size dim; must not alias.
  void forward(const float* x, float* y) const;
  /// x = Pi^T y. y, x: size dim; must not alias.
  void inverse(const float* y, float* x) const;
  /// Forward on fp64 data (for exact references and queries); must not alias.
  void forward(const double* x, double* y) const;
  /// Inverse on fp64 data; must not alias.
  void inverse(const double* y, double* x) const;

  /// kHadamard only: the random signs D, size dim, each +1 or -1.
  const std::vector<float>& signs() const { return signs_; }
  /// kHaar only: the dim x dim matrix, row-major.
  const std::vector<float>& matrix() const { return matrix_; }
  /// Normalisation factor of the FWHT (the float nearest 1/sqrt(size)).
  static float hadamard_scale(int size);

 private:
  template <class T>
  void forward_impl(const T* x, T* y) const;
  template <class T>
  void inverse_impl(const T* y, T* x) const;

  int dim_;
  RotationKind kind_;
  std::vector<float> signs_;
  std::vector<float> matrix_;
  std::vector<float> matrix_t_;  // transposed copy for row-parallel loops
};

class Rng;
/// A dim x dim Haar-distributed orthogonal matrix, fp32 row-major: QR of a
/// Gaussian matrix drawn from rng (row by row), columns sign-fixed by diag(R).
/// Used by kHaar rotations and orthogonalised QJL sketches.
std::vector<float> haar_orthogonal(int dim, Rng& rng);

/// In-place unnormalised FWHT of x[0..p), p a power of two, in the order the
/// format fixes (h = 1, 2, 4, ...). Exposed so fast paths and tests share it.
void fwht_inplace(float* x, int p);
void fwht_inplace(double* x, int p);

}  // namespace turbokv
