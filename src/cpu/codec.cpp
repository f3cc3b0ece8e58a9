// CpuCodec: the checks and threading every method shares, the reference
// wrapper (scalar level), and make_cpu_codec's dispatch. Baseline x86-64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_internal.h"
#include "methods.h"
#include "turbokv/error.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

namespace turbokv::cpu {

namespace detail {

void validate_fast(const Codec& ref, const float* x, std::size_t n) {
  const CodecConfig& c = ref.config();
  const std::size_t d = static_cast<std::size_t>(ref.head_dim()), count = n * d;
  // The shortcut holds where Codec::validate checks calibration, finiteness and the row norms (every
  // method) plus, for KIVI, the group scales: not for centered codecs (they bound ||x - mu||).
  bool known = false;
  switch (c.method) {
    case Method::kTurboMse: case Method::kTurboProd: case Method::kQjl: case Method::kRvq: case Method::kPvq:
    case Method::kPolar: case Method::kKivi: case Method::kFp8: case Method::kFp16:
      known = true;
  }
  if (!known || count == 0 || x == nullptr || c.center || (ref.needs_calibration() && !ref.calibrated()))
    return ref.validate(x, n);
  float m = 0.0f;
  const bool bad = !all_finite_f32(x, count, &m);
  // Every row norm is at most max|x| sqrt(head_dim), and every KIVI group scale at most 2 max|x|: below
  // the limits with margin the reference cannot throw.
  if (!bad && double(m) * std::sqrt(double(d)) < 32768.0 * 0.999) return;
  ref.validate(x, n);  // throws the reference's error (or accepts a borderline input)
}

}  // namespace detail

void CpuCodec::validate(const float* x, std::size_t n) const { detail::validate_fast(*ref_, x, n); }

namespace {

/// Splits [0, n) into ranges aligned to `granule` and runs fn(t0, t1) on the pool.
template <class Fn>
void split_rows(std::size_t n, std::size_t granule, int threads, std::size_t min_rows, Fn fn) {
  const int nt = detail::resolve_threads(threads);
  std::size_t step = std::max<std::size_t>(min_rows, (n + 4 * nt - 1) / (4 * nt));
  step = (step + granule - 1) / granule * granule;
  const std::size_t pieces = (n + step - 1) / step;
  detail::parallel_for(pieces, threads, [&](std::size_t i) { fn(i * step, std::min(n, (i + 1) * step)); });
}

}  // namespace

void CpuCodec::encode(const float* x, std::size_t n, std::uint8_t* out, int threads) const {
  validate(x, n);
  if (n == 0) return;
  check_arg(out != nullptr, "CpuCodec::encode", "out", "null", "must not be null");
  std::memset(out, 0, encoded_bytes(n));
  split_rows(n, row_granule(), threads, 64, [&](std::size_t t0, std::size_t t1) { do_encode(x, n, t0, t1, out); });
}

void CpuCodec::encode(const std::uint16_t* x, DType dtype, std::size_t n, std::uint8_t* out, int threads) const {
  check_arg(dtype == DType::kF16 || dtype == DType::kBf16, "CpuCodec::encode", "dtype", static_cast<int>(dtype),
            "must be kF16 or kBf16 for 16-bit input");
  const std::size_t count = n * static_cast<std::size_t>(head_dim());
  detail::check_finite_16("CpuCodec::encode", "x", x, count, dtype == DType::kBf16);
  std::vector<float> xf(count);
  const auto& k = detail::kernels();
  split_rows(n, 1, threads, 256, [&](std::size_t t0, std::size_t t1) {
    const std::size_t d = static_cast<std::size_t>(head_dim());
    k.convert(x + t0 * d, dtype == DType::kBf16, (t1 - t0) * d, xf.data() + t0 * d);
  });
  encode(xf.data(), n, out, threads);
}

void CpuCodec::decode(const std::uint8_t* codes, std::size_t n, float* out, int threads) const {
  if (n == 0) return;
  check_arg(codes != nullptr && out != nullptr, "CpuCodec::decode", "codes/out", "null", "must not be null");
  split_rows(n, row_granule(), threads, 64, [&](std::size_t t0, std::size_t t1) { do_decode(codes, n, t0, t1, out); });
}

void CpuCodec::prepare_query(const float* q, float* state) const {
  check_arg(q != nullptr && state != nullptr, "CpuCodec::prepare_query", "q/state", "null", "must not be null");
  detail::check_finite_f32("CpuCodec::prepare_query", "q", q, static_cast<std::size_t>(head_dim()));
  do_prepare_query(q, state);
}

namespace detail {
namespace {

/// The reference codec behind the CpuCodec interface (fp64 inside).
class RefCodec final : public CpuCodec {
 public:
  explicit RefCodec(const Codec& ref) : CpuCodec(ref) {}
  const char* isa() const override { return "scalar"; }
  std::size_t query_state_size() const override { return reference().query_state_size(); }
  std::size_t accumulator_size() const override { return reference().accumulator_size(); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    std::vector<double> st(state, state + query_state_size()), s(t1 - t0);
    reference().scores(st.data(), codes, n, t0, t1, s.data());
    for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<float>(s[i]);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    std::vector<double> wd(w, w + (t1 - t0)), a(accumulator_size(), 0.0);
    reference().accumulate(codes, n, t0, t1, wd.data(), a.data());
    for (std::size_t i = 0; i < a.size(); ++i) acc[i] += static_cast<float>(a[i]);
  }
  void finalize(const float* acc, double scale, float* out) const override {
    std::vector<double> a(acc, acc + accumulator_size()), o(static_cast<std::size_t>(head_dim()));
    reference().finalize(a.data(), o.data());
    for (std::size_t i = 0; i < o.size(); ++i) out[i] = static_cast<float>(o[i] * scale);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    // The reference encodes whole blocks: one range only (row_granule = n).
    (void)t0, (void)t1;
    reference().encode(x, n, out);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    (void)t0, (void)t1;
    reference().decode(codes, n, out);
  }
  void do_prepare_query(const float* q, float* state) const override {
    std::vector<double> st(query_state_size());
    reference().prepare_query(q, st.data());
    for (std::size_t i = 0; i < st.size(); ++i) state[i] = static_cast<float>(st[i]);
  }
  std::size_t row_granule() const override { return static_cast<std::size_t>(-1) / 4; }
};

}  // namespace

std::unique_ptr<CpuCodec> make_cpu_reference(const Codec& ref) { return std::make_unique<RefCodec>(ref); }

}  // namespace detail

std::unique_ptr<CpuCodec> make_cpu_codec(const Codec& ref) {
  if (ref.needs_calibration() && !ref.calibrated())
    throw std::invalid_argument(turbokv::detail::concat("make_cpu_codec: method = ", method_name(ref.config().method),
                                                        ": the reference codec must be calibrated first"));
  std::unique_ptr<CpuCodec> fast;
  if (simd_level() != SimdLevel::kScalar && !ref.config().center) {
    switch (ref.config().method) {
      case Method::kTurboMse: fast = detail::make_cpu_tq_mse(ref); break;
      case Method::kTurboProd: fast = detail::make_cpu_tq_prod(ref); break;
      case Method::kQjl: fast = detail::make_cpu_qjl(ref); break;
      case Method::kRvq: fast = detail::make_cpu_rvq(ref); break;
      case Method::kPvq: fast = detail::make_cpu_pvq(ref); break;
      case Method::kPolar: fast = detail::make_cpu_polar(ref); break;
      case Method::kKivi: fast = detail::make_cpu_kivi(ref); break;
      case Method::kFp8: fast = detail::make_cpu_fp8(ref); break;
      case Method::kFp16: fast = detail::make_cpu_fp16(ref); break;
    }
  }
  return fast ? std::move(fast) : detail::make_cpu_reference(ref);
}

}  // namespace turbokv::cpu
