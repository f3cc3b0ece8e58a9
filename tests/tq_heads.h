// Test fixture data shared by the CPU attention tests: num_kv_heads TurboQuant-MSE
// heads of keys and values, encoded once by the reference codecs, with the fast
// codecs (cpu::TqMse) viewing the same bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

namespace turbokv::test {

/// kvh heads of d-dim keys (kbits) and values (vbits), n tokens each, GQA ratio `ratio` query heads per
/// KV head. fill < 0: Gaussian data with an outlier channel (dim 1 x 6); fill = 0x00 / 0xff: every code
/// 0 / max with norms 0.5 .. 2. keys/values: reference views; fkeys/fvalues: fast-codec views.
struct TqMseHeads {
  int d, kvh, ratio, kbits, vbits;
  std::size_t n;
  std::uint64_t seed;
  std::vector<std::unique_ptr<Codec>> rk, rv;
  std::vector<std::unique_ptr<cpu::TqMse>> fk, fv;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<EncodedHead> keys, values;
  std::vector<cpu::TqHead> fkeys, fvalues;

  TqMseHeads(int d_, int kvh_, int ratio_, std::size_t n_, int kbits_, int vbits_, std::uint64_t seed_, int fill = -1)
      : d(d_), kvh(kvh_), ratio(ratio_), kbits(kbits_), vbits(vbits_), n(n_), seed(seed_) {
    for (int g = 0; g < kvh; ++g) {
      CodecConfig cfg;
      cfg.head_dim = d;
      cfg.seed = seed + g;
      cfg.bits = kbits;
      rk.push_back(make_codec(cfg));
      fk.push_back(std::make_unique<cpu::TqMse>(cfg));
      cfg.bits = vbits;
      cfg.role = Role::kValue;
      rv.push_back(make_codec(cfg));
      fv.push_back(std::make_unique<cpu::TqMse>(cfg));
      kb.emplace_back(rk[g]->encoded_bytes(n));
      vb.emplace_back(rv[g]->encoded_bytes(n));
      if (fill < 0) {
        auto k = gaussian(n * d, seed * 31 + g), v = gaussian(n * d, seed * 37 + g);
        for (std::size_t t = 0; t < n; ++t) k[t * d + 1] *= 6;  // an outlier channel
        rk[g]->encode(k.data(), n, kb[g].data());
        rv[g]->encode(v.data(), n, vb[g].data());
      } else {  // every code 0 or every code max; norms 0.5 .. 2
        std::memset(kb[g].data(), fill, n * fk[g]->code_bytes());
        std::memset(vb[g].data(), fill, n * fv[g]->code_bytes());
        for (std::size_t t = 0; t < n; ++t) {
          store_half(kb[g].data() + n * fk[g]->code_bytes() + 2 * t, 0.5f + (t % 7) * 0.25f);
          store_half(vb[g].data() + n * fv[g]->code_bytes() + 2 * t, 2.0f - (t % 5) * 0.25f);
        }
      }
    }
    for (int g = 0; g < kvh; ++g) {
      keys.push_back({rk[g].get(), kb[g].data()});
      values.push_back({rv[g].get(), vb[g].data()});
      fkeys.push_back({fk[g].get(), kb[g].data()});
      fvalues.push_back({fv[g].get(), vb[g].data()});
    }
  }
  int heads() const { return kvh * ratio; }
};

/// Heads of any reference codecs with the fast codecs (cpu::make_cpu_codec) viewing the same bytes:
/// the common part of the fused-path fixtures (test_cpu_{prod,split,rvq,kivi,float}_fused), whose
/// constructors fill rk, rv, kb, vb, keys and values and then call remake().
struct CodecHeads {
  int d, kvh, ratio;
  std::size_t n;
  std::vector<std::unique_ptr<Codec>> rk, rv;
  std::vector<std::unique_ptr<cpu::CpuCodec>> fk, fv;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<EncodedHead> keys, values;
  std::vector<cpu::CodecHead> fkeys, fvalues;

