// TurboQuant-MSE reference (Zandieh et al., arXiv 2504.19874, Algorithm 1).
//
//   encode:  norm = ||x||, y = Pi x / norm, code_i = argmin_j |y_i - c_j|
//   decode:  x_hat = norm * Pi^T c[code]
//   score:   <q, x_hat> = norm * <Pi q, c[code]>   (Pi q computed once per query)
//   values:  sum_t w_t x_hat_t = Pi^T (sum_t w_t norm_t c[code_t])  (one inverse rotation)
//
// Fractional widths b + 0.5 (outlier-channel split after paper Sec. 4.3): the d/2
// channels (rounded down to a multiple of 8; exactly half when d is a multiple
// of 16) with the largest mean square on the calibration data get b+1 bits,
// the rest b bits; each part has its own rotation, codebook and norm. The
// paper's own example splits 32 of 128 channels; an even split is what makes
// the nominal width b + 0.5.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "internal.h"
#include "tq_mse.h"
#include "turbokv/error.h"

namespace turbokv::ref {
namespace {

class TqMse final : public Codec {
 public:
  explicit TqMse(const CodecConfig& cfg) : Codec(cfg) {
    const int d = cfg.head_dim;
    const int b = static_cast<int>(std::floor(cfg.bits));
    fractional_ = cfg.bits != b;
    if (!fractional_) {
      std::vector<int> all(static_cast<std::size_t>(d));
      std::iota(all.begin(), all.end(), 0);
      set_parts({all}, {b});
      calibrated_ = true;
    } else {
      bits_lo_ = b;
      d_out_ = (d / 2) / 8 * 8;
      // Until calibrated, provisional split (first d_out channels) so sizes are known.
      std::vector<int> out(static_cast<std::size_t>(d_out_)), rest;
      std::iota(out.begin(), out.end(), 0);
      for (int j = d_out_; j < d; ++j) rest.push_back(j);
      set_parts({out, rest}, {b + 1, b});
    }
  }

  bool needs_calibration() const override { return fractional_; }
  /// Part p's channels (tq_mse_split_channels).
  bool fractional() const { return fractional_; }
  const std::vector<int>& part_channels(std::size_t p) const { return parts_[p].channels; }
  std::size_t encoded_bytes(std::size_t n) const override { return layout_.block_bytes(n); }
  std::size_t side_bytes() const override { return fractional_ ? static_cast<std::size_t>(head_dim()) / 8 : 0; }

 protected:
  struct Part {
    std::vector<int> channels;
    std::size_t code_offset;
    std::unique_ptr<RotatedScalar> rs;
  };

  void set_parts(const std::vector<std::vector<int>>& channels, const std::vector<int>& bits) {
    parts_.clear();
    std::size_t off = 0;
    for (std::size_t p = 0; p < channels.size(); ++p) {
      Part part;
      part.channels = channels[p];
      part.code_offset = off;
      const int dp = static_cast<int>(part.channels.size());
      part.rs = std::make_unique<RotatedScalar>(dp, bits[p], cfg_.rotation, cfg_.codebook, cfg_.seed + p);
      off += packed_bytes(static_cast<std::size_t>(dp), bits[p]);
      parts_.push_back(std::move(part));
    }
    layout_ = TokenLayout{off, parts_.size()};
  }

  void do_calibrate(const float* x, std::size_t n) override {
    if (!fractional_) return;
    const int d = head_dim();
    std::vector<double> ms(static_cast<std::size_t>(d), 0.0);
    for (std::size_t t = 0; t < n; ++t)
      for (int j = 0; j < d; ++j) ms[static_cast<std::size_t>(j)] += double(x[t * d + j]) * x[t * d + j];
    std::vector<int> order(static_cast<std::size_t>(d));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ms[a] > ms[b]; });
    std::vector<char> is_out(static_cast<std::size_t>(d), 0);
    for (int i = 0; i < d_out_; ++i) is_out[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1;
    std::vector<int> out, rest;
    for (int j = 0; j < d; ++j) (is_out[static_cast<std::size_t>(j)] ? out : rest).push_back(j);
    set_parts({out, rest}, {bits_lo_ + 1, bits_lo_});
  }

