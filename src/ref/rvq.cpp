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

#include "internal.h"
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

class Rvq final : public Codec {
 public:
  explicit Rvq(const CodecConfig& cfg)
      : Codec(cfg),
        b_(int_bits(cfg)),
        s1_(cfg.head_dim, b_, cfg.rotation, cfg.codebook, cfg.seed),
        cb2_(&residual_codebook(cfg.head_dim, b_, cfg.codebook)),
        stage_bytes_(packed_bytes(static_cast<std::size_t>(cfg.head_dim), b_)),
        layout_{2 * stage_bytes_, 1} {
    calibrated_ = true;
  }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }

 protected:
  float coord(const std::uint8_t* tc, int i) const {
    return s1_.codebook->centroids[get_code(tc, static_cast<std::size_t>(i), b_)] +
           cb2_->centroids[get_code(tc + stage_bytes_, static_cast<std::size_t>(i), b_)];
  }
  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    std::vector<float> u(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      std::uint8_t* tc = layout_.codes(out, t);
      const float norm = s1_.encode(x + t * d, tc, u.data());
      check_arg(norm <= 65504.0f, "Codec::encode(rvq)", "||x[t]||", norm, "exceeds the fp16 range of the stored norm");
      for (int i = 0; i < d; ++i) {
        const float r = u[static_cast<std::size_t>(i)] - s1_.codebook->centroids[get_code(tc, static_cast<std::size_t>(i), b_)];
        put_code(tc + stage_bytes_, static_cast<std::size_t>(i), b_, cb2_->quantize(r));
      }
      layout_.set_scalar(out, n, t, 0, norm);
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<float> y(static_cast<std::size_t>(d)), xr(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      for (int i = 0; i < d; ++i) y[static_cast<std::size_t>(i)] = coord(layout_.codes(codes, t), i);
      s1_.rotation.inverse(y.data(), xr.data());
      const float norm = layout_.scalar(codes, n, t, 0);
      for (int i = 0; i < d; ++i) out[t * d + i] = norm * xr[static_cast<std::size_t>(i)];
    }
  }
  void do_prepare_query(const float* q, double* state) const override {
    std::vector<double> qd(q, q + head_dim());
    s1_.rotation.forward(qd.data(), state);
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      double dot = 0;
      for (int i = 0; i < head_dim(); ++i) dot += state[i] * coord(layout_.codes(codes, t), i);
      out[t - t0] = dot * layout_.scalar(codes, n, t, 0);
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      const double wn = w[t - t0] * layout_.scalar(codes, n, t, 0);
      for (int i = 0; i < head_dim(); ++i) acc[i] += wn * coord(layout_.codes(codes, t), i);
    }
  }
  void do_finalize(const double* acc, double* out) const override { s1_.rotation.inverse(acc, out); }

 private:
  int b_;
  RotatedScalar s1_;
  const ScalarCodebook* cb2_;
  std::size_t stage_bytes_;
  TokenLayout layout_;
};

}  // namespace

std::unique_ptr<Codec> make_rvq(const CodecConfig& cfg) {
  check_bits(cfg, {1, 2, 3, 4});
  return std::make_unique<Rvq>(cfg);
}

}  // namespace turbokv::ref