  CodecHeads(int d_, int kvh_, int ratio_, std::size_t n_) : d(d_), kvh(kvh_), ratio(ratio_), n(n_) {}
  /// (Re)makes the fast codecs at the current simd_level().
  void remake() {
    fk.clear(), fv.clear(), fkeys.clear(), fvalues.clear();
    for (int g = 0; g < kvh; ++g) {
      fk.push_back(cpu::make_cpu_codec(*rk[g]));
      fv.push_back(cpu::make_cpu_codec(*rv[g]));
      fkeys.push_back({fk[g].get(), kb[g].data()});
      fvalues.push_back({fv[g].get(), vb[g].data()});
    }
  }
  int heads() const { return kvh * ratio; }
};

/// The fp64 reference attention (attention_compressed) of h's reference codecs: [heads][d].
inline std::vector<double> reference(const CodecHeads& h, const float* q, const AttentionParams& p,
                                     std::size_t ctx = 0) {
  std::vector<double> want(static_cast<std::size_t>(h.heads()) * h.d);
  attention_compressed(h.keys, h.values, h.n, q, h.heads(), p, want.data(), nullptr, ctx);
  return want;
}

/// Largest per-head relative error of got against want ([heads][d]).
inline double max_err(const std::vector<float>& got, const std::vector<double>& want, int heads, int d) {
  double e = 0;
  for (int h = 0; h < heads; ++h) e = std::max(e, rel_err(got.data() + h * d, want.data() + h * d, d));
  return e;
}

/// The fused-path check of the test_cpu_*_fused files: at every SIMD level this CPU has, h's fast codecs
/// are remade, attention_codec_path must be path() (evaluated at that level), and attention_codec with
/// 1 and 2 threads must be within tol per head (relative L2) of want.
template <class Path>
void check_fused_all_levels(CodecHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                      Path path, double tol, std::size_t ctx = 0) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    ASSERT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), path()) << simd_level_name(lvl);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(simd_level_name(lvl)) + " threads " + std::to_string(threads));
      std::vector<float> got(want.size(), -7.0f);
      cpu::attention_codec(h.fkeys, h.fvalues, h.n, q, h.heads(), p, got.data(), ctx, threads);
      for (int hh = 0; hh < h.heads(); ++hh)
        ASSERT_LE(rel_err(got.data() + hh * h.d, want.data() + hh * h.d, h.d), tol) << "head " << hh;
    }
  }
}

/// attention_codec_batched on two sequences (a with its whole length, b with context ctx_b; both
/// 128-dim with 8 query heads) at every SIMD level, each within tol of the reference.
inline void check_batched(CodecHeads& a, CodecHeads& b, const AttentionParams& p, std::size_t ctx_b, double tol) {
  const auto qa = gaussian(8 * 128, 15), qb = gaussian(8 * 128, 16);
  const auto wa = reference(a, qa.data(), p), wb = reference(b, qb.data(), p, ctx_b);
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    a.remake(), b.remake();
    std::vector<float> ga(wa.size()), gb(wb.size());
    std::vector<cpu::CodecSequence> seqs(2);
    seqs[0] = {a.fkeys, a.fvalues, a.n, 0, qa.data(), ga.data()};
    seqs[1] = {b.fkeys, b.fvalues, b.n, ctx_b, qb.data(), gb.data()};
    cpu::attention_codec_batched(seqs, 8, p, 2);
    EXPECT_LE(max_err(ga, wa, 8, 128), tol) << simd_level_name(lvl);
    EXPECT_LE(max_err(gb, wb, 8, 128), tol) << simd_level_name(lvl);
  }
}

/// attention_codec on h's fast codecs at the current SIMD level with precision prec: [heads][d].
inline std::vector<float> codec_attention(CodecHeads& h, const float* q, AttentionParams p, AttentionPrecision prec,
                                          int threads = 2, std::size_t ctx = 0) {
  p.precision = prec;
  std::vector<float> got(static_cast<std::size_t>(h.heads()) * h.d, -7.0f);
  cpu::attention_codec(h.fkeys, h.fvalues, h.n, q, h.heads(), p, got.data(), ctx, threads);
  return got;
}

/// The kInt8 check of the test_cpu_*_fused files: at the AVX-512 level (fast codecs remade there),
/// attention_codec with AttentionPrecision::kInt8 and 1 and 2 threads, each head within tol (relative L2)
/// of the fp64 reference; adds every head's error to sum / count (a sweep's mean) and returns the worst.
inline double check_int8(CodecHeads& h, const float* q, const AttentionParams& p, double tol, double& sum, int& count,
                         std::size_t ctx = 0) {
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  h.remake();
  const auto want = reference(h, q, p, ctx);
  double worst = 0;
  for (int threads : {1, 2}) {
    const auto got = codec_attention(h, q, p, AttentionPrecision::kInt8, threads, ctx);
    for (int hh = 0; hh < h.heads(); ++hh) {
      const double e = rel_err(got.data() + hh * h.d, want.data() + hh * h.d, h.d);
      EXPECT_LT(e, tol) << "head " << hh << " threads " << threads;
      worst = std::max(worst, e);
      sum += e;
      ++count;
    }
  }
  return worst;
}

