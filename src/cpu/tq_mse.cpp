// TqMse: argument checks at the boundary, threading, and the per-ISA kernels
// (kernels.h) for encode, decode and scores. Built for baseline x86-64.
#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_internal.h"
#include "methods.h"
#include "turbokv/cpu.h"
#include "turbokv/half.h"
#include "turbokv/pack.h"
#include "turbokv/simd.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"

namespace turbokv::cpu {

using detail::kernels;
using detail::TqState;

namespace detail {

namespace {
template <bool kMax>
bool scan_f32(const float* x, std::size_t n, float* max_abs) {
  // x - x is +0 (no bits set) for every finite x and NaN for +-inf and NaN: OR-ing the differences
  // flags any non-finite value in two SSE2 operations per 4 floats (the exponent mask and compare took
  // five: 27% of a d64 1-bit encode, session 15). Baseline x86-64: SSE2 only.
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 bad0 = _mm_setzero_ps(), bad1 = _mm_setzero_ps(), top0 = _mm_setzero_ps(), top1 = _mm_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
    bad0 = _mm_or_ps(bad0, _mm_sub_ps(a, a));
    bad1 = _mm_or_ps(bad1, _mm_sub_ps(b, b));
    if constexpr (kMax) {
      top0 = _mm_max_ps(top0, _mm_and_ps(a, abs_mask));
      top1 = _mm_max_ps(top1, _mm_and_ps(b, abs_mask));
    }
  }
  bool finite =
      _mm_movemask_epi8(_mm_cmpeq_epi32(_mm_castps_si128(_mm_or_ps(bad0, bad1)), _mm_setzero_si128())) == 0xffff;
  float m = 0.0f;
  if constexpr (kMax) {
    alignas(16) float t4[4];
    _mm_store_ps(t4, _mm_max_ps(top0, top1));
    m = std::max(std::max(t4[0], t4[1]), std::max(t4[2], t4[3]));
  }
  for (; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    if constexpr (kMax) m = std::max(m, std::fabs(x[i]));
  }
  if constexpr (kMax) *max_abs = m;
  return finite;
}
}  // namespace

bool all_finite_f32(const float* x, std::size_t n, float* max_abs) {
  return max_abs ? scan_f32<true>(x, n, max_abs) : scan_f32<false>(x, n, nullptr);
}

void check_finite_f32(const char* where, const char* arg, const float* x, std::size_t n) {
  if (!all_finite_f32(x, n)) check_finite(where, arg, x, n);
}

void check_finite_16(const char* where, const char* arg, const std::uint16_t* x, std::size_t n, bool bf16) {
  const std::uint16_t mask = bf16 ? 0x7f80u : 0x7c00u;
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad |= static_cast<std::uint32_t>((x[i] & mask) == mask);
  if (!bad) return;
  for (std::size_t i = 0; i < n; ++i)
    if ((x[i] & mask) == mask)
      throw std::invalid_argument(turbokv::detail::concat(where, ": ", arg, "[", i, "] = ",
                                                 bf16 ? bf16_to_float(x[i]) : half_to_float(x[i]), ": must be finite"));
}

void prepare_query(const TqState& st, const float* q, int lanes, float* qp) {
  const int d = st.dim;
  double qd[512] = {}, qr[512];
  for (int i = 0; i < d; ++i) qd[i] = q[i];
  st.rotation->forward(qd, qr);
  (void)lanes;
  for (int i = 0; i < d; ++i) qp[i] = static_cast<float>(qr[i]);
}

void finalize_output(const TqState& st, const float* acc, int lanes, double inv_l, float* out) {
  const int d = st.dim;
  double y[512], x[512];
  const std::vector<int>& lay = st.layout_for(lanes);
  for (std::size_t f = 0; f < lay.size(); ++f)
    if (lay[f] >= 0) y[lay[f]] = acc[f];
  st.rotation->inverse(y, x);
  for (int i = 0; i < d; ++i) out[i] = static_cast<float>(x[i] * inv_l);
}

void init_tq_state(TqState& st, int dim, int bits, std::size_t code_bytes, const ScalarCodebook& cb,
                   const Rotation* rotation) {
  st.dim = dim;
  st.bits = bits;
  st.ng = dim / 8;
  st.code_bytes = code_bytes;
  st.codebook = &cb;
  const int k = 1 << bits;
  for (int i = 0; i < 16; ++i) {
    st.cb16[i] = cb.centroids[static_cast<std::size_t>(i % k)];
    st.cbx[i] = i < k ? cb.centroids[static_cast<std::size_t>(i)] : 0.0f;
    st.bnd16[i] = i < k - 1 ? cb.boundaries[static_cast<std::size_t>(i)] : std::numeric_limits<float>::infinity();
  }
  st.nbnd = k - 1;
  for (int w : {0, 3, 4}) {
    const int lanes = 1 << w;
    st.layout[w].resize(static_cast<std::size_t>(layout_floats(st.ng, lanes)));
    for (std::size_t f = 0; f < st.layout[w].size(); ++f)
      st.layout[w][f] = layout_coord(static_cast<int>(f), st.ng, lanes);
  }
  st.rotation = rotation;
  if (!rotation) return;
  switch (rotation->kind()) {
    case RotationKind::kHadamard:
      st.rot = Rot::kHadamard;
      st.signs = rotation->signs();
      st.scale = Rotation::hadamard_scale(st.dim);
      st.inv_scale.resize(static_cast<std::size_t>(st.dim));
      for (int i = 0; i < st.dim; ++i) st.inv_scale[static_cast<std::size_t>(i)] = st.scale * st.signs[static_cast<std::size_t>(i)];
      break;
    case RotationKind::kHaar: {
      st.rot = Rot::kDense;
      st.mat = rotation->matrix();
      const std::size_t d = static_cast<std::size_t>(st.dim);
      st.mat_t.resize(d * d);
      for (std::size_t i = 0; i < d; ++i)
        for (std::size_t j = 0; j < d; ++j) st.mat_t[j * d + i] = st.mat[i * d + j];
      break;
    }
    case RotationKind::kNone: st.rot = Rot::kNone; break;
  }
}

}  // namespace detail

