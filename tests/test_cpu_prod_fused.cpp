// The fused TurboQuant-Prod-keys + TurboQuant-MSE-values attention kernel of
// cpu::attention_codec (CodecAttentionPath::kTqProdFused, kernels_simd.h ProdSrc)
// against the fp64 reference attention_compressed, within 1e-5 relative per head,
// at every SIMD level this CPU has (the scalar level takes the generic path through
// the reference wrappers and must agree too), 1 and 2 threads: key bits 1..4 (MSE
// part 0..3) x value bits 1..4, head_dim 64/80/96/128/256, GQA 1/4/5/8/16, lengths
// 1..4097, window and soft-cap, all-0x00 / all-0xff code bytes, other sketch rows m,
// an unaligned query, the batched call, the dispatch decision, and a negative control
// (gamma perturbed in the fast path's bytes must break the tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"
#include "tq_heads.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

using test::max_err;
using test::reference;

constexpr double kTol = 1e-5;

/// kvh heads: TurboQuant-Prod keys (kbits, sketch rows m; 0 = head_dim) and TurboQuant-MSE values
/// (vbits), n tokens, encoded by the reference codecs. fill < 0: Gaussian data with an outlier
/// channel; fill = 0x00 / 0xff: every code byte that value, norms 0.5 .. 2, gamma 0.1 .. 0.7.
/// The fast codecs (make_cpu_codec) are made at the current simd_level(); remake() redoes that.
struct ProdHeads : test::CodecHeads {
  ProdHeads(int d_, int kvh_, int ratio_, std::size_t n_, int kbits, int vbits, std::uint64_t seed, int fill = -1,
            int m = 0)
      : CodecHeads(d_, kvh_, ratio_, n_) {
    for (int g = 0; g < kvh; ++g) {
      CodecConfig kc;
      kc.method = Method::kTurboProd;
      kc.bits = kbits;
      kc.head_dim = d;
      kc.seed = seed + g;
      kc.qjl_rows = m;
      CodecConfig vc;
      vc.method = Method::kTurboMse;
      vc.bits = vbits;
      vc.head_dim = d;
      vc.role = Role::kValue;
      vc.seed = seed + 100 + g;
      rk.push_back(make_codec(kc));
      rv.push_back(make_codec(vc));
      kb.emplace_back(rk[g]->encoded_bytes(n));
      vb.emplace_back(rv[g]->encoded_bytes(n));
      if (fill < 0) {
        auto k = test::gaussian(n * d, seed * 31 + g), v = test::gaussian(n * d, seed * 37 + g);
        for (std::size_t t = 0; t < n; ++t) k[t * d + 1] = k[t * d + 1] * 6 + 1;  // an outlier channel
        rk[g]->encode(k.data(), n, kb[g].data());
        rv[g]->encode(v.data(), n, vb[g].data());
      } else {
        const std::size_t kcb = (kb[g].size() - 4 * n) / n, vcb = (vb[g].size() - 2 * n) / n;
        std::memset(kb[g].data(), fill, n * kcb);
        std::memset(vb[g].data(), fill, n * vcb);
        for (std::size_t t = 0; t < n; ++t) {
          store_half(kb[g].data() + n * kcb + 4 * t, 0.5f + (t % 7) * 0.25f);
          store_half(kb[g].data() + n * kcb + 4 * t + 2, 0.1f + (t % 4) * 0.2f);
          store_half(vb[g].data() + n * vcb + 2 * t, 2.0f - (t % 5) * 0.25f);
        }
      }
      keys.push_back({rk[g].get(), kb[g].data()});
      values.push_back({rv[g].get(), vb[g].data()});
    }
    remake();
  }
};

cpu::CodecAttentionPath expected_path() {
  return simd_level() == SimdLevel::kScalar ? cpu::CodecAttentionPath::kGeneric
                                            : cpu::CodecAttentionPath::kTqProdFused;
}

/// test::check_fused_all_levels with this file's expected path and tolerance.
void check_all_levels(ProdHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                      std::size_t ctx = 0) {
  test::check_fused_all_levels(h, q, p, want, [&] { return expected_path(); }, kTol, ctx);
}

