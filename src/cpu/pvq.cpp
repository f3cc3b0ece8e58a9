// CPU fast path for product VQ with smoothing + Hadamard (VecInfer-style;
// reference: src/ref/pvq.cpp, which fits lambda and the k-means codebooks):
// the per-ISA kernels (pvq_avx2.cpp, pvq_avx512.cpp, templates in pvq_simd.h)
// do smoothing, rotation and the nearest-centroid search (encode), decode,
// look-up-table scores (gathers) and value accumulation. Built for baseline x86-64.
//
// Covered: every bit width (1..4) at head_dim a multiple of 16 up to 1024;
// other head_dims get nullptr (the reference wrapper). Encoding is
// bit-identical, k-means ties included: every centroid distance is summed in
// the reference's order and the first minimum wins, as in its nearest().
// Query state: q' = Pi (lambda * q) rounded to fp32 ([d], the codec-domain
// query), then LUT[s][k] = <q'_s, C_s[k]>, computed in fp64 as the reference
// does then rounded to fp32, [nsub_pad][K] (rows >= d/g zero); scores() reads
// the LUT only. Accumulator: the rotated, smoothed domain ([d]); finalize()
// applies Pi^T (fp64) and lambda. Codec domain (domain_size() = d): y_t =
// concat_s C_s[code_{t,s}], so scores = <q', y_t> and accumulate = sum w y_t.
#include <vector>

#include "../ref/pvq.h"
#include "methods.h"
#include "pvq_internal.h"
#include "turbokv/error.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {
namespace {

using vq::PvqKernels;
using vq::PvqState;

class PvqCodec final : public CpuCodec {
 public:
  PvqCodec(const Codec& ref, const turbokv::ref::Pvq& r, bool avx512)
      : CpuCodec(ref),
        k_(avx512 ? vq::pvq_avx512_kernels(static_cast<int>(ref.config().bits))
                  : vq::pvq_avx2_kernels(static_cast<int>(ref.config().bits))),
        isa_(avx512 ? "avx512" : "avx2") {
    st_.dim = r.head_dim();
    st_.g = r.sub_dim();
    st_.c = r.code_bits();
    st_.k = r.num_centroids();
    st_.nsub = r.num_sub();
    st_.nsub_pad = (st_.nsub + 15) / 16 * 16;
    st_.code_bytes = r.code_bytes();
    st_.rot.init(r.rotation());
    st_.lambda = r.lambda();
    st_.cent = r.centroids();
    st_.cent_t = r.centroids_soa();
  }
  const char* isa() const override { return isa_; }
  std::size_t query_state_size() const override {
    return static_cast<std::size_t>(st_.dim) + static_cast<std::size_t>(st_.nsub_pad) * st_.k;
  }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(st_.dim); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.scores(st_, state + st_.dim, codes + t0 * st_.code_bytes, t1 - t0, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.accumulate(st_, codes + t0 * st_.code_bytes, t1 - t0, w, acc);
  }
  void finalize(const float* acc, double scale, float* out) const override {
    std::vector<double> a(acc, acc + st_.dim), x(static_cast<std::size_t>(st_.dim));
    st_.rot.rotation->inverse(a.data(), x.data());
    for (int j = 0; j < st_.dim; ++j) {
      const std::size_t i = static_cast<std::size_t>(j);
      out[j] = static_cast<float>(x[i] * st_.lambda[i] * scale);
    }
  }
  /// Codec domain: y_t = concat_s C_s[code_{t,s}] in the rotated, smoothed domain,
  /// [d]; the state's first d floats are Pi (lambda * q), the accumulator is there.
  std::size_t domain_size() const override { return static_cast<std::size_t>(st_.dim); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.decode_domain(st_, codes + t0 * st_.code_bytes, t1 - t0, y);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    (void)n;
    k_.encode(st_, x + t0 * static_cast<std::size_t>(st_.dim), t1 - t0, out + t0 * st_.code_bytes);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    (void)n;
    k_.decode(st_, codes + t0 * st_.code_bytes, t1 - t0, out + t0 * static_cast<std::size_t>(st_.dim));
  }
  void do_prepare_query(const float* q, float* state) const override {
    const std::size_t d = static_cast<std::size_t>(st_.dim), K = static_cast<std::size_t>(st_.k);
    const std::size_t g = static_cast<std::size_t>(st_.g);
    std::vector<double> ql(d), qr(d), acc(K);
    for (std::size_t j = 0; j < d; ++j) ql[j] = double(q[j]) * st_.lambda[j];
    st_.rot.rotation->forward(ql.data(), qr.data());
    for (std::size_t j = 0; j < d; ++j) state[j] = static_cast<float>(qr[j]);
    float* lut = state + d;
    // The reference's sums (ascending i per entry), over the SoA copy so the k loop vectorises.
    for (std::size_t s = 0; s < static_cast<std::size_t>(st_.nsub); ++s) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t i = 0; i < g; ++i) {
        const float* ct = st_.cent_t.data() + (s * g + i) * K;
        const double qi = qr[s * g + i];
        for (std::size_t k = 0; k < K; ++k) acc[k] += qi * ct[k];
      }
      for (std::size_t k = 0; k < K; ++k) lut[s * K + k] = static_cast<float>(acc[k]);
    }
    std::fill(lut + static_cast<std::size_t>(st_.nsub) * K, state + query_state_size(), 0.0f);
  }

 private:
  PvqState st_;
  const PvqKernels& k_;
  const char* isa_;
};

}  // namespace

std::unique_ptr<CpuCodec> make_cpu_pvq(const Codec& ref) {
  const auto* r = dynamic_cast<const turbokv::ref::Pvq*>(&ref);
  const int d = ref.head_dim();
  const SimdLevel lvl = simd_level();
  if (!r || !ref.calibrated() || lvl == SimdLevel::kScalar || d % 16 != 0 || d > vq::kMaxDim) return nullptr;
  return std::make_unique<PvqCodec>(ref, *r, lvl == SimdLevel::kAvx512);
}

}  // namespace turbokv::cpu::detail