namespace {
constexpr std::size_t kEncodeChunk = 64;
}

TqMse::TqMse(const CodecConfig& cfg) : cfg_(cfg), state_(std::make_unique<TqState>()) {
  const char* where = "cpu::TqMse";
  check_arg(cfg.method == Method::kTurboMse, where, "cfg.method", method_name(cfg.method), "must be tq-mse");
  check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "cfg.bits", cfg.bits,
            "the fast path supports integer widths 1, 2, 3, 4");
  check_arg(cfg.head_dim >= 16 && cfg.head_dim <= 512 && cfg.head_dim % 16 == 0, where, "cfg.head_dim",
            cfg.head_dim, "must be a multiple of 16 in 16..512");
  state_->rotation_storage = std::make_unique<Rotation>(cfg.head_dim, cfg.rotation, cfg.seed);
  detail::init_tq_state(*state_, cfg.head_dim, static_cast<int>(cfg.bits),
                        packed_bytes(static_cast<std::size_t>(cfg.head_dim), static_cast<int>(cfg.bits)),
                        lloyd_max_codebook(cfg.head_dim, static_cast<int>(cfg.bits), cfg.codebook),
                        state_->rotation_storage.get());
}

TqMse::~TqMse() = default;

std::size_t TqMse::code_bytes() const { return state_->code_bytes; }
std::size_t TqMse::encoded_bytes(std::size_t n) const { return n * (state_->code_bytes + 2); }

