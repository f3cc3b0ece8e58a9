// Fused decode attention (TurboQuant-MSE at integer and fractional widths,
// TurboQuant-Prod keys with TurboQuant-MSE values, RVQ, KIVI, fp8 / fp16 codecs, the generic codec paths and
// the dense baselines) and the memory-stream baseline: argument checks, the split of (sequence, KV head,
// head chunk, token chunk) work items over the pool, the log-sum-exp merge
// and the final rotation back. The per-block math is in the kernels.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu_internal.h"
#include "methods.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/error.h"
#include "turbokv/simd.h"

namespace turbokv::cpu {
namespace {

using detail::kernels;

constexpr int kMaxHeadsPerJob = 16;
/// Tokens of one work item at most, on any number of threads: a job's running sums are fp32 and add one
/// term per block of tokens, so their rounding grows with the job's length; the chunks' partials merge in
/// fp64 (l) and by one scaled fp32 add per chunk (acc). One job over 131,072 tokens (head_dim 256, peaked
/// logits, values of mean 4) was 9.0e-6 from the fp64 reference for TurboQuant 4-bit even with the block
/// sums of kernels_simd.h, 1.7e-4 for fp8 / fp16; chunks of 8,192 tokens: 4.0e-7 and 4.4e-6
/// (docs/RESULTS.md "Session 31").
constexpr std::size_t kMaxChunkTokens = 8192;

/// kMaxChunkTokens, or TURBOKV_CHUNK_TOKENS when it holds a positive integer (rounded up to a multiple of 16,
/// chunk starts' granule on more than one thread); read at every call (turbokv/cpu.h).
std::size_t max_chunk_tokens() {
  if (const char* env = std::getenv("TURBOKV_CHUNK_TOKENS"); env && *env) {
    const long long v = std::atoll(env);
    if (v > 0) return (static_cast<std::size_t>(v) + 15) / 16 * 16;
  }
  return kMaxChunkTokens;
}

struct Span {
  std::size_t begin, end;
};

std::size_t window_begin(std::size_t ctx, const AttentionParams& p) {
  return (p.window > 0 && ctx > static_cast<std::size_t>(p.window)) ? ctx - static_cast<std::size_t>(p.window) : 0;
}

void check_params(const char* where, int num_heads, int num_kv_heads, const AttentionParams& p) {
  check_attention_params(where, num_heads, num_kv_heads, p);
}

/**
 * Splits every sequence's span over work items (seq, kv head, head chunk,
 * token chunk), runs job(seq, g, h0, hc, t0, t1, m, l, acc) for each on the
 * pool, merges the chunks of each head by log-sum-exp and calls
 * finish(seq, head, acc[P], 1 / l).
 */
template <class Job, class Finish>
void run_split(const std::vector<Span>& spans, int kvh, int G, int P, int threads, Job job, Finish finish,
               int max_heads = kMaxHeadsPerJob) {
  const int nthreads = detail::resolve_threads(threads);
  const int nhc = (G + max_heads - 1) / max_heads;
  std::size_t total = 0;
  for (const Span& s : spans) total += (s.end - s.begin) * static_cast<std::size_t>(kvh * nhc);
  std::size_t chunk = nthreads == 1 ? static_cast<std::size_t>(-1) / 2
                                    : std::max<std::size_t>(512, (total + 4 * nthreads - 1) / (4 * nthreads));
  if (nthreads > 1) chunk = (chunk + 15) / 16 * 16;
  chunk = std::min(chunk, max_chunk_tokens());

  struct Item {
    std::size_t seq, t0, t1, off;
    int g, h0, hc;
  };
  std::vector<Item> items;
  std::vector<std::size_t> first(spans.size() * static_cast<std::size_t>(kvh * nhc) + 1);
  std::size_t off = 0;
  for (std::size_t s = 0; s < spans.size(); ++s)
    for (int g = 0; g < kvh; ++g)
      for (int c = 0; c < nhc; ++c) {
        first[(s * kvh + g) * nhc + c] = items.size();
        const int h0 = c * max_heads, hc = std::min(max_heads, G - h0);
        for (std::size_t t = spans[s].begin; t < spans[s].end; t += chunk) {
          items.push_back({s, t, std::min(spans[s].end, t + chunk), off, g, h0, hc});
          off += static_cast<std::size_t>(hc) * (2 + P);
        }
      }
  first.back() = items.size();
  std::vector<float> part(off);
  detail::parallel_for(items.size(), threads, [&](std::size_t i) {
    const Item& it = items[i];
    float* m = part.data() + it.off;
    job(it.seq, it.g, it.h0, it.hc, it.t0, it.t1, m, m + it.hc, m + 2 * it.hc);
  });
  std::vector<float> acc(static_cast<std::size_t>(P));
  for (std::size_t u = 0; u + 1 < first.size(); ++u) {
    const std::size_t a = first[u], b = first[u + 1];
    if (a == b) continue;
    const Item& it0 = items[a];
    for (int h = 0; h < it0.hc; ++h) {
      float mx = -INFINITY;
      for (std::size_t i = a; i < b; ++i) mx = std::max(mx, part[items[i].off + h]);
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::size_t i = a; i < b; ++i) {
        const float* m = part.data() + items[i].off;
        if (m[h] == -INFINITY) continue;
        const float w = std::exp(m[h] - mx);
        l += static_cast<double>(w) * m[items[i].hc + h];
        const float* src = m + 2 * items[i].hc + static_cast<std::size_t>(h) * P;
        if (b - a == 1)
          std::copy(src, src + P, acc.begin());
        else
          for (int f = 0; f < P; ++f) acc[static_cast<std::size_t>(f)] += w * src[f];
      }
      finish(it0.seq, it0.g * G + it0.h0 + h, acc.data(), 1.0 / l);
    }
  }
}

/// One sequence of a decode-attention call; Head is TqHead (fused TurboQuant-MSE kernels) or CodecHead.
template <class Head>
struct SeqViewT {
  const std::vector<Head>* keys;
  const std::vector<Head>* values;
  std::size_t n, ctx;
  const float* q;
  float* out;
};
using SeqView = SeqViewT<TqHead>;
using CodecSeqView = SeqViewT<CodecHead>;

template <class Head>
void check_seq(const char* where, const SeqViewT<Head>& s, int num_heads, int d, const std::string& tag) {
  const std::string pre = where + tag;
  const char* w = pre.c_str();
  check_arg(s.n > 0, w, "num_tokens", s.n, "must be positive");
  check_arg(s.ctx <= s.n, w, "context", s.ctx, "must be <= num_tokens");
  check_arg(s.values->size() == s.keys->size(), w, "values.size()", s.values->size(), "must equal keys.size()");
  check_arg(s.q != nullptr, w, "q", "null", "must not be null");
  check_arg(s.out != nullptr, w, "out", "null", "must not be null");
  for (std::size_t g = 0; g < s.keys->size(); ++g) {
    const Head& k = (*s.keys)[g];
    const Head& v = (*s.values)[g];
    check_arg(k.codec != nullptr && k.codes != nullptr, w, "keys[g]", g, "has a null codec or codes");
    check_arg(v.codec != nullptr && v.codes != nullptr, w, "values[g]", g, "has a null codec or codes");
    check_arg(k.codec->head_dim() == d, w, "keys[g].head_dim", k.codec->head_dim(), "must be the same for all heads");
    check_arg(v.codec->head_dim() == d, w, "values[g].head_dim", v.codec->head_dim(), "must equal the keys' head_dim");
  }
  detail::check_finite_f32(w, "q", s.q, static_cast<std::size_t>(num_heads) * d);
}

/// For AttentionPrecision::kInt8 at the AVX-512 level: whether a job of g query heads sums with AMX tiles,
/// indexed by g (1..16), for the job sizes GQA groups of G heads make (run_split: kMaxHeadsPerJob at a time, then the
/// rest). int8_uses_amx reads TURBOKV_AMX: asked here, on the calling thread, not by the workers.
std::array<bool, kMaxHeadsPerJob + 1> int8_amx_by_group(const AttentionParams& p, int G, int d) {
  std::array<bool, kMaxHeadsPerJob + 1> amx{};
  if (p.precision == AttentionPrecision::kInt8 && simd_level() == SimdLevel::kAvx512)
    for (int g : {std::min(G, kMaxHeadsPerJob), G % kMaxHeadsPerJob})
      if (g > 0) amx[static_cast<std::size_t>(g)] = int8_uses_amx(g, d);
  return amx;
}

void run_tq(const std::vector<SeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int kvh = static_cast<int>(seqs[0].keys->size());
  const int G = num_heads / kvh;
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  const auto& k = kernels();
  const int lanes = k.lanes;
  const int P = detail::layout_floats(d / 8, lanes);
  // Rotated queries: [seq][head][d], each rotated by its KV head's key rotation.
  std::vector<float> qp(seqs.size() * static_cast<std::size_t>(num_heads) * d);
  std::vector<Span> spans;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    for (int h = 0; h < num_heads; ++h)
      detail::prepare_query((*seqs[s].keys)[static_cast<std::size_t>(h / G)].codec->state(),
                            seqs[s].q + static_cast<std::size_t>(h) * d, lanes,
                            qp.data() + (s * num_heads + h) * static_cast<std::size_t>(d));
    const std::size_t ctx = seqs[s].ctx ? seqs[s].ctx : seqs[s].n;
    spans.push_back({window_begin(ctx, p), ctx});
  }
  const float scale = static_cast<float>(p.softmax_scale), softcap = static_cast<float>(p.softcap);
  // AttentionPrecision::kBf16 where the CPU can (AVX-512 level and AVX512-BF16), kInt8 at the AVX-512
  // level; else the fp32 kernels.
  void (*attend)(const detail::AttnJob&) = k.attend;
  if (p.precision == AttentionPrecision::kBf16 && simd_level() == SimdLevel::kAvx512 && cpu_has_avx512_bf16())
    attend = detail::avx512_bf16_attend;
  if (p.precision == AttentionPrecision::kInt8 && simd_level() == SimdLevel::kAvx512) attend = detail::avx512_int8_attend;
  const auto amx = int8_amx_by_group(p, G, d);
  run_split(
      spans, kvh, G, P, threads,
      [&](std::size_t s, int g, int h0, int hc, std::size_t t0, std::size_t t1, float* m, float* l, float* acc) {
        detail::AttnJob j;
        const TqHead& kh = (*seqs[s].keys)[static_cast<std::size_t>(g)];
        const TqHead& vh = (*seqs[s].values)[static_cast<std::size_t>(g)];
        static_cast<detail::AttnPiece&>(j) = {kh.codes, vh.codes, seqs[s].n, t0, t1, hc, scale, softcap, m, l, acc};
        j.ks = &kh.codec->state();
        j.vs = &vh.codec->state();
        j.qp = qp.data() + (s * num_heads + static_cast<std::size_t>(g * G + h0)) * d;
        j.int8_amx = amx[static_cast<std::size_t>(hc)];
        attend(j);
      },
      [&](std::size_t s, int h, const float* acc, double inv_l) {
        const TqHead& vh = (*seqs[s].values)[static_cast<std::size_t>(h / G)];
        detail::finalize_output(vh.codec->state(), acc, lanes, inv_l, seqs[s].out + static_cast<std::size_t>(h) * d);
      });
}

}  // namespace