  void do_encode(const float* x, std::size_t n, std::uint8_t* out) const override {
    const int d = head_dim();
    std::vector<float> xp(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t) {
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        const Part& part = parts_[p];
        for (std::size_t i = 0; i < part.channels.size(); ++i) xp[i] = x[t * d + part.channels[i]];
        const float norm = part.rs->encode(xp.data(), layout_.codes(out, t) + part.code_offset, nullptr);
        check_arg(norm <= 65504.0f, "Codec::encode(tq-mse)", "||x[t]||", norm, "exceeds the fp16 range of the stored norm");
        layout_.set_scalar(out, n, t, p, norm);
      }
    }
  }

  void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const override {
    const int d = head_dim();
    std::vector<float> y(static_cast<std::size_t>(d)), xr(static_cast<std::size_t>(d));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        const Part& part = parts_[p];
        const float norm = layout_.scalar(codes, n, t, p);
        part.rs->centroids(layout_.codes(codes, t) + part.code_offset, y.data());
        part.rs->rotation.inverse(y.data(), xr.data());
        for (std::size_t i = 0; i < part.channels.size(); ++i) out[t * d + part.channels[i]] = norm * xr[i];
      }
  }

  void do_prepare_query(const float* q, double* state) const override {
    std::size_t off = 0;
    std::vector<double> qp(static_cast<std::size_t>(head_dim()));
    for (const Part& part : parts_) {
      for (std::size_t i = 0; i < part.channels.size(); ++i) qp[i] = q[part.channels[i]];
      part.rs->rotation.forward(qp.data(), state + off);
      off += part.channels.size();
    }
  }

  void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 double* out) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      double s = 0;
      std::size_t off = 0;
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        const Part& part = parts_[p];
        const std::uint8_t* c = layout_.codes(codes, t) + part.code_offset;
        const auto& cent = part.rs->codebook->centroids;
        double dot = 0;
        for (int i = 0; i < part.rs->dim; ++i)
          dot += state[off + i] * cent[get_code(c, static_cast<std::size_t>(i), part.rs->bits)];
        s += dot * layout_.scalar(codes, n, t, p);
        off += part.channels.size();
      }
      out[t - t0] = s;
    }
  }

  void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                     double* acc) const override {
    for (std::size_t t = t0; t < t1; ++t) {
      std::size_t off = 0;
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        const Part& part = parts_[p];
        const std::uint8_t* c = layout_.codes(codes, t) + part.code_offset;
        const auto& cent = part.rs->codebook->centroids;
        const double wn = w[t - t0] * layout_.scalar(codes, n, t, p);
        for (int i = 0; i < part.rs->dim; ++i)
          acc[off + i] += wn * cent[get_code(c, static_cast<std::size_t>(i), part.rs->bits)];
        off += part.channels.size();
      }
    }
  }

  void do_finalize(const double* acc, double* out) const override {
    std::size_t off = 0;
    std::vector<double> xr(static_cast<std::size_t>(head_dim()));
    for (const Part& part : parts_) {
      part.rs->rotation.inverse(acc + off, xr.data());
      for (std::size_t i = 0; i < part.channels.size(); ++i) out[part.channels[i]] = xr[i];
      off += part.channels.size();
    }
  }

 private:
  bool fractional_ = false;
  int bits_lo_ = 0, d_out_ = 0;
  std::vector<Part> parts_;
  TokenLayout layout_;
};

}  // namespace

bool tq_mse_split_channels(const Codec& ref, std::vector<int> (&channels)[2]) {
  const auto* t = dynamic_cast<const TqMse*>(&ref);
  if (t == nullptr || !t->fractional() || !t->calibrated()) return false;
  channels[0] = t->part_channels(0);
  channels[1] = t->part_channels(1);
  return true;
}

std::unique_ptr<Codec> make_tq_mse(const CodecConfig& cfg) {
  check_bits(cfg, {1, 1.5, 2, 2.5, 3, 3.5, 4});
  if (cfg.bits != static_cast<int>(cfg.bits))
    check_arg(cfg.head_dim >= 16, "make_codec(tq-mse)", "head_dim", cfg.head_dim,
              "fractional widths split head_dim into two parts of at least 8 channels: need head_dim >= 16");
  return std::make_unique<TqMse>(cfg);
}

}  // namespace turbokv::ref