namespace {

void store_norms(const TqState& st, const std::vector<float>& norms, std::size_t n, std::uint8_t* out) {
  std::uint8_t* scal = out + n * st.code_bytes;
  for (std::size_t t = 0; t < n; ++t) {
    check_arg(norms[t] <= 65504.0f, "cpu::TqMse::encode", "||x[t]||", norms[t],
              "exceeds the fp16 range of the stored norm");
    store_half(scal + 2 * t, norms[t]);
  }
}

}  // namespace

void TqMse::encode(const float* x, std::size_t n, std::uint8_t* out, int threads) const {
  if (n == 0) return;
  const char* where = "cpu::TqMse::encode";
  check_arg(x != nullptr, where, "x", "null", "must not be null");
  check_arg(out != nullptr, where, "out", "null", "must not be null");
  const std::size_t d = static_cast<std::size_t>(head_dim());
  detail::check_finite_f32(where, "x", x, n * d);
  const TqState& st = *state_;
  const auto& k = kernels();
  std::vector<float> norms(n);
  const std::size_t chunks = (n + kEncodeChunk - 1) / kEncodeChunk;
  detail::parallel_for(chunks, threads, [&](std::size_t c) {
    const std::size_t t0 = c * kEncodeChunk, cnt = std::min(kEncodeChunk, n - t0);
    k.encode(st, x + t0 * d, cnt, out + t0 * st.code_bytes, norms.data() + t0);
  });
  store_norms(st, norms, n, out);
}

void TqMse::encode(const std::uint16_t* x, DType dtype, std::size_t n, std::uint8_t* out, int threads) const {
  const char* where = "cpu::TqMse::encode";
  check_arg(dtype == DType::kF16 || dtype == DType::kBf16, where, "dtype", static_cast<int>(dtype),
            "must be kF16 or kBf16 for uint16_t input");
  if (n == 0) return;
  check_arg(x != nullptr, where, "x", "null", "must not be null");
  check_arg(out != nullptr, where, "out", "null", "must not be null");
  const bool bf16 = dtype == DType::kBf16;
  const std::size_t d = static_cast<std::size_t>(head_dim());
  detail::check_finite_16(where, "x", x, n * d, bf16);
  const TqState& st = *state_;
  const auto& k = kernels();
  std::vector<float> norms(n);
  const std::size_t chunks = (n + kEncodeChunk - 1) / kEncodeChunk;
  detail::parallel_for(chunks, threads, [&](std::size_t c) {
    const std::size_t t0 = c * kEncodeChunk, cnt = std::min(kEncodeChunk, n - t0);
    std::vector<float> buf(cnt * d);
    k.convert(x + t0 * d, bf16, cnt * d, buf.data());
    k.encode(st, buf.data(), cnt, out + t0 * st.code_bytes, norms.data() + t0);
  });
  store_norms(st, norms, n, out);
}

void TqMse::decode(const std::uint8_t* codes, std::size_t n, float* out, int threads) const {
  if (n == 0) return;
  const char* where = "cpu::TqMse::decode";
  check_arg(codes != nullptr, where, "codes", "null", "must not be null");
  check_arg(out != nullptr, where, "out", "null", "must not be null");
  const TqState& st = *state_;
  const auto& k = kernels();
  const std::size_t d = static_cast<std::size_t>(head_dim());
  const std::size_t chunks = (n + kEncodeChunk - 1) / kEncodeChunk;
  detail::parallel_for(chunks, threads, [&](std::size_t c) {
    const std::size_t t0 = c * kEncodeChunk, cnt = std::min(kEncodeChunk, n - t0);
    k.decode(st, codes + t0 * st.code_bytes, codes + n * st.code_bytes + 2 * t0, cnt, out + t0 * d);
  });
}

