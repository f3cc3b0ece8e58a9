// The fused KIVI attention kernel of cpu::attention_codec (CodecAttentionPath::kKiviFused,
// kernels_simd.h KiviKeySrc / KiviValSrc) against the fp64 reference attention_compressed, within
// 1e-5 relative per head, at every SIMD level this CPU has (the scalar level takes the generic path
// through the reference wrappers and must agree too), 1 and 2 threads: key bits 1..4, 8 x value bits
// 1..4, 8 (8-bit: Kivi8KeySrc / Kivi8ValSrc, bytes read as they are), key token groups that straddle blocks (8, 12, 20, 100, ...; below 8 generic) and value channel
// groups 8..512, head_dim 16/48/64/96/112/128/256/512, GQA 1..16, lengths 1..4097, windows that start inside a key group,
// soft-cap, a context shorter than the block, all-0x00 / all-0xff code bytes, the batched call, the
// dispatch decision (what the fused kernel does not cover goes generic), and negative controls (a
// perturbed key scale or value min in the fast path's bytes must break the tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "tq_heads.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

using test::max_err;
using test::reference;

constexpr double kTol = 1e-5;

/// kvh heads of KIVI keys (kbits, token groups of kg) and values (vbits, channel groups of vg), n
/// tokens, encoded by the reference codecs. fill < 0: Gaussian data with an outlier channel; fill =
/// 0x00 / 0xff: every code byte that value and the (min, scale) pairs set by hand.
struct KiviHeads : test::CodecHeads {
  KiviHeads(int d_, int kvh_, int ratio_, std::size_t n_, int kbits, int vbits, std::uint64_t seed, int kg = 32,
            int vg = 32, int fill = -1)
      : CodecHeads(d_, kvh_, ratio_, n_) {
    for (int g = 0; g < kvh; ++g) {
      CodecConfig kc;
      kc.method = Method::kKivi;
      kc.bits = kbits;
      kc.head_dim = d;
      kc.group_size = kg;
      kc.role = Role::kKey;
      CodecConfig vc = kc;
      vc.bits = vbits;
      vc.group_size = vg;
      vc.role = Role::kValue;
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
        const std::size_t krow = kb[g].size() - 4 * ((n + kg - 1) / kg) * d, vrow = vb[g].size() - 4 * n * (d / vg);
        std::memset(kb[g].data(), fill, krow);
        std::memset(vb[g].data(), fill, vrow);
        for (std::size_t i = krow, k = 0; i < kb[g].size(); i += 4, ++k) {
          store_half(kb[g].data() + i, -1.0f + (k % 5) * 0.25f);
          store_half(kb[g].data() + i + 2, 0.125f + (k % 3) * 0.0625f);
        }
        for (std::size_t i = vrow, k = 0; i < vb[g].size(); i += 4, ++k) {
          store_half(vb[g].data() + i, -0.5f - (k % 7) * 0.25f);
          store_half(vb[g].data() + i + 2, 0.25f + (k % 4) * 0.125f);
        }
      }
      keys.push_back({rk[g].get(), kb[g].data()});
      values.push_back({rv[g].get(), vb[g].data()});
    }
    remake();
  }
};

bool covered(int d, int kg, int vg) { return d % 16 == 0 && d <= 512 && kg >= 8 && vg % 8 == 0 && d / vg <= 8; }

cpu::CodecAttentionPath expected_path(bool fused = true) {
  return simd_level() == SimdLevel::kScalar || !fused ? cpu::CodecAttentionPath::kGeneric
                                                      : cpu::CodecAttentionPath::kKiviFused;
}

/// test::check_fused_all_levels with this file's expected path and tolerance.
void check_all_levels(KiviHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                      std::size_t ctx = 0, bool fused = true) {
  test::check_fused_all_levels(h, q, p, want, [&] { return expected_path(fused); }, kTol, ctx);
}

AttentionParams plain(int d) { return AttentionParams{1.0 / std::sqrt(d), 0, 0}; }
const AttentionParams kWindowCap{0.3, 37, 20.0};  // a 37-token window starts inside a key group

}  // namespace

