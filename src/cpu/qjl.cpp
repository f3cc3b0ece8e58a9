// CPU fast path for QJL (Zandieh, Daliri, Han, arXiv 2406.03482): argument
// checks, the sketch prepared for the kernels, and dispatch to the per-ISA
// kernels (qjl_kernels.h). Built for baseline x86-64: no intrinsics here.
//
// Covered: every configuration the reference accepts (head_dim a multiple of
// 8 up to 1024, qjl_rows a multiple of 8 up to 4096, Gaussian or orthogonal
// rows) at kAvx2 and kAvx512. kScalar (and anything larger) wraps the reference.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../ref/internal.h"
#include "methods.h"
#include "qjl_kernels.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/pack.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {

/// The sketch S of a QJL / TurboQuant-Prod codec with this config, as the
/// reference builds it (ref::Sketch: rows, head_dim, orthogonal, seed ^ 0x51).
SketchState make_sketch_state(const CodecConfig& cfg) {
  SketchState sk;
  const int d = cfg.head_dim, m = cfg.qjl_rows ? cfg.qjl_rows : cfg.head_dim;
  const ref::Sketch s(m, d, cfg.qjl_orthogonal, cfg.seed ^ 0x51ull);
  sk.m = m;
  sk.d = d;
  sk.mp = (m + 15) / 16 * 16;
  sk.sign_bytes = packed_bytes(static_cast<std::size_t>(m), 1);
  sk.kappa = s.kappa;
  sk.kappa_f = static_cast<float>(s.kappa);
  sk.s = s.s;
  sk.st.assign(static_cast<std::size_t>(d) * sk.mp, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < d; ++j)
      sk.st[static_cast<std::size_t>(j) * sk.mp + i] = s.s[static_cast<std::size_t>(i) * d + j];
  return sk;
}

/// The QJL kernels of simd_level(), or nullptr at kScalar.
const QjlKernels* qjl_kernels_for_level() {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return &qjl_avx512_kernels();
    case SimdLevel::kAvx2: return &qjl_avx2_kernels();
    default: return nullptr;
  }
}

namespace {

constexpr std::size_t kChunk = 64;

/// QJL behind the CpuCodec interface. Query state: float(S q), [mp] (zero
/// beyond m); accumulator: the sketch domain, [mp] (rows >= m unused); codec
/// domain: the same sketch domain (domain_size() = mp).
class QjlCodec final : public CpuCodec {
 public:
  QjlCodec(const Codec& ref, const QjlKernels& k) : CpuCodec(ref), k_(&k), sk_(make_sketch_state(ref.config())) {}
  const char* isa() const override { return k_->isa; }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(sk_.mp); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(sk_.mp); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_->scores(sk_, state, codes, n, t0, t1, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_->accumulate(sk_, codes, n, t0, t1, w, acc);
  }
  /// Codec domain: the sketch domain, y_t[mp] = kappa * ||k_t|| * (+-1 signs), rows m..mp-1 zero.
  std::size_t domain_size() const override { return static_cast<std::size_t>(sk_.mp); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_->decode_domain(sk_, codes, n, t0, t1, y);
  }
  /// out = scale * S^T acc (fp64: the reference's Qjl::do_finalize, then the scale).
  void finalize(const float* acc, double scale, float* out) const override {
    std::vector<double> coef(acc, acc + sk_.m), y(static_cast<std::size_t>(sk_.d), 0.0);
    k_->rowcomb(sk_.s.data(), static_cast<std::size_t>(sk_.d), sk_.m, sk_.d, coef.data(), y.data());
    for (int j = 0; j < sk_.d; ++j) out[j] = static_cast<float>(y[static_cast<std::size_t>(j)] * scale);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    const std::size_t d = static_cast<std::size_t>(sk_.d);
    float norms[kChunk];
    for (std::size_t c = t0; c < t1; c += kChunk) {
      const std::size_t cnt = std::min(kChunk, t1 - c);
      k_->encode(sk_, x + c * d, cnt, out + c * sk_.sign_bytes, norms);
      for (std::size_t i = 0; i < cnt; ++i) store_half(out + n * sk_.sign_bytes + 2 * (c + i), norms[i]);
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    k_->decode(sk_, codes + t0 * sk_.sign_bytes, codes + n * sk_.sign_bytes + 2 * t0, t1 - t0,
               out + t0 * static_cast<std::size_t>(sk_.d));
  }
  void do_prepare_query(const float* q, float* state) const override {
    std::vector<double> qd(q, q + sk_.d);
    k_->project(sk_, qd.data(), state);
  }

 private:
  const QjlKernels* k_;
  SketchState sk_;
};

}  // namespace

std::unique_ptr<CpuCodec> make_cpu_qjl(const Codec& ref) {
  const CodecConfig& c = ref.config();
  const int m = c.qjl_rows ? c.qjl_rows : c.head_dim;
  const QjlKernels* k = qjl_kernels_for_level();
  if (!k || c.bits != 1 || c.head_dim < 8 || c.head_dim % 8 != 0 || c.head_dim > kQjlMaxDim || m < 8 || m % 8 != 0 ||
      m > kQjlMaxRows)
    return nullptr;
  return std::make_unique<QjlCodec>(ref, *k);
}

}  // namespace turbokv::cpu::detail