void attention_tq_mse(const std::vector<TqHead>& keys, const std::vector<TqHead>& values, std::size_t num_tokens,
                      const float* q, int num_heads, const AttentionParams& p, float* out, std::size_t context,
                      int threads) {
  const char* where = "cpu::attention_tq_mse";
  check_params(where, num_heads, static_cast<int>(keys.size()), p);
  check_arg(keys[0].codec != nullptr, where, "keys[0].codec", "null", "must not be null");
  const SeqView sv{&keys, &values, num_tokens, context, q, out};
  check_seq(where, sv, num_heads, keys[0].codec->head_dim(), "");
  run_tq({sv}, num_heads, p, threads);
}

void attention_tq_mse_batched(const std::vector<TqSequence>& seqs, int num_heads, const AttentionParams& p,
                              int threads) {
  const char* where = "cpu::attention_tq_mse_batched";
  if (seqs.empty()) return;
  const int kvh = static_cast<int>(seqs[0].keys.size());
  check_params(where, num_heads, kvh, p);
  check_arg(seqs[0].keys[0].codec != nullptr, where, "seqs[0].keys[0].codec", "null", "must not be null");
  const int d = seqs[0].keys[0].codec->head_dim();
  std::vector<SeqView> views;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const TqSequence& q = seqs[s];
    check_arg(static_cast<int>(q.keys.size()) == kvh, where, "seqs[i].keys.size()", q.keys.size(),
              "must be the same for every sequence");
    views.push_back({&q.keys, &q.values, q.num_tokens, q.context, q.q, q.out});
    check_seq(where, views.back(), num_heads, d, turbokv::detail::concat(" (sequence ", s, ")"));
  }
  run_tq(views, num_heads, p, threads);
}