TEST(CpuKiviFused, EveryKeyAndValueWidth) {
  for (int kbits : {1, 2, 3, 4, 8})
    for (int vbits : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE("kbits " + std::to_string(kbits) + " vbits " + std::to_string(vbits));
      KiviHeads h(128, 2, 4, 1000, kbits, vbits, 10 * kbits + vbits);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 5 + kbits);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuKiviFused, GroupSizes) {
  // Key token groups: fused from 8 up (blocks straddle them unless the size is a multiple of the block),
  // generic below; value channel groups: fused for multiples of 8 with head_dim / group <= 8.
  for (int kg : {1, 5, 8, 12, 16, 20, 32, 100, 128})
    for (int vg : {8, 16, 32, 64, 128}) {
      SCOPED_TRACE("key group " + std::to_string(kg) + " value group " + std::to_string(vg));
      KiviHeads h(128, 2, 3, 301, 1 + kg % 4, 1 + vg % 4, kg * 7 + vg, kg, vg);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 21);
      const bool fused = covered(h.d, kg, vg);
      for (const AttentionParams& p : {plain(h.d), kWindowCap})
        check_all_levels(h, q.data(), p, reference(h, q.data(), p), 0, fused);
    }
  for (int kg : {5, 8, 12, 20, 128})  // 8-bit keys and values: the same groups are covered
    for (int vg : {8, 32, 128}) {
      SCOPED_TRACE("8-bit, key group " + std::to_string(kg) + " value group " + std::to_string(vg));
      KiviHeads h(128, 2, 3, 301, 8, 8, kg * 11 + vg, kg, vg);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 23);
      for (const AttentionParams& p : {plain(h.d), kWindowCap})
        check_all_levels(h, q.data(), p, reference(h, q.data(), p), 0, covered(h.d, kg, vg));
    }
}

TEST(CpuKiviFused, ShapesLengthsAndGqa) {
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits, vg;
  };
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 1, 4, 8},      {64, 2, 4, 2, 2, 3, 16},
                                           {96, 1, 5, 31, 3, 2, 16},    {96, 2, 8, 65, 4, 1, 32},
                                           {112, 1, 16, 64, 2, 2, 16},  {112, 3, 6, 1000, 3, 4, 56},
                                           {128, 1, 7, 63, 1, 2, 32},   {128, 2, 3, 129, 4, 3, 128},
                                           {128, 1, 8, 4097, 4, 4, 32}, {128, 2, 16, 65, 1, 1, 64},
                                           {256, 1, 4, 1000, 2, 3, 32}, {256, 2, 1, 31, 4, 2, 256},
                                           {128, 1, 5, 4097, 1, 3, 16}, {64, 1, 16, 1000, 3, 1, 64},
                                           {128, 1, 2, 17, 2, 4, 32},   {512, 1, 4, 300, 4, 2, 64},
                                           {512, 2, 3, 65, 1, 3, 512},  {16, 1, 4, 100, 2, 4, 8},
                                           {48, 2, 5, 129, 3, 1, 16},   {64, 1, 1, 1, 8, 8, 8},
                                           {96, 2, 8, 65, 8, 2, 32},    {256, 1, 4, 1000, 8, 8, 32},
                                           {512, 1, 4, 300, 4, 8, 64},  {16, 1, 4, 100, 8, 8, 8},
                                           {128, 1, 8, 4097, 8, 8, 32}, {112, 1, 16, 64, 8, 4, 16},
                                           {48, 2, 5, 129, 8, 8, 16}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + std::to_string(s.kbits) + " vbits " +
                 std::to_string(s.vbits) + " value group " + std::to_string(s.vg));
    ASSERT_TRUE(covered(s.d, 32, s.vg));
    KiviHeads h(s.d, s.kvh, s.ratio, s.n, s.kbits, s.vbits, 7 + s.d + s.n, 32, s.vg);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    if (s.n > 2) check_all_levels(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), s.n - 2), s.n - 2);
  }
}