void TqMse::scores(const float* q, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                   float* out) const {
  const char* where = "cpu::TqMse::scores";
  check_arg(t0 <= t1 && t1 <= n, where, "t1", t1, "token range must satisfy t0 <= t1 <= n");
  if (t1 == t0) return;
  check_arg(q != nullptr && codes != nullptr && out != nullptr, where, "q/codes/out", "null", "must not be null");
  detail::check_finite_f32(where, "q", q, static_cast<std::size_t>(head_dim()));
  const auto& k = kernels();
  std::vector<float> qp(static_cast<std::size_t>(head_dim()));
  detail::prepare_query(*state_, q, k.lanes, qp.data());
  k.scores(*state_, codes, n, t0, t1, qp.data(), out);
}

// ---------------------------------------------------------------- CpuCodec adapter

namespace detail {
namespace {

/// TurboQuant-MSE at integer widths behind the CpuCodec interface. Query state:
/// the rotated query (natural order); accumulator: the rotated domain (natural order).
class TqMseCodec final : public CpuCodec {
 public:
  explicit TqMseCodec(const Codec& ref) : CpuCodec(ref), tq_(ref.config()) {}
  const char* isa() const override { return simd_level_name(simd_level()); }
  std::size_t query_state_size() const override { return static_cast<std::size_t>(head_dim()); }
  std::size_t accumulator_size() const override { return static_cast<std::size_t>(head_dim()); }
  const TqMse& tq() const { return tq_; }

  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::scores", "t1", t1, "must satisfy t0 <= t1 <= n");
    if (t1 > t0) kernels().scores(tq_.state(), codes, n, t0, t1, state, out);
  }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    check_arg(t0 <= t1 && t1 <= n, "CpuCodec::accumulate", "t1", t1, "must satisfy t0 <= t1 <= n");
    const TqState& st = tq_.state();
    const std::uint8_t* norms = codes + n * st.code_bytes;
    for (std::size_t t = t0; t < t1; ++t) {
      const float wn = w[t - t0] * half_to_float(static_cast<std::uint16_t>(norms[2 * t] | (norms[2 * t + 1] << 8)));
      const std::uint8_t* p = codes + t * st.code_bytes;
      for (int i = 0; i < st.dim; ++i) acc[i] += wn * st.cbx[get_code(p, static_cast<std::size_t>(i), st.bits)];
    }
  }
  void finalize(const float* acc, double scale, float* out) const override {
    finalize_output(tq_.state(), acc, 1, scale, out);
  }

 protected:
  void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const override {
    const TqState& st = tq_.state();
    const std::size_t d = static_cast<std::size_t>(st.dim);
    std::vector<float> norms(t1 - t0);
    kernels().encode(st, x + t0 * d, t1 - t0, out + t0 * st.code_bytes, norms.data());
    for (std::size_t t = t0; t < t1; ++t) store_half(out + n * st.code_bytes + 2 * t, norms[t - t0]);
  }
  void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out) const override {
    const TqState& st = tq_.state();
    kernels().decode(st, codes + t0 * st.code_bytes, codes + n * st.code_bytes + 2 * t0, t1 - t0,
                     out + t0 * static_cast<std::size_t>(st.dim));
  }
  void do_prepare_query(const float* q, float* state) const override {
    detail::prepare_query(tq_.state(), q, 1, state);
  }

 private:
  TqMse tq_;
};

}  // namespace

std::unique_ptr<CpuCodec> make_cpu_tq_mse(const Codec& ref) {
  if (ref.config().bits != static_cast<int>(ref.config().bits)) return make_cpu_tq_mse_split(ref);
  const CodecConfig& c = ref.config();
  const bool ok = (c.bits == 1 || c.bits == 2 || c.bits == 3 || c.bits == 4) && c.head_dim >= 16 &&
                  c.head_dim <= 512 && c.head_dim % 16 == 0;
  if (!ok) return nullptr;
  return std::make_unique<TqMseCodec>(ref);
}

const TqMse* as_tq_mse(const CpuCodec* c) {
  const auto* t = dynamic_cast<const TqMseCodec*>(c);
  return t ? &t->tq() : nullptr;
}

}  // namespace detail

}  // namespace turbokv::cpu
