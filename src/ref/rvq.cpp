// Two-stage residual scalar quantization (RVQ) after rotation.
//
//   y = Pi x / ||x||;  stage 1: c1 = Q1(y_i) with the Lloyd-Max codebook of the
//   coordinate density f_d (b bits);  stage 2: c2 = Q2(y_i - c1) with the
//   Lloyd-Max codebook of the stage-1 residual density (b bits), i.e. of
//   y - Q1(y) for y ~ f_d, solved on the same grid (turbokv/codebook.h).
//   x_hat = ||x|| * Pi^T (c1 + c2); 2b bits per coordinate plus the fp16 norm.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include "rvq.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

/// Lloyd-Max codebook of the residual y - Q1(y), y ~ coordinate density; cached.
const ScalarCodebook& residual_codebook(int dim, int bits, CodebookKind kind) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, ScalarCodebook> cache;
  const ScalarCodebook& stage1 = lloyd_max_codebook(dim, bits, kind);
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(static_cast<int>(kind), dim, bits);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<double> x, w;
  if (kind == CodebookKind::kBeta) {
    beta_coordinate_grid(dim, 1 << 20, x, w);
  } else {
    const double sigma = 1.0 / std::sqrt(double(dim)), hi = 12 * sigma;
    const int n = 1 << 20;
    x.resize(n);
    w.resize(n);
    for (int i = 0; i < n; ++i) {
      x[i] = -hi + (i + 0.5) * 2 * hi / n;
      w[i] = std::exp(-0.5 * x[i] * x[i] / (sigma * sigma));
    }
  }
  // Residuals are sorted via a histogram of 2^18 bins over their range.
  std::vector<double> r(x.size());
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float xf = static_cast<float>(x[i]);
    r[i] = x[i] - stage1.centroids[stage1.quantize(xf)];
    lo = std::min(lo, r[i]);
    hi = std::max(hi, r[i]);
  }
  const int bins = 1 << 18;
  std::vector<double> hx(bins), hw(bins, 0.0);
  const double step = (hi - lo) / bins;
  for (int b = 0; b < bins; ++b) hx[b] = lo + (b + 0.5) * step;
  for (std::size_t i = 0; i < r.size(); ++i) {
    int b = static_cast<int>((r[i] - lo) / step);
    hw[std::clamp(b, 0, bins - 1)] += w[i];
  }
  return cache.emplace(key, lloyd_max_discrete(hx, hw, bits)).first->second;
}

}  // namespace

Rvq::Rvq(const CodecConfig& cfg)
    : Codec(cfg),
      b_(int_bits(cfg)),
      s1_(cfg.head_dim, b_, cfg.rotation, cfg.codebook, cfg.seed),
      cb2_(&residual_codebook(cfg.head_dim, b_, cfg.codebook)),
      stage_bytes_(packed_bytes(static_cast<std::size_t>(cfg.head_dim), b_)),
      layout_{2 * stage_bytes_, 1} {
  calibrated_ = true;
}

std::unique_ptr<Codec> make_rvq(const CodecConfig& cfg) {
  check_bits(cfg, {1, 2, 3, 4});
  return std::make_unique<Rvq>(cfg);
}

}  // namespace turbokv::ref