AttentionParams plain(int d) { return AttentionParams{1.0 / std::sqrt(d), 0, 0}; }
const AttentionParams kWindowCap{0.3, 37, 20.0};

}  // namespace

TEST(CpuProdFused, EveryKeyAndValueWidth) {
  for (int kbits = 1; kbits <= 4; ++kbits)
    for (int vbits = 1; vbits <= 4; ++vbits) {
      SCOPED_TRACE("kbits " + std::to_string(kbits) + " vbits " + std::to_string(vbits));
      ProdHeads h(128, 2, 4, 1000, kbits, vbits, 10 * kbits + vbits);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 5 + kbits);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuProdFused, ShapesLengthsAndGqa) {
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits;
  };
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 1, 4},     {64, 2, 4, 2, 2, 3},      {80, 1, 5, 31, 3, 2},
                                           {80, 2, 8, 65, 4, 1},    {96, 1, 16, 64, 2, 2},    {96, 3, 5, 1000, 3, 4},
                                           {128, 1, 8, 4097, 4, 4}, {128, 2, 16, 65, 1, 1},   {256, 1, 4, 1000, 2, 3},
                                           {256, 2, 1, 31, 4, 2},   {128, 1, 5, 4097, 1, 3},  {64, 1, 16, 1000, 3, 1}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + std::to_string(s.kbits) + " vbits " +
                 std::to_string(s.vbits));
    ProdHeads h(s.d, s.kvh, s.ratio, s.n, s.kbits, s.vbits, 7 + s.d + s.n);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    // A context shorter than the block.
    if (s.n > 2) check_all_levels(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), s.n - 2), s.n - 2);
  }
}

TEST(CpuProdFused, AllZeroAndAllOnesCodeBytes) {
  for (int fill : {0x00, 0xff})
    for (int kbits : {1, 2, 3, 4}) {
      SCOPED_TRACE("fill " + std::to_string(fill) + " kbits " + std::to_string(kbits));
      ProdHeads h(96, 2, 5, 1000, kbits, 5 - kbits, 3, fill);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuProdFused, OtherSketchRows) {
  // m = 64, 256 (fused) and 1024 (beyond the fused kernel's 512 rows: generic path, same result).
  for (int m : {64, 256, 1024}) {
    SCOPED_TRACE("m " + std::to_string(m));
    ProdHeads h(128, 2, 4, 1000, 3, 2, 21, -1, m);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 13);
    const auto want = reference(h, q.data(), kWindowCap);
    for (SimdLevel lvl : available_simd_levels()) {
      ScopedSimdLevel guard(lvl);
      h.remake();
      EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues),
                m > 512 ? cpu::CodecAttentionPath::kGeneric : expected_path());
      std::vector<float> got(want.size());
      cpu::attention_codec(h.fkeys, h.fvalues, h.n, q.data(), h.heads(), kWindowCap, got.data(), 0, 2);
      EXPECT_LE(max_err(got, want, h.heads(), h.d), kTol) << simd_level_name(lvl);
    }
  }
}

TEST(CpuProdFused, UnalignedQuery) {
  ProdHeads h(128, 2, 4, 1000, 4, 3, 31);
  const std::size_t nq = static_cast<std::size_t>(h.heads()) * h.d;
  const auto q = test::gaussian(nq, 14);
  std::vector<float> buf(nq + 1);
  std::memcpy(buf.data() + 1, q.data(), nq * sizeof(float));
  const auto want = reference(h, q.data(), plain(h.d));
  check_all_levels(h, buf.data() + 1, plain(h.d), want);
}

TEST(CpuProdFused, BatchedSequences) {
  ProdHeads a(128, 2, 4, 1000, 3, 4, 41), b(128, 2, 4, 65, 2, 1, 42);
  test::check_batched(a, b, kWindowCap, 60, kTol);
}

