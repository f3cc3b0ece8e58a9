// CPU fast path for fractional TurboQuant-MSE widths b + 0.5 (b = 1, 2, 3):
// the outlier-channel split of the reference (src/ref/tq_mse.cpp; Zandieh et
// al., arXiv 2504.19874, Algorithm 1 per part, split after Sec. 4.3). The
// d_o = d/2 channels chosen at calibration get b+1 bits, the rest b bits; each
// part has its own rotation (seed + part), codebook and fp16 norm.
// Baseline x86-64. Encode and decode run each part through the integer-width
// TurboQuant kernels (kernels.h) on gathered channels, so bytes and floats are
// the reference's; scores and value accumulation read the packed codes in
// place (tq_mse_split_avx2.cpp / _avx512.cpp, kivi_fp_simd.h), as does the
// codec-domain decode (tq_mse_split_simd.h): y_t = both parts' norm * centroids,
// rotated, at the parts' offsets in the query state / accumulator ([d]).
// attention_codec's fused kernel (CodecAttentionPath::kTqMseSplitFused,
// kernels_simd.h) reads the same bytes through fused_state() / as_tq_split() and
// rotates its value accumulators back with finalize_split_output().
// Covered: part dims that the integer kernels take (multiples of 16, i.e.
// head_dim a multiple of 32, up to 1024); other head_dims return nullptr (the
// reference wrapper). The channel split is the calibrated reference's
// (ref::tq_mse_split_channels), and the result is checked
// against the reference once at construction (nullptr if it ever differed).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../ref/tq_mse.h"
#include "cpu_internal.h"
#include "kivi_fp.h"
#include "methods.h"
#include "turbokv/cpu.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/rng.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {
namespace {

constexpr std::size_t kChunk = 64;

using SplitDomainFn = void (*)(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                               std::size_t t1, float* y);

}  // namespace

// Codec-domain decode per ISA (tq_mse_split_avx2.cpp / _avx512.cpp, tq_mse_split_simd.h).
void tq_split_decode_domain_avx2(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                                 std::size_t t1, float* y);
void tq_split_decode_domain_avx512(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                                   std::size_t t1, float* y);