TEST(CpuKiviFused, AllZeroAndAllOnesCodeBytes) {
  const int widths[][2] = {{1, 4}, {2, 3}, {3, 2}, {4, 1}, {8, 8}, {2, 8}, {8, 3}};
  for (int fill : {0x00, 0xff})
    for (const auto& w : widths) {
      const int kbits = w[0];
      SCOPED_TRACE("fill " + std::to_string(fill) + " kbits " + std::to_string(kbits) + " vbits " + std::to_string(w[1]));
      KiviHeads h(96, 2, 5, 1000, kbits, w[1], 3, 20, 16, fill);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuKiviFused, BatchedSequences) {
  KiviHeads a(128, 2, 4, 1000, 3, 4, 41), b(128, 2, 4, 65, 2, 1, 42, 12, 16);
  test::check_batched(a, b, kWindowCap, 60, kTol);
}

TEST(CpuKiviFused, DispatchDecision) {
  KiviHeads h(64, 2, 2, 10, 2, 3, 51);
  KiviHeads eight(64, 2, 2, 10, 8, 8, 52);  // 8-bit KIVI: fused since session 17
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake(), eight.remake();
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path()) << simd_level_name(lvl);
    EXPECT_EQ(cpu::attention_codec_path(eight.fkeys, eight.fvalues), expected_path()) << simd_level_name(lvl);
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, eight.fvalues), expected_path()) << simd_level_name(lvl);
    // Key codecs as values (or the other way round), or 8-bit and narrower value heads in one call (two
    // accumulator layouts): generic.
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fkeys), cpu::CodecAttentionPath::kGeneric);
    EXPECT_EQ(cpu::attention_codec_path(h.fvalues, h.fvalues), cpu::CodecAttentionPath::kGeneric);
    const std::vector<cpu::CodecHead> mixed = {h.fvalues[0], eight.fvalues[1]};
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, mixed), cpu::CodecAttentionPath::kGeneric);
  }
}

TEST(CpuKiviFused, PerturbedBytesBreakTheTolerance) {
  // Negative controls: every key scale times 1.01, or every value min plus 0.01, in the bytes the
  // fast path sees; the reference keeps the original bytes.
  for (int bits : {3, 8}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    KiviHeads h(128, 2, 4, 1000, bits, bits, 61);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 17);
    const auto want = reference(h, q.data(), plain(h.d));
    std::vector<std::vector<std::uint8_t>> kb2 = h.kb, vb2 = h.vb;
    const std::size_t row = 128 * static_cast<std::size_t>(bits) / 8;  // packed(128, bits)
    for (int g = 0; g < h.kvh; ++g) {
      for (std::size_t i = h.n * row; i < kb2[g].size(); i += 4) {
        std::uint8_t* p = kb2[g].data() + i + 2;
        store_half(p, half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))) * 1.01f);
      }
      for (std::size_t i = h.n * row; i < vb2[g].size(); i += 4) {
        std::uint8_t* p = vb2[g].data() + i;
        store_half(p, half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))) + 0.01f);
      }
    }
    test::check_perturbed_bytes(h, q.data(), plain(h.d), want, kb2, vb2, kTol);
  }
}

// ---- AttentionPrecision::kInt8 (src/cpu/kivi_int8_avx512.cpp): int8 dot products on the integer codes at the
// AVX-512 level, for keys and values at 1..4 bits with value groups a multiple of 32 channels (kivi_int8_fits);
// everything else runs the fp32 kernels and must return exactly their result. What is rounded: the
// per-key-group scaled query q * scale_g to 15 bits (two int8 digits, one scale per head, max / 16256) and the
// weights p * scale / 2 per head, value group and pass of 64 tokens to u8 (the pass's largest / 255); the
// <q, min> and sum p (min + scale (2^b - 1) / 2) terms stay fp32. The weights' rounding dominates: measured
// relative L2 error per head against attention_compressed 5.0e-3 on average and 1.04e-2 at worst over these
// sweeps (Gaussian data with an outlier key channel, softmax scale 1/sqrt(head_dim) or 0.3 over a 37-token
// window). Tolerances: 3e-2 for any head, 1e-2 for a sweep's mean (ToleranceCanFail: a 10% wrong softmax
// scale, or an output 2% off, exceeds them). TurboQuant's kInt8 (one int8 digit for the query) has 1e-1 /
// 1.5e-2 (test_cpu_low_precision.cpp); with one digit here the outlier channel left the others ~20 levels:
// 2.3e-2 mean, 0.18 worst.

