// Lloyd-Max codebooks solved numerically (see include/turbokv/codebook.h).
#include "turbokv/codebook.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>

#include "turbokv/error.h"

namespace turbokv {

CodebookKind parse_codebook(const char* name) {
  const std::string s = name;
  if (s == "beta") return CodebookKind::kBeta;
  if (s == "gaussian") return CodebookKind::kGaussian;
  throw std::invalid_argument("parse_codebook: codebook = " + s + ": expected beta or gaussian");
}

const char* codebook_name(CodebookKind kind) { return kind == CodebookKind::kBeta ? "beta" : "gaussian"; }

ScalarCodebook lloyd_max_discrete(const std::vector<double>& x, const std::vector<double>& w, int bits) {
  check_arg(bits >= 1 && bits <= 8, "lloyd_max_discrete", "bits", bits, "must be in 1..8");
  check_arg(x.size() == w.size() && !x.empty(), "lloyd_max_discrete", "x.size()", x.size(),
            "must equal w.size() and be non-empty");
  const std::size_t n = x.size();
  const int k = 1 << bits;
  // Prefix sums of w, w*x, w*x^2 for O(k log n) Lloyd iterations.
  std::vector<double> W(n + 1, 0), WX(n + 1, 0), WXX(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    W[i + 1] = W[i] + w[i];
    WX[i + 1] = WX[i] + w[i] * x[i];
    WXX[i + 1] = WXX[i] + w[i] * x[i] * x[i];
  }
  const double total = W[n];
  check_arg(total > 0, "lloyd_max_discrete", "sum(w)", total, "must be positive");
  // Initialise at the centres of equal-mass cells.
  std::vector<double> c(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) {
    const double target = (j + 0.5) / k * total;
    const std::size_t i = static_cast<std::size_t>(std::lower_bound(W.begin() + 1, W.end(), target) - W.begin() - 1);
    c[static_cast<std::size_t>(j)] = x[std::min(i, n - 1)];
  }
  std::vector<std::size_t> cut(static_cast<std::size_t>(k) + 1);
  auto cells = [&]() {
    cut[0] = 0;
    cut[static_cast<std::size_t>(k)] = n;
    for (int j = 1; j < k; ++j) {
      const double b = 0.5 * (c[static_cast<std::size_t>(j) - 1] + c[static_cast<std::size_t>(j)]);
      cut[static_cast<std::size_t>(j)] = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), b) - x.begin());
    }
  };
  bool converged = false;
  for (int it = 0; it < 400000 && !converged; ++it) {
    cells();
    double change = 0;
    for (int j = 0; j < k; ++j) {
      const std::size_t lo = cut[static_cast<std::size_t>(j)], hi = cut[static_cast<std::size_t>(j) + 1];
      const double m = W[hi] - W[lo];
      if (m <= 0) continue;  // empty cell keeps its centroid
      const double nc = (WX[hi] - WX[lo]) / m;
      change = std::max(change, std::fabs(nc - c[static_cast<std::size_t>(j)]));
      c[static_cast<std::size_t>(j)] = nc;
    }
    std::sort(c.begin(), c.end());
    converged = change < 1e-12 * (std::fabs(c.back()) + 1e-300);
  }
  if (!converged) throw std::runtime_error("lloyd_max_discrete: Lloyd iteration did not converge");
  cells();
  double err = 0;
  for (int j = 0; j < k; ++j) {
    const std::size_t lo = cut[static_cast<std::size_t>(j)], hi = cut[static_cast<std::size_t>(j) + 1];
    const double cj = c[static_cast<std::size_t>(j)];
    err += (WXX[hi] - WXX[lo]) - 2 * cj * (WX[hi] - WX[lo]) + cj * cj * (W[hi] - W[lo]);
  }
  ScalarCodebook cb;
  cb.bits = bits;
  cb.mse = err / total;
  cb.centroids.resize(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) cb.centroids[static_cast<std::size_t>(j)] = static_cast<float>(c[static_cast<std::size_t>(j)]);
  for (int j = 0; j + 1 < k; ++j)
    cb.boundaries.push_back((cb.centroids[static_cast<std::size_t>(j)] + cb.centroids[static_cast<std::size_t>(j) + 1]) * 0.5f);
  return cb;
}

void beta_coordinate_grid(int dim, int n, std::vector<double>& x, std::vector<double>& w) {
  check_arg(dim >= 2, "beta_coordinate_grid", "dim", dim, "must be >= 2");
  // Restrict to where the density is not negligible: |x| <= min(1, 12/sqrt(dim)).
  const double hi = std::min(1.0, 12.0 / std::sqrt(static_cast<double>(dim)));
  const double lo = -hi, dx = (hi - lo) / n;
  const double logc = std::lgamma(dim / 2.0) - 0.5 * std::log(M_PI) - std::lgamma((dim - 1) / 2.0);
  x.resize(static_cast<std::size_t>(n));
  w.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double xi = lo + (i + 0.5) * dx;
    x[static_cast<std::size_t>(i)] = xi;
    const double one = 1.0 - xi * xi;
    w[static_cast<std::size_t>(i)] = one > 0 ? std::exp(logc + 0.5 * (dim - 3) * std::log(one)) * dx : 0.0;
  }
}

static void gaussian_grid(int dim, int n, std::vector<double>& x, std::vector<double>& w) {
  const double sigma = 1.0 / std::sqrt(static_cast<double>(dim));
  const double hi = 12.0 * sigma, lo = -hi, dx = (hi - lo) / n;
  x.resize(static_cast<std::size_t>(n));
  w.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double xi = lo + (i + 0.5) * dx;
    x[static_cast<std::size_t>(i)] = xi;
    w[static_cast<std::size_t>(i)] = std::exp(-0.5 * xi * xi / (sigma * sigma)) / (sigma * std::sqrt(2 * M_PI)) * dx;
  }
}

const ScalarCodebook& lloyd_max_codebook(int dim, int bits, CodebookKind kind) {
  check_arg(bits >= 1 && bits <= 8, "lloyd_max_codebook", "bits", bits, "must be in 1..8");
  check_arg(dim >= (kind == CodebookKind::kBeta ? 2 : 1), "lloyd_max_codebook", "dim", dim, "must be >= 2");
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, ScalarCodebook> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(static_cast<int>(kind), dim, bits);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<double> x, w;
  const int grid = 1 << 20;
  if (kind == CodebookKind::kBeta)
    beta_coordinate_grid(dim, grid, x, w);
  else
    gaussian_grid(dim, grid, x, w);
  return cache.emplace(key, lloyd_max_discrete(x, w, bits)).first->second;
}

}  // namespace turbokv