namespace {

class TqMseSplitCodec final : public CpuCodec {
 public:
  /// channels[p]: the reference's channels of part p, ascending.
  TqMseSplitCodec(const Codec& ref, std::vector<int> channels[2], const SplitKernels& k, SplitDomainFn dom,
                  const char* isa)
      : CpuCodec(ref), k_(k), dom_(dom), isa_(isa) {
    const CodecConfig& c = ref.config();
    const int b = static_cast<int>(std::floor(c.bits));
    std::size_t off = 0, soff = 0;
    for (int p = 0; p < 2; ++p) {
      ch_[p] = std::move(channels[p]);
      CodecConfig pc;
      pc.method = Method::kTurboMse;
      pc.bits = p == 0 ? b + 1 : b;
      pc.head_dim = static_cast<int>(ch_[p].size());
      pc.seed = c.seed + static_cast<std::uint64_t>(p);
      pc.rotation = c.rotation;
      pc.codebook = c.codebook;
      tq_[p] = std::make_unique<TqMse>(pc);
      const TqState& st = tq_[p]->state();
      SplitPart& sp = sp_.part[p];
      sp.dim = st.dim;
      sp.bits = st.bits;
      sp.code_offset = off;
      sp.state_offset = soff;
      std::copy(st.cbx, st.cbx + 16, sp.cb);
      off += st.code_bytes;
      soff += static_cast<std::size_t>(st.dim);
    }
    sp_.row_bytes = off;
    init_fused_state();
  }
  /// The view of the fused attention kernels (kernels.h).
  const SplitHeadState& fused_state() const { return xs_; }
  const char* isa() const override { return isa_; }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(head_dim()); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(head_dim()); }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.scores(sp_, state, codes, n, t0, t1, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) k_.accumulate(sp_, codes, n, t0, t1, w, acc);
  }
  void finalize(const float* acc, double scale, float* out) const override {
    std::vector<float> tmp(static_cast<std::size_t>(head_dim()));
    for (int p = 0; p < 2; ++p) {
      finalize_output(tq_[p]->state(), acc + sp_.part[p].state_offset, 1, scale, tmp.data());
      for (std::size_t i = 0; i < ch_[p].size(); ++i) out[ch_[p][i]] = tmp[i];
    }
  }
  /// Codec domain: both parts' rotated domains concatenated ([d], where the query
  /// state and the accumulator live): y_t = (norm_{t,0} c_0[codes_{t,0}], norm_{t,1} c_1[codes_{t,1}]).
  std::size_t domain_size() const override { return static_cast<std::size_t>(head_dim()); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::decode_domain", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) dom_(sp_, codes, n, t0, t1, y);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    const std::size_t d = static_cast<std::size_t>(head_dim());
    const auto& k = kernels();
    std::vector<float> xp(kChunk * d), norms(kChunk);
    std::vector<std::uint8_t> cp(kChunk * sp_.row_bytes);
    for (std::size_t c0 = t0; c0 < t1; c0 += kChunk) {
      const std::size_t cnt = std::min(kChunk, t1 - c0);
      for (int p = 0; p < 2; ++p) {
        const std::vector<int>& ch = ch_[p];
        const TqState& st = tq_[p]->state();
        for (std::size_t i = 0; i < cnt; ++i) {
          const float* xr = x + (c0 + i) * d;
          float* dst = xp.data() + i * ch.size();
          for (std::size_t j = 0; j < ch.size(); ++j) dst[j] = xr[ch[j]];
        }
        k.encode(st, xp.data(), cnt, cp.data(), norms.data());
        for (std::size_t i = 0; i < cnt; ++i) {
          const std::size_t t = c0 + i;
          std::memcpy(out + t * sp_.row_bytes + sp_.part[p].code_offset, cp.data() + i * st.code_bytes,
                      st.code_bytes);
          store_half(out + n * sp_.row_bytes + 4 * t + 2 * static_cast<std::size_t>(p), norms[i]);
        }
      }
    }
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    const std::size_t d = static_cast<std::size_t>(head_dim());
    const auto& k = kernels();
    std::vector<float> y(kChunk * d);
    std::vector<std::uint8_t> cp(kChunk * sp_.row_bytes), nb(2 * kChunk);
    for (std::size_t c0 = t0; c0 < t1; c0 += kChunk) {
      const std::size_t cnt = std::min(kChunk, t1 - c0);
      for (int p = 0; p < 2; ++p) {
        const std::vector<int>& ch = ch_[p];
        const TqState& st = tq_[p]->state();
        for (std::size_t i = 0; i < cnt; ++i) {
          const std::size_t t = c0 + i;
          std::memcpy(cp.data() + i * st.code_bytes, codes + t * sp_.row_bytes + sp_.part[p].code_offset,
                      st.code_bytes);
          std::memcpy(nb.data() + 2 * i, codes + n * sp_.row_bytes + 4 * t + 2 * static_cast<std::size_t>(p), 2);
        }
        k.decode(st, cp.data(), nb.data(), cnt, y.data());
        for (std::size_t i = 0; i < cnt; ++i) {
          float* o = out + (c0 + i) * d;
          const float* src = y.data() + i * ch.size();
          for (std::size_t j = 0; j < ch.size(); ++j) o[ch[j]] = src[j];
        }
      }
    }
  }
  void do_prepare_query(const float* q, float* state) const override {
    std::vector<float> qp(static_cast<std::size_t>(head_dim()));
    for (int p = 0; p < 2; ++p) {
      for (std::size_t i = 0; i < ch_[p].size(); ++i) qp[i] = q[ch_[p][i]];
      detail::prepare_query(tq_[p]->state(), qp.data(), 1, state + sp_.part[p].state_offset);
    }
  }

 private:
  void init_fused_state() {
    xs_.dim = head_dim();
    xs_.row_bytes = sp_.row_bytes;
    for (int p = 0; p < 2; ++p) {
      const TqState& st = tq_[p]->state();
      TqState& v = xs_.part[p];
      v.dim = st.dim;
      v.bits = st.bits;
      v.ng = st.ng;
      v.code_bytes = sp_.row_bytes;  // the token stride of the part's stream
      std::copy(st.cb16, st.cb16 + 16, v.cb16);
      std::copy(st.cbx, st.cbx + 16, v.cbx);
      xs_.code_offset[p] = sp_.part[p].code_offset;
      xs_.own[p] = &st;
      xs_.channels[p] = ch_[p];
    }
  }

  std::vector<int> ch_[2];
  std::unique_ptr<TqMse> tq_[2];
  SplitParams sp_;
  const SplitKernels& k_;
  SplitDomainFn dom_;
  const char* isa_;
  SplitHeadState xs_;
};

}  // namespace

