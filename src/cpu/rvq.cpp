// CPU fast path for two-stage residual scalar VQ (reference: src/ref/rvq.cpp):
// argument checks and threading come from CpuCodec (codec.cpp); the per-ISA
// kernels (rvq_avx2.cpp, rvq_avx512.cpp, templates in rvq_simd.h) do the
// rotation, both stages' quantization and packing, decode, scores and value
// accumulation. Also defines RotPlan::init, which the PVQ and PolarQuant fast
// paths share. Built for baseline x86-64.
//
// Covered: every bit width (1..4), every rotation kind, head_dim a multiple of
// 16 up to 1024; other head_dims get nullptr (the reference wrapper).
// Query state: the rotated query Pi q (fp32, [d]); accumulator: the rotated
// domain ([d]), turned back by Pi^T in fp64 in finalize(). Codec domain
// (domain_size() = d): y_t = norm_t * (c1 + c2)_t, rotated.
#include <vector>

#include "../ref/rvq.h"
#include "kernels.h"
#include "methods.h"
#include "rvq_internal.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {

namespace vq {

void RotPlan::init(const Rotation& r) {
  rotation = &r;
  dim = r.dim();
  kind = r.kind();
  const std::size_t d = static_cast<std::size_t>(dim);
  if (kind == RotationKind::kHadamard) {
    signs = r.signs();
    scale = Rotation::hadamard_scale(dim);
    inv_scale.resize(d);
    for (std::size_t i = 0; i < d; ++i) inv_scale[i] = scale * signs[i];  // as Rotation::inverse (fp32)
  } else if (kind == RotationKind::kHaar) {
    mat = r.matrix();
    mat_t.resize(d * d);
    for (std::size_t i = 0; i < d; ++i)
      for (std::size_t j = 0; j < d; ++j) mat_t[j * d + i] = mat[i * d + j];
  }
}

}  // namespace vq

namespace {

using vq::RvqKernels;
using vq::RvqState;

/// RVQ behind the CpuCodec interface at AVX2 or AVX-512.
class RvqCodec final : public CpuCodec {
 public:
  RvqCodec(const Codec& ref, const turbokv::ref::Rvq& r, bool avx512)
      : CpuCodec(ref),
        k_(avx512 ? vq::rvq_avx512_kernels(r.bits()) : vq::rvq_avx2_kernels(r.bits())),
        isa_(avx512 ? "avx512" : "avx2") {
    st_.dim = r.head_dim();
    st_.bits = r.bits();
    st_.stage_bytes = r.stage_bytes();
    st_.code_bytes = 2 * st_.stage_bytes;
    st_.rot.init(r.rotation());
    const ScalarCodebook& a = r.stage1_codebook();
    const ScalarCodebook& b = r.stage2_codebook();
    for (std::size_t i = 0; i < a.centroids.size(); ++i) st_.c1[i] = a.centroids[i];
    for (std::size_t i = 0; i < b.centroids.size(); ++i) st_.c2[i] = b.centroids[i];
    for (std::size_t i = 0; i < a.boundaries.size(); ++i) st_.bnd1[i] = a.boundaries[i];
    for (std::size_t i = 0; i < b.boundaries.size(); ++i) st_.bnd2[i] = b.boundaries[i];
    st_.nbnd = static_cast<int>(a.boundaries.size());
    if (st_.dim <= 512) {  // the fused attention kernel's head_dim range (kernels.h RvqHeadState)
      fused_.dim = st_.dim;
      fused_.bits = st_.bits;
      fused_.stage_bytes = st_.stage_bytes;
      fused_.code_bytes = st_.code_bytes;
      init_tq_state(fused_.stage[0], st_.dim, st_.bits, st_.code_bytes, a, &r.rotation());
      init_tq_state(fused_.stage[1], st_.dim, st_.bits, st_.code_bytes, b, nullptr);
    }
  }
  /// The fused attention kernel's view (head_dim <= 512), else nullptr.
  const RvqHeadState* fused_state() const { return fused_.dim ? &fused_ : nullptr; }
  const char* isa() const override { return isa_; }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(st_.dim); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(st_.dim); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.scores(st_, state, codes + t0 * st_.code_bytes, codes + n * st_.code_bytes + 2 * t0, t1 - t0, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0)
      k_.accumulate(st_, codes + t0 * st_.code_bytes, codes + n * st_.code_bytes + 2 * t0, t1 - t0, w, acc);
  }
  void finalize(const float* acc, double scale, float* out) const override {
    std::vector<double> a(acc, acc + st_.dim), x(static_cast<std::size_t>(st_.dim));
    st_.rot.rotation->inverse(a.data(), x.data());
    for (int i = 0; i < st_.dim; ++i) out[i] = static_cast<float>(x[static_cast<std::size_t>(i)] * scale);
  }
  /// Codec domain: y_t = norm_t * (c1 + c2)_t in the rotated domain, [d] (the prepared
  /// query Pi q and the accumulator live there).
  std::size_t domain_size() const override { return static_cast<std::size_t>(st_.dim); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.decode_domain(st_, codes + t0 * st_.code_bytes, codes + n * st_.code_bytes + 2 * t0, t1 - t0, y);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    const std::size_t d = static_cast<std::size_t>(st_.dim);
    std::vector<float> norms(t1 - t0);
    k_.encode(st_, x + t0 * d, t1 - t0, out + t0 * st_.code_bytes, norms.data());
    for (std::size_t t = t0; t < t1; ++t) store_half(out + n * st_.code_bytes + 2 * t, norms[t - t0]);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    k_.decode(st_, codes + t0 * st_.code_bytes, codes + n * st_.code_bytes + 2 * t0, t1 - t0,
              out + t0 * static_cast<std::size_t>(st_.dim));
  }
  void do_prepare_query(const float* q, float* state) const override {
    std::vector<double> qd(q, q + st_.dim), qr(static_cast<std::size_t>(st_.dim));
    st_.rot.rotation->forward(qd.data(), qr.data());
    for (int i = 0; i < st_.dim; ++i) state[i] = static_cast<float>(qr[static_cast<std::size_t>(i)]);
  }

 private:
  RvqState st_;
  RvqHeadState fused_;
  const RvqKernels& k_;
  const char* isa_;
};

}  // namespace

const RvqHeadState* as_rvq(const CpuCodec* c) {
  const auto* r = dynamic_cast<const RvqCodec*>(c);
  return r ? r->fused_state() : nullptr;
}

std::unique_ptr<CpuCodec> make_cpu_rvq(const Codec& ref) {
  const auto* r = dynamic_cast<const turbokv::ref::Rvq*>(&ref);
  const int d = ref.head_dim();
  const SimdLevel lvl = simd_level();
  if (!r || lvl == SimdLevel::kScalar || d % 16 != 0 || d > vq::kMaxDim) return nullptr;
  return std::make_unique<RvqCodec>(ref, *r, lvl == SimdLevel::kAvx512);
}

}  // namespace turbokv::cpu::detail