void attention_dense(const void* k, const void* v, DType dtype, std::size_t num_tokens, int num_kv_heads,
                     int head_dim, const float* q, int num_heads, const AttentionParams& p, float* out,
                     int threads) {
  const char* where = "cpu::attention_dense";
  check_params(where, num_heads, num_kv_heads, p);
  check_arg(num_tokens > 0, where, "num_tokens", num_tokens, "must be positive");
  check_arg(dtype == DType::kF32 || dtype == DType::kF16, where, "dtype", static_cast<int>(dtype),
            "must be kF32 or kF16");
  check_arg(head_dim >= 16 && head_dim <= 512 && head_dim % 16 == 0, where, "head_dim", head_dim,
            "must be a multiple of 16 in 16..512");
  check_arg(k != nullptr && v != nullptr && q != nullptr && out != nullptr, where, "k/v/q/out", "null",
            "must not be null");
  const std::size_t d = static_cast<std::size_t>(head_dim);
  detail::check_finite_f32(where, "q", q, static_cast<std::size_t>(num_heads) * d);
  const int G = num_heads / num_kv_heads;
  const auto& kern = kernels();
  const float scale = static_cast<float>(p.softmax_scale), softcap = static_cast<float>(p.softcap);
  // One item serves every KV head of a token chunk, so the [tokens, kv_heads, dim]
  // rows are read in memory order.
  run_split(
      {{window_begin(num_tokens, p), num_tokens}}, 1, num_heads, head_dim, threads,
      [&](std::size_t, int, int, int, std::size_t t0, std::size_t t1, float* m, float* l, float* acc) {
        detail::DenseJob j;
        j.kv_heads = num_kv_heads;
        j.k = k;
        j.v = v;
        j.f16 = dtype == DType::kF16;
        j.stride = static_cast<std::size_t>(num_kv_heads) * d;
        j.dim = head_dim;
        j.t0 = t0;
        j.t1 = t1;
        j.q = q;
        j.G = G;
        j.scale = scale;
        j.softcap = softcap;
        j.m = m;
        j.l = l;
        j.acc = acc;
        kern.attend_dense(j);
      },
      [&](std::size_t, int h, const float* acc, double inv_l) {
        for (std::size_t i = 0; i < d; ++i) out[static_cast<std::size_t>(h) * d + i] = static_cast<float>(acc[i] * inv_l);
      },
      num_heads);
}