namespace {

constexpr double kInt8Tol = 3e-2, kInt8MeanTol = 1e-2;

bool has_int8() { return detected_simd_level() == SimdLevel::kAvx512; }

double check_int8(KiviHeads& h, const float* q, const AttentionParams& p, double& sum, int& count,
                  std::size_t ctx = 0) {
  return test::check_int8(h, q, p, kInt8Tol, sum, count, ctx);
}

#define SKIP_WITHOUT_INT8() \
  if (!has_int8()) GTEST_SKIP() << "kInt8 needs the AVX-512 level (VNNI, VBMI); below it the fp32 kernels run"

}  // namespace

TEST(CpuKiviInt8, EveryWidthAndGroup) {
  SKIP_WITHOUT_INT8();
  double sum = 0, worst = 0;
  int count = 0;
  for (int kbits = 1; kbits <= 4; ++kbits)
    for (int vbits = 1; vbits <= 4; ++vbits) {
      SCOPED_TRACE("kbits " + std::to_string(kbits) + " vbits " + std::to_string(vbits));
      KiviHeads h(128, 2, 4, 1000, kbits, vbits, 10 * kbits + vbits);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 5 + kbits);
      for (const AttentionParams& p : {plain(h.d), kWindowCap})
        worst = std::max(worst, check_int8(h, q.data(), p, sum, count));
    }
  // Key token groups that straddle 16-token blocks (8, 12, 20, 100) or span several; value groups 32..128.
  for (int kg : {8, 12, 16, 20, 32, 100, 128})
    for (int vg : {32, 64, 128}) {
      SCOPED_TRACE("key group " + std::to_string(kg) + " value group " + std::to_string(vg));
      KiviHeads h(128, 2, 3, 301, 1 + kg % 4, 1 + vg % 4, kg * 7 + vg, kg, vg);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 21);
      for (const AttentionParams& p : {plain(h.d), kWindowCap})
        worst = std::max(worst, check_int8(h, q.data(), p, sum, count));
    }
  std::printf("CpuKiviInt8.EveryWidthAndGroup: %d heads, mean relative error %.3g, worst %.3g\n", count, sum / count,
              worst);
  EXPECT_LT(sum / count, kInt8MeanTol);
}

TEST(CpuKiviInt8, ShapesLengthsAndGqa) {
  SKIP_WITHOUT_INT8();
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits, vg;
  };
  double sum = 0, worst = 0;
  int count = 0;
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 1, 4, 32},     {64, 2, 4, 2, 2, 3, 64},
                                           {96, 1, 5, 31, 3, 2, 32},    {96, 2, 8, 65, 4, 1, 96},
                                           {128, 1, 6, 64, 2, 2, 32},   {128, 3, 7, 1000, 3, 4, 64},
                                           {128, 1, 7, 63, 1, 2, 32},   {128, 2, 3, 129, 4, 3, 128},
                                           {128, 1, 8, 4097, 4, 4, 32}, {128, 2, 16, 65, 1, 1, 64},
                                           {160, 1, 4, 1000, 2, 3, 32}, {256, 2, 1, 31, 4, 2, 256},
                                           {256, 1, 4, 1000, 2, 3, 32}, {256, 1, 12, 257, 3, 3, 64},
                                           {512, 1, 4, 300, 4, 2, 64},  {512, 2, 3, 65, 1, 3, 128},
                                           {224, 1, 16, 511, 4, 4, 32}, {64, 1, 16, 1000, 3, 1, 64},
                                           {192, 1, 9, 300, 2, 4, 96},  {160, 2, 11, 129, 3, 2, 160},
                                           {224, 1, 13, 257, 1, 3, 224}, {128, 1, 15, 100, 4, 2, 32},
                                           {288, 1, 4, 65, 3, 3, 96},   {480, 1, 2, 70, 2, 1, 160}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + std::to_string(s.kbits) + " vbits " +
                 std::to_string(s.vbits) + " value group " + std::to_string(s.vg));
    KiviHeads h(s.d, s.kvh, s.ratio, s.n, s.kbits, s.vbits, 7 + s.d + s.n, 32, s.vg);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap})
      worst = std::max(worst, check_int8(h, q.data(), p, sum, count));
    if (s.n > 2) worst = std::max(worst, check_int8(h, q.data(), plain(h.d), sum, count, s.n - 2));
  }
  std::printf("CpuKiviInt8.ShapesLengthsAndGqa: %d heads, mean relative error %.3g, worst %.3g\n", count,
              sum / count, worst);
  EXPECT_LT(sum / count, kInt8MeanTol);
}

