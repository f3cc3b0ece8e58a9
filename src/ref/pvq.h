// The product VQ reference class (src/ref/pvq.cpp has the method's description),
// in a header so that the CPU fast path (src/cpu/pvq.cpp) can read its
// parameters. Internal, not public API.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "internal.h"
#include "turbokv/error.h"
#include "turbokv/rng.h"

namespace turbokv::ref {

class Pvq final : public Codec {
 public:
  explicit Pvq(const CodecConfig& cfg) : Codec(cfg), rot_(cfg.head_dim, RotationKind::kHadamard, cfg.seed) {
    static const int g_of[] = {0, 8, 4, 2, 2}, c_of[] = {0, 8, 8, 6, 8};
    g_ = g_of[int_bits(cfg)];
    c_ = c_of[int_bits(cfg)];
    k_ = 1 << c_;
    nsub_ = cfg.head_dim / g_;
    layout_ = TokenLayout{packed_bytes(static_cast<std::size_t>(nsub_), c_), 0};
    lambda_.assign(static_cast<std::size_t>(cfg.head_dim), 1.0f);
    cent_.assign(static_cast<std::size_t>(nsub_) * k_ * g_, 0.0f);
    cent_t_ = cent_;
  }
  bool needs_calibration() const override { return true; }
  /// Read-only access for the CPU fast path (src/cpu/pvq.cpp); valid after calibrate().
  const Rotation& rotation() const { return rot_; }
  int sub_dim() const { return g_; }          ///< g: coordinates per sub-vector
  int code_bits() const { return c_; }        ///< c: bits per sub-vector code
  int num_centroids() const { return k_; }    ///< K = 2^c
  int num_sub() const { return nsub_; }       ///< head_dim / g
  std::size_t code_bytes() const { return layout_.code_bytes; }
  const std::vector<float>& lambda() const { return lambda_; }           ///< [head_dim], fp16-rounded
  const std::vector<float>& centroids() const { return cent_; }          ///< [nsub][K][g], fp16-rounded
  const std::vector<float>& centroids_soa() const { return cent_t_; }    ///< [nsub][g][K], the same values
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }
  std::size_t side_bytes() const override { return 2 * (lambda_.size() + cent_.size()); }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(nsub_) * k_; }

 protected:
  void smooth_rotate(const float* x, float* z) const {
    std::vector<float> xs(static_cast<std::size_t>(head_dim()));
    for (int j = 0; j < head_dim(); ++j) xs[static_cast<std::size_t>(j)] = x[j] / lambda_[static_cast<std::size_t>(j)];
    rot_.forward(xs.data(), z);
  }
  const float* centroid(int s, int k) const { return &cent_[(static_cast<std::size_t>(s) * k_ + k) * g_]; }
  float dist(const float* a, const float* b) const {
    float acc = 0;
    for (int i = 0; i < g_; ++i) {
      const float e = a[i] - b[i];
      acc += e * e;
    }
    return acc;
  }
  /// argmin_k ||z - C_s[k]||^2, ties to the lowest k. Each distance is
  /// accumulated in ascending coordinate order, as dist() does; the loop runs
  /// over centroids innermost (SoA copy) so it vectorises.
  int nearest(int s, const float* z) const {
    float dd[256];
    const float* ct = &cent_t_[static_cast<std::size_t>(s) * g_ * k_];
    for (int k = 0; k < k_; ++k) dd[k] = 0;
    for (int i = 0; i < g_; ++i)
      for (int k = 0; k < k_; ++k) {
        const float e = z[i] - ct[i * k_ + k];
        dd[k] += e * e;
      }
    int best = 0;
    for (int k = 1; k < k_; ++k)
      if (dd[k] < dd[best]) best = k;
    return best;
  }
  void refresh_soa(int s) {
    for (int k = 0; k < k_; ++k)
      for (int i = 0; i < g_; ++i)
        cent_t_[(static_cast<std::size_t>(s) * g_ + i) * k_ + k] = centroid(s, k)[i];
  }

  void do_calibrate(const float* x, std::size_t n) override {
    const int d = head_dim();
    for (int j = 0; j < d; ++j) {
      float mx = 0;
      for (std::size_t t = 0; t < n; ++t) mx = std::max(mx, std::fabs(x[t * d + j]));
      lambda_[static_cast<std::size_t>(j)] = mx > 0 ? round_to_half(std::sqrt(mx)) : 1.0f;
      if (lambda_[static_cast<std::size_t>(j)] == 0) lambda_[static_cast<std::size_t>(j)] = 1.0f;
    }
    const std::size_t max_pts = 8192, stride = (n + max_pts - 1) / max_pts;
    std::vector<float> z;
    std::vector<float> zt(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; t += stride) {
      smooth_rotate(x + t * d, zt.data());
      z.insert(z.end(), zt.begin(), zt.end());
    }
    const std::size_t np = z.size() / d;
    std::vector<float> pts(np * g_);
    std::vector<int> assign(np);
    for (int s = 0; s < nsub_; ++s) {
      for (std::size_t p = 0; p < np; ++p)
        for (int i = 0; i < g_; ++i) pts[p * g_ + i] = z[p * d + s * g_ + i];
      float* C = &cent_[static_cast<std::size_t>(s) * k_ * g_];
      // k-means++ seeding.
      Rng rng(cfg_.seed + 1000003ull * (s + 1));
      std::vector<double> d2(np, std::numeric_limits<double>::infinity());
      std::size_t first = static_cast<std::size_t>(rng.next() % np);
      for (int k = 0; k < k_; ++k) {
        std::size_t pick = first;
        if (k > 0) {
          double total = 0;
          for (double v : d2) total += v;
          if (total > 0) {
            double r = rng.uniform() * total;
            pick = np - 1;
            for (std::size_t p = 0; p < np; ++p) {
              r -= d2[p];
              if (r <= 0) { pick = p; break; }
            }
          } else {
            pick = static_cast<std::size_t>(rng.next() % np);
          }
        }
        std::copy(&pts[pick * g_], &pts[pick * g_] + g_, C + static_cast<std::size_t>(k) * g_);
        for (std::size_t p = 0; p < np; ++p)
          d2[p] = std::min(d2[p], static_cast<double>(dist(&pts[p * g_], C + static_cast<std::size_t>(k) * g_)));
      }
      // Lloyd iterations.
      std::vector<double> sum(static_cast<std::size_t>(k_) * g_);
      std::vector<std::size_t> cnt(static_cast<std::size_t>(k_));
      for (int it = 0; it < cfg_.kmeans_iters; ++it) {
        refresh_soa(s);
        for (std::size_t p = 0; p < np; ++p) assign[p] = nearest(s, &pts[p * g_]);
        std::fill(sum.begin(), sum.end(), 0.0);
        std::fill(cnt.begin(), cnt.end(), 0);
        for (std::size_t p = 0; p < np; ++p) {
          ++cnt[static_cast<std::size_t>(assign[p])];
          for (int i = 0; i < g_; ++i) sum[static_cast<std::size_t>(assign[p]) * g_ + i] += pts[p * g_ + i];
        }
        for (int k = 0; k < k_; ++k)
          if (cnt[static_cast<std::size_t>(k)])
            for (int i = 0; i < g_; ++i)
              C[static_cast<std::size_t>(k) * g_ + i] = static_cast<float>(sum[static_cast<std::size_t>(k) * g_ + i] / cnt[static_cast<std::size_t>(k)]);
      }
      for (int i = 0; i < k_ * g_; ++i) C[i] = round_to_half(C[i]);
      refresh_soa(s);
    }
  }

  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    std::vector<float> z(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      smooth_rotate(x + t * d, z.data());
      for (int s = 0; s < nsub_; ++s)
        put_code(layout_.codes(out, t), static_cast<std::size_t>(s), c_, static_cast<std::uint32_t>(nearest(s, &z[static_cast<std::size_t>(s) * g_])));
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<float> z(static_cast<std::size_t>(d)), xr(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      for (int s = 0; s < nsub_; ++s) {
        const float* c = centroid(s, static_cast<int>(get_code(layout_.codes(codes, t), static_cast<std::size_t>(s), c_)));
        std::copy(c, c + g_, &z[static_cast<std::size_t>(s) * g_]);
      }
      rot_.inverse(z.data(), xr.data());
      for (int j = 0; j < d; ++j) out[t * d + j] = lambda_[static_cast<std::size_t>(j)] * xr[static_cast<std::size_t>(j)];
    }
  }
  void do_prepare_query(const float* q, double* state) const override {
    const int d = head_dim();
    std::vector<double> ql(static_cast<std::size_t>(d)), qr(static_cast<std::size_t>(d));
    for (int j = 0; j < d; ++j) ql[static_cast<std::size_t>(j)] = double(q[j]) * lambda_[static_cast<std::size_t>(j)];
    rot_.forward(ql.data(), qr.data());
    for (int s = 0; s < nsub_; ++s)
      for (int k = 0; k < k_; ++k) {
        double acc = 0;
        for (int i = 0; i < g_; ++i) acc += qr[static_cast<std::size_t>(s) * g_ + i] * centroid(s, k)[i];
        state[static_cast<std::size_t>(s) * k_ + k] = acc;
      }
  }
  void do_scores(const double* state, const std::uint8_t* codes, std::size_t, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      double acc = 0;
      for (int s = 0; s < nsub_; ++s)
        acc += state[static_cast<std::size_t>(s) * k_ + get_code(layout_.codes(codes, t), static_cast<std::size_t>(s), c_)];
      out[t - t0] = acc;
    }
  }
  void do_accumulate(const std::uint8_t* codes, std::size_t, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t)
      for (int s = 0; s < nsub_; ++s) {
        const float* c = centroid(s, static_cast<int>(get_code(layout_.codes(codes, t), static_cast<std::size_t>(s), c_)));
        for (int i = 0; i < g_; ++i) acc[s * g_ + i] += w[t - t0] * c[i];
      }
  }
  void do_finalize(const double* acc, double* out) const override {
    rot_.inverse(acc, out);
    for (int j = 0; j < head_dim(); ++j) out[j] *= lambda_[static_cast<std::size_t>(j)];
  }

 private:
  Rotation rot_;
  int g_ = 0, c_ = 0, k_ = 0, nsub_ = 0;
  TokenLayout layout_;
  std::vector<float> lambda_;  // fp16-rounded
  std::vector<float> cent_;    // [nsub][K][g], fp16-rounded
  std::vector<float> cent_t_;  // [nsub][g][K], the same values (SoA for nearest())
};

}  // namespace turbokv::ref