std::uint64_t stream_bytes(const std::uint8_t* data, std::size_t bytes, int threads) {
  if (bytes == 0) return 0;
  check_arg(data != nullptr, "cpu::stream_bytes", "data", "null", "must not be null");
  const auto& k = kernels();
  const int nt = detail::resolve_threads(threads);
  const std::size_t pieces = static_cast<std::size_t>(nt) * 4;
  const std::size_t step = ((bytes + pieces - 1) / pieces + 4095) / 4096 * 4096;
  const std::size_t n = (bytes + step - 1) / step;
  std::vector<std::uint64_t> r(n);
  detail::parallel_for(n, threads, [&](std::size_t i) {
    const std::size_t a = i * step;
    r[i] = k.stream(data + a, std::min(step, bytes - a));
  });
  std::uint64_t x = 0;
  for (auto v : r) x ^= v;
  return x;
}

std::uint64_t fma_peak(std::uint64_t macs, int threads) {
  if (macs == 0) return 0;
  const auto& k = kernels();
  const std::uint64_t nt = static_cast<std::uint64_t>(detail::resolve_threads(threads));
  const std::uint64_t step = static_cast<std::uint64_t>(detail::kFmaChains) * static_cast<std::uint64_t>(k.lanes);
  const std::uint64_t iters = ((macs + step - 1) / step + nt - 1) / nt;
  check_arg(iters <= (1ull << 24), "cpu::fma_peak", "macs", macs,
            "too large: at most 2^24 steps of 12 x lanes multiply-adds per thread");
  std::vector<double> r(nt);
  detail::parallel_for(nt, threads, [&](std::size_t i) { r[i] = k.fma_chains(iters, 1.0f, 1.0f); });
  double sum = 0;
  for (double v : r) sum += v;
  return static_cast<std::uint64_t>(sum);
}