TEST(CpuKiviInt8, JobsStartingInsideKeyGroups) {
  // Work items of 16 tokens (TURBOKV_CHUNK_TOKENS, read at every call) with key groups that do not divide 16:
  // most jobs start inside a key group, and 16-token blocks straddle two or three of them.
  SKIP_WITHOUT_INT8();
  const char* old = std::getenv("TURBOKV_CHUNK_TOKENS");
  const std::string saved = old ? old : "";
  setenv("TURBOKV_CHUNK_TOKENS", "16", 1);
  double sum = 0;
  int count = 0;
  for (int kg : {8, 9, 13, 40}) {
    SCOPED_TRACE("key group " + std::to_string(kg));
    KiviHeads h(128, 2, 4, 333, 1 + kg % 4, 2 + kg % 3, 90 + kg, kg, 64);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 22);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_int8(h, q.data(), p, sum, count);
  }
  if (old)
    setenv("TURBOKV_CHUNK_TOKENS", saved.c_str(), 1);
  else
    unsetenv("TURBOKV_CHUNK_TOKENS");
  EXPECT_LT(sum / count, kInt8MeanTol);
}

TEST(CpuKiviInt8, AllZeroAndAllOnesCodeBytes) {
  SKIP_WITHOUT_INT8();
  const int widths[][2] = {{1, 4}, {2, 3}, {3, 2}, {4, 1}, {4, 4}};
  double sum = 0;
  int count = 0;
  for (int fill : {0x00, 0xff})
    for (const auto& w : widths) {
      SCOPED_TRACE("fill " + std::to_string(fill) + " kbits " + std::to_string(w[0]) + " vbits " + std::to_string(w[1]));
      KiviHeads h(96, 2, 5, 1000, w[0], w[1], 3, 20, 32, fill);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_int8(h, q.data(), p, sum, count);
    }
}

TEST(CpuKiviInt8, BatchedSequences) {
  SKIP_WITHOUT_INT8();
  KiviHeads a(128, 2, 4, 1000, 3, 4, 41), b(128, 2, 4, 65, 2, 1, 42, 12, 64);
  test::check_batched_int8(a, b, kWindowCap, 60, kInt8Tol);
}

TEST(CpuKiviInt8, RunsOnlyWhereItFits) {
  // The int8 kernel really runs where kivi_int8_fits (its result is not the fp32 one, and close to it); value
  // groups that are not a multiple of 32 channels, 8-bit keys or values, and levels below AVX-512 run the
  // fp32 kernels and return exactly their result.
  struct Case {
    int kbits, vbits, vg;
    bool fits;
  };
  for (const Case& c : {Case{3, 3, 32, true}, Case{1, 4, 128, true}, Case{3, 3, 16, false}, Case{4, 2, 8, false},
                        Case{8, 3, 32, false}, Case{3, 8, 32, false}}) {
    SCOPED_TRACE("kbits " + std::to_string(c.kbits) + " vbits " + std::to_string(c.vbits) + " value group " +
                 std::to_string(c.vg));
    KiviHeads h(128, 2, 4, 1000, c.kbits, c.vbits, 400 + c.vg, 32, c.vg);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 31);
    test::expect_int8_runs_iff(h, q.data(), plain(h.d), c.fits, kInt8Tol);
  }
}

TEST(CpuKiviInt8, ToleranceCanFail) {
  // Not vacuous: a 10% wrong softmax scale in the same kernel exceeds the per-head tolerance, and an output
  // 2% off everywhere exceeds the mean tolerance (the sweep's guard).
  SKIP_WITHOUT_INT8();
  KiviHeads h(128, 2, 4, 1000, 4, 4, 700);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 41);
  test::expect_int8_tolerance_can_fail(h, q.data(), kInt8Tol, kInt8MeanTol);
}
