// CPU fast path for TurboQuant-Prod (Zandieh et al., arXiv 2504.19874,
// Algorithm 2): argument checks, the rotation / codebook / sketch prepared for
// the kernels, and dispatch to the per-ISA kernels (tq_prod_kernels.h). Built
// for baseline x86-64: no intrinsics here.
//
// Covered: bits 1..4 (MSE stage at 0..3 bits), head_dim a multiple of 16 up to
// 512, qjl_rows a multiple of 8 up to 4096, every rotation and codebook kind,
// Gaussian or orthogonal sketch rows, at kAvx2 and kAvx512. Other head_dims
// (multiples of 8 only) and kScalar wrap the reference.
#include <algorithm>
#include <limits>
#include <vector>

#include "../ref/internal.h"
#include "methods.h"
#include "tq_prod_kernels.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/pack.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {
namespace {

constexpr std::size_t kChunk = 64;
/// Sketch rows the fused attention kernel covers (its staging buffers hold 512 / 8 groups).
constexpr int kProdFusedMaxRows = 512;

/// The reference's rotation (Rotation(head_dim, rotation, seed)), codebook
/// (lloyd_max_codebook(head_dim, bits - 1, codebook)) and sketch, for the kernels.
void init_state(const CodecConfig& cfg, ProdState& ps, Rotation& rot) {
  const int d = cfg.head_dim;
  ps.d = d;
  ps.bits = static_cast<int>(cfg.bits) - 1;
  ps.sk = make_sketch_state(cfg);
  ps.mse_bytes = packed_bytes(static_cast<std::size_t>(d), ps.bits);
  ps.code_bytes = ps.mse_bytes + ps.sk.sign_bytes;
  for (float& b : ps.bnd) b = std::numeric_limits<float>::infinity();
  if (ps.bits > 0) {
    const ScalarCodebook& cb = lloyd_max_codebook(d, ps.bits, cfg.codebook);
    const int k = 1 << ps.bits;
    for (int i = 0; i < 16; ++i) ps.cb16[i] = cb.centroids[static_cast<std::size_t>(i % k)];
    ps.nbnd = k - 1;
    for (int i = 0; i < ps.nbnd; ++i) ps.bnd[i] = cb.boundaries[static_cast<std::size_t>(i)];
  }
  switch (rot.kind()) {
    case RotationKind::kHadamard:
      ps.rot = Rot::kHadamard;
      ps.signs = rot.signs();
      ps.scale = Rotation::hadamard_scale(d);
      ps.inv_scale.resize(static_cast<std::size_t>(d));
      for (int i = 0; i < d; ++i)
        ps.inv_scale[static_cast<std::size_t>(i)] =
            static_cast<double>(ps.scale) * static_cast<double>(ps.signs[static_cast<std::size_t>(i)]);
      break;
    case RotationKind::kHaar: {
      ps.rot = Rot::kDense;
      ps.mat = rot.matrix();
      const std::size_t n = static_cast<std::size_t>(d);
      ps.mat_t.resize(n * n);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j) ps.mat_t[j * n + i] = ps.mat[i * n + j];
      break;
    }
    case RotationKind::kNone: ps.rot = Rot::kNone; break;
  }
}