namespace {

/// The path run_codec takes: every key and value head of every sequence must qualify for a fused one.
CodecAttentionPath choose_path(const std::vector<CodecSeqView>& seqs) {
  bool mse = true, prod = kernels().attend_prod != nullptr, split = kernels().attend_split != nullptr;
  bool rvq = kernels().attend_rvq != nullptr, kivi = kernels().attend_kivi != nullptr;
  bool flt = kernels().attend_float != nullptr;
  int kivi8v = -1;  // KIVI values: 8-bit (1) or 1..4-bit (0) so far
  for (const CodecSeqView& sq : seqs) {
    if (sq.keys->size() != sq.values->size()) return CodecAttentionPath::kGeneric;
    for (std::size_t g = 0; g < sq.keys->size(); ++g) {
      const CpuCodec* k = (*sq.keys)[g].codec;
      const CpuCodec* vc = (*sq.values)[g].codec;
      const TqMse* v = detail::as_tq_mse(vc);
      const bool ki = detail::as_tq_mse(k) != nullptr;
      mse = mse && v && ki;
      prod = prod && v && detail::as_tq_prod(k);
      split = split && (ki || detail::as_tq_split(k)) && (v || detail::as_tq_split(vc));
      rvq = rvq && detail::as_rvq(k) && detail::as_rvq(vc);
      const detail::KiviHeadState* kk = detail::as_kivi(k);
      const detail::KiviHeadState* kv = detail::as_kivi(vc);
      kivi = kivi && kk && kk->key && kv && !kv->key && (kivi8v < 0 || kivi8v == (kv->bits == 8));
      if (kv) kivi8v = kv->bits == 8;  // one accumulator layout per call: every value head 8-bit or none
      flt = flt && detail::as_float_codec(k) && detail::as_float_codec(vc);
    }
  }
  return mse     ? CodecAttentionPath::kTqMseFused
         : prod  ? CodecAttentionPath::kTqProdFused
         : split ? CodecAttentionPath::kTqMseSplitFused
         : rvq   ? CodecAttentionPath::kRvqFused
         : kivi  ? CodecAttentionPath::kKiviFused
         : flt   ? CodecAttentionPath::kFp8Fp16Fused
                 : CodecAttentionPath::kGeneric;
}

/// Every query head's prepared state by its KV head's key codec: states [seq][head][S] (S floats a
/// head, >= every key codec's query_state_size()), and one token span per sequence (window, context).
void prepare_queries(const std::vector<CodecSeqView>& seqs, int num_heads, int d, std::size_t S,
                     const AttentionParams& p, std::vector<float>& states, std::vector<Span>& spans) {
  const int G = num_heads / static_cast<int>(seqs[0].keys->size());
  states.assign(seqs.size() * static_cast<std::size_t>(num_heads) * S, 0.0f);
  spans.clear();
  for (std::size_t si = 0; si < seqs.size(); ++si) {
    for (int h = 0; h < num_heads; ++h)
      (*seqs[si].keys)[static_cast<std::size_t>(h / G)].codec->prepare_query(
          seqs[si].q + static_cast<std::size_t>(h) * d, states.data() + (si * num_heads + h) * S);
    const std::size_t ctx = seqs[si].ctx ? seqs[si].ctx : seqs[si].n;
    spans.push_back({window_begin(ctx, p), ctx});
  }
}

/// One fused codec kernel over every (sequence, KV head, head chunk, token chunk), split like run_tq:
/// prepared queries [seq][head][S] (prepare_queries), jobs of type Job with the common fields filled
/// (codes, n, token range, G, scale, soft-cap, m, l, acc), set(job, key head, value head, the chunk's
/// first prepared query) for the kernel's own fields, attend(job), and finish(value head, acc[P], 1 / l,
/// out) per output head.
template <class Job, class Set, class Finish>
void run_fused(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads,
               std::size_t S, int P, void (*attend)(const Job&), Set set, Finish finish) {
  const int kvh = static_cast<int>(seqs[0].keys->size());
  const int G = num_heads / kvh;
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  std::vector<float> states;
  std::vector<Span> spans;
  prepare_queries(seqs, num_heads, d, S, p, states, spans);
  const float scale = static_cast<float>(p.softmax_scale), softcap = static_cast<float>(p.softcap);
  run_split(
      spans, kvh, G, P, threads,
      [&](std::size_t si, int g, int h0, int hc, std::size_t t0, std::size_t t1, float* m, float* l, float* acc) {
        const CodecHead& kh = (*seqs[si].keys)[static_cast<std::size_t>(g)];
        const CodecHead& vh = (*seqs[si].values)[static_cast<std::size_t>(g)];
        Job j;
        static_cast<detail::AttnPiece&>(j) = {kh.codes, vh.codes, seqs[si].n, t0, t1, hc, scale, softcap, m, l, acc};
        set(j, kh, vh, states.data() + (si * num_heads + static_cast<std::size_t>(g * G + h0)) * S);
        attend(j);
      },
      [&](std::size_t si, int h, const float* acc, double inv_l) {
        finish((*seqs[si].values)[static_cast<std::size_t>(h / G)], acc, inv_l,
               seqs[si].out + static_cast<std::size_t>(h) * d);
      });
}

/// TurboQuant-Prod keys + TurboQuant-MSE values (choose_path): the fused kernel (Kernels::attend_prod).
/// Prepared queries [Pi q (d) | S Pi q (m)], each by its KV head's codec.
void run_prod(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  const int lanes = kernels().lanes;
  std::size_t S = 0;
  for (const CodecSeqView& sq : seqs)
    for (const CodecHead& kh : *sq.keys) S = std::max(S, kh.codec->query_state_size());
  run_fused<detail::ProdAttnJob>(
      seqs, num_heads, p, threads, S, detail::layout_floats(d / 8, lanes), kernels().attend_prod,
      [&](detail::ProdAttnJob& j, const CodecHead& kh, const CodecHead& vh, const float* qs) {
        j.ks = detail::as_tq_prod(kh.codec);
        j.vs = &detail::as_tq_mse(vh.codec)->state();
        j.qs = qs;
        j.qstride = static_cast<int>(S);
      },
      [&](const CodecHead& vh, const float* acc, double inv_l, float* out) {
        detail::finalize_output(detail::as_tq_mse(vh.codec)->state(), acc, lanes, inv_l, out);
      });
}

/// TurboQuant-MSE keys and values, some of them fractional (choose_path): the fused split kernel
/// (Kernels::attend_split, or detail::avx512_bf16_attend_split / avx512_int8_attend_split for
/// AttentionPrecision::kBf16 / kInt8 where the CPU
/// can; heads with integer widths on both sides run the integer-width sources there with this call's
/// accumulator stride). Prepared queries [Pi_o q_o | Pi_r q_r] for split keys, Pi q otherwise.
void run_split_fused(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  const auto& k = kernels();
  const int lanes = k.lanes;
  // Value accumulator floats: the largest of every value head's layout.
  int P = 0;
  for (const CodecSeqView& sq : seqs)
    for (const CodecHead& vh : *sq.values) {
      const detail::SplitHeadState* x = detail::as_tq_split(vh.codec);
      P = std::max(P, x ? x->split_acc_floats(lanes) : detail::layout_floats(d / 8, lanes));
    }
  void (*attend)(const detail::SplitAttnJob&) = k.attend_split;
  if (p.precision == AttentionPrecision::kBf16 && simd_level() == SimdLevel::kAvx512 && cpu_has_avx512_bf16())
    attend = detail::avx512_bf16_attend_split;
  if (p.precision == AttentionPrecision::kInt8 && simd_level() == SimdLevel::kAvx512)
    attend = detail::avx512_int8_attend_split;
  const auto amx = int8_amx_by_group(p, num_heads / static_cast<int>(seqs[0].keys->size()), d);
  run_fused<detail::SplitAttnJob>(
      seqs, num_heads, p, threads, static_cast<std::size_t>(d), P, attend,
      [&](detail::SplitAttnJob& j, const CodecHead& kh, const CodecHead& vh, const float* qs) {
        j.kx = detail::as_tq_split(kh.codec);
        j.ks = j.kx ? nullptr : &detail::as_tq_mse(kh.codec)->state();
        j.vx = detail::as_tq_split(vh.codec);
        j.vs = j.vx ? nullptr : &detail::as_tq_mse(vh.codec)->state();
        j.qs = qs;
        j.qstride = d;
        j.P = P;
        j.int8_amx = amx[static_cast<std::size_t>(j.G)];
      },
      [&](const CodecHead& vh, const float* acc, double inv_l, float* out) {
        if (const detail::SplitHeadState* x = detail::as_tq_split(vh.codec))
          detail::finalize_split_output(*x, acc, lanes, inv_l, out);
        else
          detail::finalize_output(detail::as_tq_mse(vh.codec)->state(), acc, lanes, inv_l, out);
      });
}

/// Whether fits(*as(keys[g].codec), *as(values[g].codec)) holds for every KV head g of every sequence (as: a
/// method's fused-kernel view, non-null for every head on its fused path).
template <class As, class Fits>
bool every_head_pair(const std::vector<CodecSeqView>& seqs, As as, Fits fits) {
  for (const CodecSeqView& sq : seqs)
    for (std::size_t g = 0; g < sq.keys->size(); ++g)
      if (!fits(*as((*sq.keys)[g].codec), *as((*sq.values)[g].codec))) return false;
  return true;
}

/// RVQ keys and values (choose_path): the fused kernel (Kernels::attend_rvq, or avx512_int8_attend_rvq for
/// AttentionPrecision::kInt8 at the AVX-512 level, 1..3 bits); prepared queries Pi q.
void run_rvq(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  const int lanes = kernels().lanes;
  // AttentionPrecision::kInt8 at the AVX-512 level where every head pair fits the int8 kernel (1..3 bits);
  // else the fp32 kernels.
  void (*attend)(const detail::RvqAttnJob&) = kernels().attend_rvq;
  if (p.precision == AttentionPrecision::kInt8 && simd_level() == SimdLevel::kAvx512 &&
      every_head_pair(seqs, detail::as_rvq, detail::rvq_int8_fits))
    attend = detail::avx512_int8_attend_rvq;
  run_fused<detail::RvqAttnJob>(
      seqs, num_heads, p, threads, static_cast<std::size_t>(d), detail::layout_floats(d / 8, lanes), attend,
      [&](detail::RvqAttnJob& j, const CodecHead& kh, const CodecHead& vh, const float* qs) {
        j.ks = detail::as_rvq(kh.codec);
        j.vs = detail::as_rvq(vh.codec);
        j.qp = qs;
      },
      [&](const CodecHead& vh, const float* acc, double inv_l, float* out) {
        detail::finalize_output(detail::as_rvq(vh.codec)->stage[0], acc, lanes, inv_l, out);
      });
}

/// KIVI keys and values at 1..4 bits (choose_path): the fused kernel (Kernels::attend_kivi); prepared
/// queries q itself; the value layout is unrotated.
void run_kivi(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  const int lanes = kernels().lanes;
  const detail::KiviHeadState* v0 = detail::as_kivi((*seqs[0].values)[0].codec);  // choose_path: one layout
  // AttentionPrecision::kInt8 at the AVX-512 level where every head pair fits the int8 kernel (1..4 bits,
  // value groups a multiple of 32 channels); else the fp32 kernels.
  void (*attend)(const detail::KiviAttnJob&) = kernels().attend_kivi;
  if (p.precision == AttentionPrecision::kInt8 && simd_level() == SimdLevel::kAvx512 &&
      every_head_pair(seqs, detail::as_kivi, detail::kivi_int8_fits))
    attend = detail::avx512_int8_attend_kivi;
  run_fused<detail::KiviAttnJob>(
      seqs, num_heads, p, threads, static_cast<std::size_t>(d), detail::kivi_value_floats(*v0, lanes), attend,
      [&](detail::KiviAttnJob& j, const CodecHead& kh, const CodecHead& vh, const float* qs) {
        j.ks = detail::as_kivi(kh.codec);
        j.vs = detail::as_kivi(vh.codec);
        j.q = qs;
      },
      [&](const CodecHead& vh, const float* acc, double inv_l, float* out) {
        const detail::KiviHeadState* v = detail::as_kivi(vh.codec);
        if (v->bits == 8) {  // natural order
          for (int i = 0; i < d; ++i) out[i] = static_cast<float>(acc[i] * inv_l);
          return;
        }
        const std::vector<int>& lay = v->codes.layout_for(lanes);
        for (std::size_t f = 0; f < lay.size(); ++f)
          if (lay[f] >= 0) out[lay[f]] = static_cast<float>(acc[f] * inv_l);
      });
}

/// fp8 / fp16 codec keys and values (choose_path): the fused kernel (Kernels::attend_float); prepared
/// queries q itself; natural-order accumulators.
void run_float(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  run_fused<detail::FloatAttnJob>(
      seqs, num_heads, p, threads, static_cast<std::size_t>(d), d, kernels().attend_float,
      [&](detail::FloatAttnJob& j, const CodecHead& kh, const CodecHead& vh, const float* qs) {
        j.kbits = detail::as_float_codec(kh.codec);
        j.vbits = detail::as_float_codec(vh.codec);
        j.dim = d;
        j.q = qs;
      },
      [&](const CodecHead&, const float* acc, double inv_l, float* out) {
        for (int i = 0; i < d; ++i) out[i] = static_cast<float>(acc[i] * inv_l);
      });
}

/// Fused decode attention over validated sequences of any codecs (one pool job).
void run_codec(const std::vector<CodecSeqView>& seqs, int num_heads, const AttentionParams& p, int threads) {
  const int kvh = static_cast<int>(seqs[0].keys->size());
  const int d = (*seqs[0].keys)[0].codec->head_dim();
  const CodecAttentionPath path = choose_path(seqs);
  if (path == CodecAttentionPath::kTqProdFused) {
    run_prod(seqs, num_heads, p, threads);
    return;
  }
  if (path == CodecAttentionPath::kTqMseSplitFused) {
    run_split_fused(seqs, num_heads, p, threads);
    return;
  }
  if (path == CodecAttentionPath::kRvqFused) {
    run_rvq(seqs, num_heads, p, threads);
    return;
  }
  if (path == CodecAttentionPath::kKiviFused) {
    run_kivi(seqs, num_heads, p, threads);
    return;
  }
  if (path == CodecAttentionPath::kFp8Fp16Fused) {
    run_float(seqs, num_heads, p, threads);
    return;
  }
  // Every head TurboQuant-MSE at integer widths: the fused kernels (GQA group in one pass).
  if (path == CodecAttentionPath::kTqMseFused) {
    std::vector<std::vector<TqHead>> tk(seqs.size()), tv(seqs.size());
    std::vector<SeqView> views;
    bool all = true;
    for (std::size_t si = 0; si < seqs.size() && all; ++si)
      for (int g = 0; g < kvh && all; ++g) {
        const CodecHead& kh = (*seqs[si].keys)[static_cast<std::size_t>(g)];
        const CodecHead& vh = (*seqs[si].values)[static_cast<std::size_t>(g)];
        const TqMse* a = detail::as_tq_mse(kh.codec);
        const TqMse* b = detail::as_tq_mse(vh.codec);
        all = a && b;
        if (all) tk[si].push_back({a, kh.codes}), tv[si].push_back({b, vh.codes});
      }
    if (all) {
      for (std::size_t si = 0; si < seqs.size(); ++si)
        views.push_back({&tk[si], &tv[si], seqs[si].n, seqs[si].ctx, seqs[si].q, seqs[si].out});
      run_tq(views, num_heads, p, threads);
      return;
    }
  }

  // Any codecs: per block of tokens, online softmax per query head. Where both
  // codecs have a codec-domain form, the block is decoded once into it and all
  // heads of the group share it (dots + a small GEMM); otherwise each head's scores
  // come from the key codes and the value codec accumulates per head.
  const int G = num_heads / kvh;
  std::size_t P = 0, S = 0;
  for (const CodecSeqView& sq : seqs)
    for (int g = 0; g < kvh; ++g) {
      P = std::max(P, (*sq.values)[static_cast<std::size_t>(g)].codec->accumulator_size());
      S = std::max(S, (*sq.keys)[static_cast<std::size_t>(g)].codec->query_state_size());
    }
  // Prepared queries [seq][head][S]; one token span per sequence.
  std::vector<float> states;
  std::vector<Span> spans;
  prepare_queries(seqs, num_heads, d, S, p, states, spans);
  const float scale = static_cast<float>(p.softmax_scale), softcap = static_cast<float>(p.softcap);
  constexpr std::size_t kBlock = 64;
  const auto& kern = kernels();
  run_split(
      spans, kvh, G, static_cast<int>(P), threads,
      [&](std::size_t si, int g, int h0, int hc, std::size_t t0, std::size_t t1, float* m, float* l, float* acc) {
        const CodecHead& kh = (*seqs[si].keys)[static_cast<std::size_t>(g)];
        const CodecHead& vh = (*seqs[si].values)[static_cast<std::size_t>(g)];
        const std::size_t num_tokens = seqs[si].n;
        const std::size_t accn = vh.codec->accumulator_size();
        const std::size_t kdom = kh.codec->domain_size(), vdom = vh.codec->domain_size();
        const bool domain = kdom > 0 && vdom > 0 && vdom == accn;
        std::fill(acc, acc + static_cast<std::size_t>(hc) * P, 0.0f);
        std::vector<float> sc(static_cast<std::size_t>(hc) * kBlock), ky, vy;
        if (domain) ky.resize(kBlock * kdom), vy.resize(kBlock * vdom);
        for (int h = 0; h < hc; ++h) m[h] = -INFINITY, l[h] = 0.0f;
        const float* st0 = states.data() + (si * num_heads + static_cast<std::size_t>(g * G + h0)) * S;
        for (std::size_t t = t0; t < t1; t += kBlock) {
          const std::size_t te = std::min(t1, t + kBlock), cnt = te - t;
          if (domain) {
            kh.codec->decode_domain(kh.codes, num_tokens, t, te, ky.data());
            kern.dots(st0, S, hc, ky.data(), static_cast<int>(cnt), static_cast<int>(kdom), sc.data());
          } else {
            for (int h = 0; h < hc; ++h)
              kh.codec->scores(st0 + static_cast<std::size_t>(h) * S, kh.codes, num_tokens, t, te, sc.data() + h * cnt);
          }
          // Online softmax over the block (Kernels::softmax_block; a soft-cap is applied here first, the
          // kernel's scale then 1): sc becomes the block's weights exp(logit - m).
          float bscale = scale;
          if (softcap > 0) {
            for (std::size_t i = 0; i < static_cast<std::size_t>(hc) * cnt; ++i)
              sc[i] = softcap * std::tanh(sc[i] * scale / softcap);
            bscale = 1.0f;
          }
          kern.softmax_block(sc.data(), hc, static_cast<int>(cnt), bscale, m, l, acc, accn, P);
          if (!domain)
            for (int h = 0; h < hc; ++h)
              vh.codec->accumulate(vh.codes, num_tokens, t, te, sc.data() + h * cnt, acc + static_cast<std::size_t>(h) * P);
          if (domain) {
            vh.codec->decode_domain(vh.codes, num_tokens, t, te, vy.data());
            kern.gemm_acc(sc.data(), hc, vy.data(), static_cast<int>(cnt), static_cast<int>(vdom), acc, P);
          }
        }
      },
      [&](std::size_t si, int h, const float* acc, double inv_l) {
        (*seqs[si].values)[static_cast<std::size_t>(h / G)].codec->finalize(
            acc, inv_l, seqs[si].out + static_cast<std::size_t>(h) * d);
      });
}

}  // namespace