/// The kInt8 batched check: attention_codec_batched (kInt8, 2 threads) at the AVX-512 level on two sequences
/// (a whole, b with context ctx_b; both 128-dim with 8 query heads) within tol of the reference, and a's
/// output bit-identical to a's own attention_codec call.
inline void check_batched_int8(CodecHeads& a, CodecHeads& b, AttentionParams p, std::size_t ctx_b, double tol) {
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  a.remake(), b.remake();
  p.precision = AttentionPrecision::kInt8;
  const auto qa = gaussian(8 * 128, 15), qb = gaussian(8 * 128, 16);
  const auto wa = reference(a, qa.data(), p), wb = reference(b, qb.data(), p, ctx_b);
  std::vector<float> ga(wa.size()), gb(wb.size());
  std::vector<cpu::CodecSequence> seqs(2);
  seqs[0] = {a.fkeys, a.fvalues, a.n, 0, qa.data(), ga.data()};
  seqs[1] = {b.fkeys, b.fvalues, b.n, ctx_b, qb.data(), gb.data()};
  cpu::attention_codec_batched(seqs, 8, p, 2);
  EXPECT_LT(max_err(ga, wa, 8, 128), tol);
  EXPECT_LT(max_err(gb, wb, 8, 128), tol);
  const auto alone = codec_attention(a, qa.data(), p, AttentionPrecision::kInt8);
  EXPECT_EQ(0, std::memcmp(ga.data(), alone.data(), ga.size() * sizeof(float)));
}

/// At every SIMD level this CPU has: kInt8 on h returns exactly kFp32's output unless `fits` and the level is
/// AVX-512 (the int8 kernel ran: a different output), and stays within tol of kFp32's either way.
inline void expect_int8_runs_iff(CodecHeads& h, const float* q, const AttentionParams& p, bool fits, double tol) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    const auto a = codec_attention(h, q, p, AttentionPrecision::kFp32);
    const auto b = codec_attention(h, q, p, AttentionPrecision::kInt8);
    const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    EXPECT_EQ(same, !(fits && lvl == SimdLevel::kAvx512)) << simd_level_name(lvl);
    std::vector<double> ad(a.begin(), a.end());
    EXPECT_LT(max_err(b, ad, h.heads(), h.d), tol) << simd_level_name(lvl);
  }
}

/// The kInt8 tolerances are not vacuous (at the AVX-512 level, on h and q with softmax scale 1/sqrt(d)): a 10%
/// wrong softmax scale in the same kernel exceeds tol for some head; the right one stays below it; an output
/// 2 mean_tol off everywhere exceeds mean_tol on average over the heads.
inline void expect_int8_tolerance_can_fail(CodecHeads& h, const float* q, double tol, double mean_tol) {
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  h.remake();
  AttentionParams p{1.0 / std::sqrt(static_cast<double>(h.d)), 0, 0};
  const auto want = reference(h, q, p);
  AttentionParams wrong = p;
  wrong.softmax_scale *= 1.1;
  EXPECT_GT(max_err(codec_attention(h, q, wrong, AttentionPrecision::kInt8), want, h.heads(), h.d), tol);
  auto got = codec_attention(h, q, p, AttentionPrecision::kInt8);
  EXPECT_LT(max_err(got, want, h.heads(), h.d), tol);
  double sum = 0;
  for (auto& x : got) x *= static_cast<float>(1 + 2 * mean_tol);
  for (int hh = 0; hh < h.heads(); ++hh) sum += rel_err(got.data() + hh * h.d, want.data() + hh * h.d, h.d);
  EXPECT_GT(sum / h.heads(), mean_tol);
}

/// The negative control of the test_cpu_*_fused files: at every SIMD level this CPU has, attention_codec
/// (2 threads) on h's own bytes must be within tol of want, and on the perturbed key bytes kb2 (with h's
/// values) and the perturbed value bytes vb2 (with h's keys) at least 10 tol away from it.
inline void check_perturbed_bytes(CodecHeads& h, const float* q, const AttentionParams& p,
                                  const std::vector<double>& want, std::vector<std::vector<std::uint8_t>>& kb2,
                                  std::vector<std::vector<std::uint8_t>>& vb2, double tol) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    std::vector<cpu::CodecHead> pk, pv;
    for (int g = 0; g < h.kvh; ++g) {
      pk.push_back({h.fk[g].get(), kb2[g].data()});
      pv.push_back({h.fv[g].get(), vb2[g].data()});
    }
    std::vector<float> ok(want.size()), gk(want.size()), gv(want.size());
    cpu::attention_codec(h.fkeys, h.fvalues, h.n, q, h.heads(), p, ok.data(), 0, 2);
    cpu::attention_codec(pk, h.fvalues, h.n, q, h.heads(), p, gk.data(), 0, 2);
    cpu::attention_codec(h.fkeys, pv, h.n, q, h.heads(), p, gv.data(), 0, 2);
    EXPECT_LE(max_err(ok, want, h.heads(), h.d), tol) << simd_level_name(lvl);
    EXPECT_GT(max_err(gk, want, h.heads(), h.d), 10 * tol) << simd_level_name(lvl);
    EXPECT_GT(max_err(gv, want, h.heads(), h.d), 10 * tol) << simd_level_name(lvl);
  }
}

}  // namespace turbokv::test
