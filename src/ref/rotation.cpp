// Reference rotations (format fixed in include/turbokv/rotation.h).
#include "turbokv/rotation.h"

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <string>

#include "turbokv/error.h"
#include "turbokv/rng.h"

namespace turbokv {

RotationKind parse_rotation(const char* name) {
  const std::string s = name;
  if (s == "none") return RotationKind::kNone;
  if (s == "hadamard") return RotationKind::kHadamard;
  if (s == "haar") return RotationKind::kHaar;
  throw std::invalid_argument("parse_rotation: rotation = " + s + ": expected none, hadamard or haar");
}

const char* rotation_name(RotationKind kind) {
  switch (kind) {
    case RotationKind::kNone: return "none";
    case RotationKind::kHadamard: return "hadamard";
    case RotationKind::kHaar: return "haar";
  }
  return "?";
}

float Rotation::hadamard_scale(int size) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(size))); }

template <class T>
static void fwht_impl(T* x, int p) {
  for (int h = 1; h < p; h <<= 1)
    for (int i = 0; i < p; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const T a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}
void fwht_inplace(float* x, int p) { fwht_impl(x, p); }
void fwht_inplace(double* x, int p) { fwht_impl(x, p); }

std::vector<float> haar_orthogonal(int dim, Rng& rng) {
  Eigen::MatrixXd g(dim, dim);
  for (int i = 0; i < dim; ++i)
    for (int j = 0; j < dim; ++j) g(i, j) = rng.normal();
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
  Eigen::MatrixXd q = qr.householderQ();
  Eigen::MatrixXd r = qr.matrixQR().triangularView<Eigen::Upper>();
  for (int j = 0; j < dim; ++j)
    if (r(j, j) < 0) q.col(j) = -q.col(j);
  std::vector<float> out(static_cast<std::size_t>(dim) * dim);
  for (int i = 0; i < dim; ++i)
    for (int j = 0; j < dim; ++j) out[static_cast<std::size_t>(i) * dim + j] = static_cast<float>(q(i, j));
  return out;
}

Rotation::Rotation(int dim, RotationKind kind, std::uint64_t seed) : dim_(dim), kind_(kind) {
  check_arg(dim >= 1, "Rotation", "dim", dim, "must be >= 1");
  Rng rng(seed);
  if (kind == RotationKind::kHadamard && (dim & (dim - 1)) != 0) kind_ = RotationKind::kHaar;
  if (kind_ == RotationKind::kHadamard) {
    signs_.resize(static_cast<std::size_t>(dim));
    for (auto& s : signs_) s = rng.sign();
  } else if (kind_ == RotationKind::kHaar) {
    matrix_ = haar_orthogonal(dim, rng);
    matrix_t_.resize(matrix_.size());
    for (int i = 0; i < dim; ++i)
      for (int j = 0; j < dim; ++j)
        matrix_t_[static_cast<std::size_t>(j) * dim + i] = matrix_[static_cast<std::size_t>(i) * dim + j];
  }
}

template <class T>
void Rotation::forward_impl(const T* x, T* y) const {
  const int d = dim_;
  if (kind_ == RotationKind::kHaar) {
    // y_i = sum_j Pi[i][j] x_j in ascending j; j outside so the rows vectorise.
    for (int i = 0; i < d; ++i) y[i] = 0;
    for (int j = 0; j < d; ++j) {
      const float* col = &matrix_t_[static_cast<std::size_t>(j) * d];
      const T xj = x[j];
      for (int i = 0; i < d; ++i) y[i] += static_cast<T>(col[i]) * xj;
    }
    return;
  }
  std::memcpy(y, x, sizeof(T) * static_cast<std::size_t>(d));
  if (kind_ == RotationKind::kNone) return;
  for (int i = 0; i < d; ++i) y[i] *= static_cast<T>(signs_[static_cast<std::size_t>(i)]);
  fwht_impl(y, d);
  const T scale = static_cast<T>(hadamard_scale(d));
  for (int i = 0; i < d; ++i) y[i] *= scale;
}

template <class T>
void Rotation::inverse_impl(const T* y, T* x) const {
  const int d = dim_;
  if (kind_ == RotationKind::kHaar) {
    for (int j = 0; j < d; ++j) x[j] = 0;
    for (int i = 0; i < d; ++i) {
      const float* row = &matrix_[static_cast<std::size_t>(i) * d];
      for (int j = 0; j < d; ++j) x[j] += static_cast<T>(row[j]) * y[i];
    }
    return;
  }
  std::memcpy(x, y, sizeof(T) * static_cast<std::size_t>(d));
  if (kind_ == RotationKind::kNone) return;
  fwht_impl(x, d);
  const T scale = static_cast<T>(hadamard_scale(d));
  for (int i = 0; i < d; ++i) x[i] *= scale * static_cast<T>(signs_[static_cast<std::size_t>(i)]);
}

void Rotation::forward(const float* x, float* y) const { forward_impl(x, y); }
void Rotation::inverse(const float* y, float* x) const { inverse_impl(y, x); }
void Rotation::forward(const double* x, double* y) const { forward_impl(x, y); }
void Rotation::inverse(const double* y, double* x) const { inverse_impl(y, x); }

}  // namespace turbokv