CodecAttentionPath attention_codec_path(const std::vector<CodecHead>& keys, const std::vector<CodecHead>& values) {
  return choose_path({CodecSeqView{&keys, &values, 0, 0, nullptr, nullptr}});
}

void attention_codec(const std::vector<CodecHead>& keys, const std::vector<CodecHead>& values,
                     std::size_t num_tokens, const float* q, int num_heads, const AttentionParams& p, float* out,
                     std::size_t context, int threads) {
  const char* where = "cpu::attention_codec";
  const int kvh = static_cast<int>(keys.size());
  check_params(where, num_heads, kvh, p);
  check_arg(!keys.empty() && keys[0].codec != nullptr, where, "keys[0].codec", "null", "must not be null");
  const CodecSeqView sv{&keys, &values, num_tokens, context, q, out};
  check_seq(where, sv, num_heads, keys[0].codec->head_dim(), "");
  run_codec({sv}, num_heads, p, threads);
}

void attention_codec_batched(const std::vector<CodecSequence>& seqs, int num_heads, const AttentionParams& p,
                             int threads) {
  const char* where = "cpu::attention_codec_batched";
  if (seqs.empty()) return;
  const int kvh = static_cast<int>(seqs[0].keys.size());
  check_params(where, num_heads, kvh, p);
  check_arg(!seqs[0].keys.empty() && seqs[0].keys[0].codec != nullptr, where, "seqs[0].keys[0].codec", "null",
            "must not be null");
  const int d = seqs[0].keys[0].codec->head_dim();
  std::vector<CodecSeqView> views;
  for (std::size_t si = 0; si < seqs.size(); ++si) {
    const CodecSequence& sq = seqs[si];
    const std::string tag = turbokv::detail::concat(" (sequence ", si, ")");
    check_arg(static_cast<int>(sq.keys.size()) == kvh, (where + tag).c_str(), "keys.size()", sq.keys.size(),
              "must be the same for every sequence");
    views.push_back({&sq.keys, &sq.values, sq.num_tokens, sq.context, sq.q, sq.out});
    check_seq(where, views.back(), num_heads, d, tag);
  }
  run_codec(views, num_heads, p, threads);
}


}  // namespace turbokv::cpu