const SplitHeadState* as_tq_split(const CpuCodec* c) {
  const auto* t = dynamic_cast<const TqMseSplitCodec*>(c);
  return t ? &t->fused_state() : nullptr;
}

void finalize_split_output(const SplitHeadState& s, const float* acc, int lanes, double inv_l, float* out) {
  float tmp[512];
  float nat[2][512];  // packed: each part's rotated coordinates, natural order (the layout of 1 lane)
  if (s.packed(lanes)) {
    const int ng = s.part[0].ng;
    for (int k = 0; k < 8; ++k)
      for (int j = 0; j < 2 * ng; ++j) nat[j >= ng][8 * (j % ng) + k] = acc[k * lanes + j];
  }
  for (int p = 0; p < 2; ++p) {
    if (s.packed(lanes))
      finalize_output(*s.own[p], nat[p], 1, inv_l, tmp);
    else
      finalize_output(*s.own[p], acc + (p ? s.split_acc_offset(lanes) : 0), lanes, inv_l, tmp);
    for (std::size_t i = 0; i < s.channels[p].size(); ++i) out[s.channels[p][i]] = tmp[i];
  }
}

std::unique_ptr<CpuCodec> make_cpu_tq_mse_split(const Codec& ref) {
  const CodecConfig& c = ref.config();
  const int d = c.head_dim;
  const int b = static_cast<int>(std::floor(c.bits));
  if (c.method != Method::kTurboMse || c.bits != b + 0.5 || b < 1 || b > 3 || d % 32 != 0 || d < 32 ||
      d > 1024 || !ref.calibrated())
    return nullptr;
  const SplitKernels* k = nullptr;
  SplitDomainFn dom = nullptr;
  const char* isa = nullptr;
  switch (simd_level()) {
    case SimdLevel::kAvx512: k = &tq_split_avx512_kernels(), dom = &tq_split_decode_domain_avx512, isa = "avx512"; break;
    case SimdLevel::kAvx2: k = &tq_split_avx2_kernels(), dom = &tq_split_decode_domain_avx2, isa = "avx2"; break;
    default: return nullptr;
  }
  // The calibrated split, as the reference's encode gathers it.
  const std::size_t n = static_cast<std::size_t>(d);
  const int d_out = (d / 2) / 8 * 8;
  const std::size_t row_bytes = packed_bytes(static_cast<std::size_t>(d_out), b + 1) +
                                packed_bytes(static_cast<std::size_t>(d - d_out), b);
  if (ref.encoded_bytes(n) != n * (row_bytes + 4)) return nullptr;
  std::vector<int> ch[2];
  if (!ref::tq_mse_split_channels(ref, ch) || static_cast<int>(ch[0].size()) != d_out) return nullptr;
  auto fast = std::make_unique<TqMseSplitCodec>(ref, ch, *k, dom, isa);
  // Check once against the reference (bytes and decoded floats).
  const std::size_t m = 8;
  std::vector<float> x(m * n), dw(m * n), dg(m * n);
  Rng rng(c.seed ^ 0x5b1175eedull);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  std::vector<std::uint8_t> want(ref.encoded_bytes(m)), got(want.size());
  ref.encode(x.data(), m, want.data());
  fast->encode(x.data(), m, got.data(), 1);
  ref.decode(want.data(), m, dw.data());
  fast->decode(want.data(), m, dg.data(), 1);
  if (want != got || std::memcmp(dw.data(), dg.data(), dw.size() * sizeof(float)) != 0) return nullptr;
  return fast;
}

}  // namespace turbokv::cpu::detail