/// TurboQuant-Prod behind the CpuCodec interface. Query state: [d] float(Pi q),
/// then [mp] float(S Pi q) (zero beyond m); accumulator: [d] rotated-domain MSE
/// part, then [mp] sketch-domain sign part (rows >= m unused); codec domain:
/// the same [d | mp] layout (tq_prod_kernels.h).
class TqProdCodec final : public CpuCodec {
 public:
  TqProdCodec(const Codec& ref, const ProdKernels& k)
      : CpuCodec(ref), k_(&k), rot_(ref.config().head_dim, ref.config().rotation, ref.config().seed) {
    init_state(ref.config(), ps_, rot_);
    init_key_state();
  }
  /// The view of the fused attention kernel (kernels.h), or nullptr where it does not cover m.
  const ProdKeyState* key_state() const { return ps_.sk.m <= kProdFusedMaxRows ? &ks_ : nullptr; }
  const char* isa() const override { return k_->qjl->isa; }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(ps_.d + ps_.sk.mp); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(ps_.d + ps_.sk.mp); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_->scores(ps_, state, codes, n, t0, t1, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_->accumulate(ps_, codes, n, t0, t1, w, acc);
  }
  /// Codec domain: [rotated MSE part (d) | sketch part (mp)], laid out like the state and accumulator.
  std::size_t domain_size() const override { return static_cast<std::size_t>(ps_.d + ps_.sk.mp); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_->decode_domain(ps_, codes, n, t0, t1, y);
  }
  /// out = scale * Pi^T (acc[0, d) + S^T acc[d, d + m)) in fp64 (the reference's TqProd::do_finalize).
  void finalize(const float* acc, double scale, float* out) const override {
    const std::size_t d = static_cast<std::size_t>(ps_.d);
    std::vector<double> y(acc, acc + d), coef(acc + d, acc + d + static_cast<std::size_t>(ps_.sk.m)), x(d);
    k_->qjl->rowcomb(ps_.sk.s.data(), d, ps_.sk.m, ps_.d, coef.data(), y.data());
    k_->inverse(ps_, y.data(), x.data());
    for (std::size_t j = 0; j < d; ++j) out[j] = static_cast<float>(x[j] * scale);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    const std::size_t d = static_cast<std::size_t>(ps_.d);
    float scal[2 * kChunk];
    for (std::size_t c = t0; c < t1; c += kChunk) {
      const std::size_t cnt = std::min(kChunk, t1 - c);
      k_->encode(ps_, x + c * d, cnt, out + c * ps_.code_bytes, scal);
      for (std::size_t i = 0; i < 2 * cnt; ++i) store_half(out + n * ps_.code_bytes + 4 * c + 2 * i, scal[i]);
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    k_->decode(ps_, codes + t0 * ps_.code_bytes, codes + n * ps_.code_bytes + 4 * t0, t1 - t0,
               out + t0 * static_cast<std::size_t>(ps_.d));
  }
  void do_prepare_query(const float* q, float* state) const override {
    const std::size_t d = static_cast<std::size_t>(ps_.d);
    std::vector<double> qd(q, q + d), qr(d);
    rot_.forward(qd.data(), qr.data());
    for (std::size_t i = 0; i < d; ++i) state[i] = static_cast<float>(qr[i]);
    k_->qjl->project(ps_.sk, qr.data(), state + d);
  }

 private:
  void init_key_state() {
    ks_.dim = ps_.d;
    ks_.m = ps_.sk.m;
    ks_.mse_bits = ps_.bits;
    ks_.mse_bytes = ps_.mse_bytes;
    ks_.code_bytes = ps_.code_bytes;
    ks_.kappa = ps_.sk.kappa_f;
    ks_.mse.dim = ps_.d;
    ks_.mse.bits = ps_.bits;
    ks_.mse.ng = ps_.d / 8;
    ks_.mse.code_bytes = ps_.code_bytes;
    for (int i = 0; i < 16; ++i) ks_.mse.cb16[i] = ps_.cb16[i];
    ks_.sgn.dim = ps_.sk.m;
    ks_.sgn.bits = 1;
    ks_.sgn.ng = ps_.sk.m / 8;
    ks_.sgn.code_bytes = ps_.code_bytes;
    for (int i = 0; i < 16; ++i) ks_.sgn.cb16[i] = (i & 1) ? 1.0f : -1.0f;  // sign bit 1 = +1
  }

  const ProdKernels* k_;
  Rotation rot_;
  ProdState ps_;
  ProdKeyState ks_;
};

}  // namespace

const ProdKeyState* as_tq_prod(const CpuCodec* c) {
  const auto* t = dynamic_cast<const TqProdCodec*>(c);
  return t ? t->key_state() : nullptr;
}

std::unique_ptr<CpuCodec> make_cpu_tq_prod(const Codec& ref) {
  const CodecConfig& c = ref.config();
  const int m = c.qjl_rows ? c.qjl_rows : c.head_dim;
  const ProdKernels* k = simd_level() == SimdLevel::kAvx512 ? &tq_prod_avx512_kernels()
                         : simd_level() == SimdLevel::kAvx2 ? &tq_prod_avx2_kernels()
                                                            : nullptr;
  const bool bits_ok = c.bits == 1 || c.bits == 2 || c.bits == 3 || c.bits == 4;
  if (!k || !bits_ok || c.head_dim < 16 || c.head_dim % 16 != 0 || c.head_dim > kProdMaxDim || m < 8 || m % 8 != 0 ||
      m > kQjlMaxRows)
    return nullptr;
  return std::make_unique<TqProdCodec>(ref, *k);
}

}  // namespace turbokv::cpu::detail
