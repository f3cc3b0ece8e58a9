// CPU fast path for KIVI (Liu et al., arXiv 2402.02750; reference src/ref/kivi.cpp):
// keys quantized per channel over groups of G tokens, values per token over
// groups of G channels, b in {1, 2, 3, 4, 8} bits, fp16 (min, scale) pairs.
// Baseline x86-64: the CpuCodec adapter shared with fp8/fp16 (LowbitCodec),
// the fast input validation, and dispatch to the per-ISA kernels
// (kivi_avx2.cpp / kivi_avx512.cpp, written once in kivi_fp_simd.h).
//   encode/decode: the reference's bytes / floats exactly (formats.h);
//   scores (keys): <q, mn> + <q * sc, codes> per group, folded once per group;
//   accumulate:    acc += w_t * (mn + sc * codes), original domain.
//   codec domain:  the original domain, y_t = mn + sc * codes (decode's floats).
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_internal.h"
#include "kivi_fp.h"
#include "methods.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {

namespace {

class LowbitCodec final : public CpuCodec {
 public:
  LowbitCodec(const Codec& ref, const LowbitParams& p, const LowbitKernels& k, std::size_t granule, const char* isa,
              std::unique_ptr<KiviHeadState> fused)
      : CpuCodec(ref), p_(p), k_(k), granule_(granule), isa_(isa), fused_(std::move(fused)) {}
  /// The fused attention kernel's view (KIVI at 1..4 bits where covered), else nullptr.
  const KiviHeadState* fused_state() const { return fused_.get(); }
  const LowbitParams& params() const { return p_; }
  const char* isa() const override { return isa_; }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(p_.d); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(p_.d); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.scores(p_, state, codes, n, t0, t1, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.accumulate(p_, codes, n, t0, t1, w, acc);
  }
  void finalize(const float* acc, double scale, float* out) const override {
    for (int i = 0; i < p_.d; ++i) out[i] = static_cast<float>(acc[i] * scale);
  }
  /// Codec domain: the original domain (state = q, accumulator = sum w x_hat), y_t = x_hat_t.
  std::size_t domain_size() const override { return static_cast<std::size_t>(p_.d); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.decode_domain(p_, codes, n, t0, t1, y);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    k_.encode(p_, x, n, t0, t1, out);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    k_.decode(p_, codes, n, t0, t1, out);
  }
  void do_prepare_query(const float* q, float* state) const override {
    std::memcpy(state, q, sizeof(float) * static_cast<std::size_t>(p_.d));
  }
  std::size_t row_granule() const override { return granule_; }

 private:
  LowbitParams p_;
  const LowbitKernels& k_;
  std::size_t granule_;
  const char* isa_;
  std::unique_ptr<KiviHeadState> fused_;
};

/// The fused kernel's state of a KIVI codec with these parameters, or nullptr where the kernel does not
/// cover them (kernels.h KiviHeadState).
std::unique_ptr<KiviHeadState> make_kivi_state(const LowbitParams& p) {
  // Keys: token groups of at least 8 (a block of W tokens scores once per group it touches, so
  // smaller groups would repeat the whole key pass up to W times; the codec-domain path is faster).
  // Bits 1..4: codes read as a TurboQuant-MSE stream of the identity codebook; 8: bytes as they are
  // (kernels_simd.h Kivi8KeySrc / Kivi8ValSrc), same groups.
  const bool ok = ((p.bits >= 1 && p.bits <= 4) || p.bits == 8) && p.d % 16 == 0 && p.d <= 512 &&
                  (p.key ? p.group >= 8 : (p.group % 8 == 0 && p.d / p.group <= 8));
  if (!ok) return nullptr;
  auto x = std::make_unique<KiviHeadState>();
  x->dim = p.d;
  x->bits = p.bits;
  x->group = p.group;
  x->key = p.key;
  x->row_bytes = p.row_bytes;
  if (p.bits == 8) return x;
  const int k = 1 << p.bits;
  x->identity.bits = p.bits;
  for (int i = 0; i < k; ++i) x->identity.centroids.push_back(static_cast<float>(i));
  for (int i = 0; i + 1 < k; ++i) x->identity.boundaries.push_back(static_cast<float>(i) + 0.5f);
  init_tq_state(x->codes, p.d, p.bits, p.row_bytes, x->identity, nullptr);
  return x;
}

}  // namespace

std::unique_ptr<CpuCodec> make_lowbit_codec(const Codec& ref, const LowbitParams& p, const LowbitKernels& k,
                                            std::size_t row_granule, const char* isa) {
  return std::make_unique<LowbitCodec>(ref, p, k, row_granule, isa, nullptr);
}

int as_float_codec(const CpuCodec* c) {
  const auto* l = dynamic_cast<const LowbitCodec*>(c);
  if (!l || l->params().d % 16 != 0) return 0;
  return l->params().method == Method::kFp8 ? 8 : l->params().method == Method::kFp16 ? 16 : 0;
}

const KiviHeadState* as_kivi(const CpuCodec* c) {
  const auto* l = dynamic_cast<const LowbitCodec*>(c);
  return l ? l->fused_state() : nullptr;
}

std::unique_ptr<CpuCodec> make_cpu_kivi(const Codec& ref) {
  const CodecConfig& c = ref.config();
  const int bits = static_cast<int>(c.bits);
  const bool ok = c.method == Method::kKivi && static_cast<double>(bits) == c.bits &&
                  (bits == 1 || bits == 2 || bits == 3 || bits == 4 || bits == 8) && c.head_dim % 8 == 0 &&
                  c.head_dim >= 8 && c.head_dim <= kLowbitMaxDim && c.group_size >= 1 &&
                  (c.role == Role::kKey || c.head_dim % c.group_size == 0);
  if (!ok) return nullptr;
  LowbitParams p;
  p.d = c.head_dim;
  p.bits = bits;
  p.group = c.group_size;
  p.key = c.role == Role::kKey;
  p.row_bytes = packed_bytes(static_cast<std::size_t>(c.head_dim), bits);
  const std::size_t granule = p.key ? static_cast<std::size_t>(p.group) : 1;
  switch (simd_level()) {
    case SimdLevel::kAvx512:
      return std::make_unique<LowbitCodec>(ref, p, kivi_avx512_kernels(bits), granule, "avx512", make_kivi_state(p));
    case SimdLevel::kAvx2:
      return std::make_unique<LowbitCodec>(ref, p, kivi_avx2_kernels(bits), granule, "avx2", make_kivi_state(p));
    default: return nullptr;
  }
}

}  // namespace turbokv::cpu::detail
