// CPU fast path for PolarQuant (Han, Kacham, Karbasi, Mirrokni, Zandieh,
// arXiv 2502.02617; reference: src/ref/polar.cpp): the per-ISA kernels
// (polar_avx2.cpp, polar_avx512.cpp, templates in polar_simd.h) rotate in
// SIMD, reconstruct y_hat from the angle codes and level-4 radii in the
// rotated domain (level-1 angles: in-register cos/sin look-ups), and score /
// accumulate / decode from it. Built for baseline x86-64.
//
// Covered: bits 2, 3, 4 at head_dim a multiple of 16 up to 1024 (all the
// reference accepts, up to that size). Encoding's polar transform is
// formats.h's fp64 arithmetic (radii by square roots, angle cells by compares),
// the reference's own operations, so the codes are its bits.
// Query state: the rotated query Pi q (fp32, [d]); accumulator: the rotated
// domain ([d]); finalize() applies Pi^T in fp64. Codec domain (domain_size() =
// d): y_t = y_hat_t, the reconstruction in the rotated domain.
#include <vector>

#include "../ref/polar.h"
#include "methods.h"
#include "polar_internal.h"
#include "turbokv/error.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {
namespace {

using vq::PolarKernels;
using vq::PolarState;

class PolarCodec final : public CpuCodec {
 public:
  PolarCodec(const Codec& ref, const turbokv::ref::Polar& r, bool avx512)
      : CpuCodec(ref),
        k_(avx512 ? vq::polar_avx512_kernels(r.level1_bits()) : vq::polar_avx2_kernels(r.level1_bits())),
        isa_(avx512 ? "avx512" : "avx2") {
    const int d = r.head_dim();
    st_.dim = d;
    st_.b1 = r.level1_bits();
    st_.b2 = r.high_bits();
    st_.n_hi = d / 4 + d / 8 + d / 16;
    st_.l1_bytes = r.level1_bytes();
    st_.code_bytes = r.code_bytes();
    st_.rot.init(r.rotation());
    for (std::size_t i = 0; i < r.cos_table(1).size(); ++i) {
      st_.cos1[i] = r.cos_table(1)[i];
      st_.sin1[i] = r.sin_table(1)[i];
    }
    for (int l = 2; l <= 4; ++l) {
      const std::vector<double>& tk = r.level_tangents(l);
      check_arg(tk.size() <= 3, "make_cpu_codec(polar)", "level boundaries", tk.size(), "must be at most 3");
      for (std::size_t i = 0; i < tk.size(); ++i) st_.tanh[l - 1][i] = tk[i];
      for (std::size_t i = 0; i < r.cos_table(l).size(); ++i) {
        st_.cosh[l - 1][i] = r.cos_table(l)[i];
        st_.sinh[l - 1][i] = r.sin_table(l)[i];
      }
    }
  }
  const char* isa() const override { return isa_; }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(st_.dim); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(st_.dim); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.scores(st_, state, codes + t0 * st_.code_bytes, radii(codes, n, t0), t1 - t0, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.accumulate(st_, codes + t0 * st_.code_bytes, radii(codes, n, t0), t1 - t0, w, acc);
  }
  void finalize(const float* acc, double scale, float* out) const override {
    std::vector<double> a(acc, acc + st_.dim), x(static_cast<std::size_t>(st_.dim));
    st_.rot.rotation->inverse(a.data(), x.data());
    for (int i = 0; i < st_.dim; ++i) out[i] = static_cast<float>(x[static_cast<std::size_t>(i)] * scale);
  }
  /// Codec domain: y_t = y_hat_t, the reconstruction in the rotated domain, [d].
  std::size_t domain_size() const override { return static_cast<std::size_t>(st_.dim); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.decode_domain(st_, codes + t0 * st_.code_bytes, radii(codes, n, t0), t1 - t0, y);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    k_.encode(st_, x + t0 * static_cast<std::size_t>(st_.dim), t1 - t0, out + t0 * st_.code_bytes,
              const_cast<std::uint8_t*>(radii(out, n, t0)));
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    k_.decode(st_, codes + t0 * st_.code_bytes, radii(codes, n, t0), t1 - t0,
              out + t0 * static_cast<std::size_t>(st_.dim));
  }
  void do_prepare_query(const float* q, float* state) const override {
    std::vector<double> qd(q, q + st_.dim), qr(static_cast<std::size_t>(st_.dim));
    st_.rot.rotation->forward(qd.data(), qr.data());
    for (int i = 0; i < st_.dim; ++i) state[i] = static_cast<float>(qr[static_cast<std::size_t>(i)]);
  }

 private:
  /// Token t0's first fp16 radius in a block of n tokens.
  const std::uint8_t* radii(const std::uint8_t* codes, std::size_t n, std::size_t t0) const {
    return codes + n * st_.code_bytes + t0 * static_cast<std::size_t>(st_.dim / 16) * 2;
  }
  PolarState st_;
  const PolarKernels& k_;
  const char* isa_;
};

}  // namespace

std::unique_ptr<CpuCodec> make_cpu_polar(const Codec& ref) {
  const auto* r = dynamic_cast<const turbokv::ref::Polar*>(&ref);
  const int d = ref.head_dim();
  const SimdLevel lvl = simd_level();
  if (!r || lvl == SimdLevel::kScalar || d % 16 != 0 || d > vq::kMaxDim) return nullptr;
  return std::make_unique<PolarCodec>(ref, *r, lvl == SimdLevel::kAvx512);
}

}  // namespace turbokv::cpu::detail