TEST(CpuProdFused, DispatchDecision) {
  ProdHeads h(64, 2, 2, 10, 2, 2, 51);
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path()) << simd_level_name(lvl);
    // TurboQuant-Prod values (no fused value kernel) or mixed heads: generic.
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fkeys), cpu::CodecAttentionPath::kGeneric);
    std::vector<cpu::CodecHead> mixed = {h.fkeys[0], h.fvalues[1]};
    EXPECT_EQ(cpu::attention_codec_path(mixed, h.fvalues), cpu::CodecAttentionPath::kGeneric);
    // TurboQuant-MSE keys and values: the TQ-MSE kernels (the reference wrappers at the scalar level).
    EXPECT_EQ(cpu::attention_codec_path(h.fvalues, h.fvalues), simd_level() == SimdLevel::kScalar
                                                                   ? cpu::CodecAttentionPath::kGeneric
                                                                   : cpu::CodecAttentionPath::kTqMseFused);
    // Bad input never throws here.
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, {h.fvalues[0]}), cpu::CodecAttentionPath::kGeneric);
    EXPECT_EQ(cpu::attention_codec_path({{nullptr, nullptr}}, {{nullptr, nullptr}}),
              cpu::CodecAttentionPath::kGeneric);
  }
}

TEST(CpuProdFused, PerturbedGammaBreaksTheTolerance) {
  // Negative control: the fused kernel must read gamma. Scale every stored gamma by 1.01 in the bytes the
  // fast path sees; the reference keeps the original bytes.
  ProdHeads h(128, 2, 4, 1000, 3, 3, 61);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 17);
  const auto want = reference(h, q.data(), plain(h.d));
  std::vector<std::vector<std::uint8_t>> kb2 = h.kb;
  std::vector<cpu::CodecHead> pk;
  for (int g = 0; g < h.kvh; ++g) {
    const std::size_t cb = (kb2[g].size() - 4 * h.n) / h.n;
    for (std::size_t t = 0; t < h.n; ++t) {
      std::uint8_t* p = kb2[g].data() + h.n * cb + 4 * t + 2;
      store_half(p, half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))) * 1.01f);
    }
  }
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    pk.clear();
    for (int g = 0; g < h.kvh; ++g) pk.push_back({h.fk[g].get(), kb2[g].data()});
    std::vector<float> got(want.size()), ok(want.size());
    cpu::attention_codec(pk, h.fvalues, h.n, q.data(), h.heads(), plain(h.d), got.data(), 0, 2);
    cpu::attention_codec(h.fkeys, h.fvalues, h.n, q.data(), h.heads(), plain(h.d), ok.data(), 0, 2);
    EXPECT_LE(max_err(ok, want, h.heads(), h.d), kTol) << simd_level_name(lvl);
    EXPECT_GT(max_err(got, want, h.heads(), h.d), 10 * kTol) << simd_level_name(lvl);
  }
}

TEST(CpuProdFused, BadInputKeepsItsErrors) {
  ProdHeads h(64, 2, 2, 10, 2, 2, 71);
  const auto q = test::gaussian(4 * 64, 18);
  std::vector<float> out(4 * 64, 3.0f);
  const AttentionParams p = plain(64);
  EXPECT_THROW(cpu::attention_codec(h.fkeys, h.fvalues, 0, q.data(), 4, p, out.data()), std::invalid_argument);
  EXPECT_THROW(cpu::attention_codec(h.fkeys, h.fvalues, 10, q.data(), 4, p, out.data(), 11), std::invalid_argument);
  EXPECT_THROW(cpu::attention_codec(h.fkeys, h.fvalues, 10, q.data(), 3, p, out.data()), std::invalid_argument);
  EXPECT_THROW(cpu::attention_codec(h.fkeys, h.fvalues, 10, nullptr, 4, p, out.data()), std::invalid_argument);
  auto bad_q = q;
  bad_q[5] = NAN;
  EXPECT_THROW(cpu::attention_codec(h.fkeys, h.fvalues, 10, bad_q.data(), 4, p, out.data()), std::invalid_argument);
  ProdHeads other(128, 2, 2, 10, 2, 2, 72);
  EXPECT_THROW(cpu::attention_codec(h.fkeys, other.fvalues, 10, q.data(), 4, p, out.data()), std::invalid_argument);
  for (float x : out) EXPECT_EQ(x, 3.0f);
}
