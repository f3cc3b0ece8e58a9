// The fused RVQ attention kernel of cpu::attention_codec (CodecAttentionPath::kRvqFused,
// kernels_simd.h RvqKeySrc / RvqValSrc) against the fp64 reference attention_compressed, within
// 1e-5 relative per head, at every SIMD level this CPU has (the scalar level takes the generic path
// through the reference wrappers and must agree too), 1 and 2 threads: key bits 1..4 x value bits
// 1..4, head_dim 16/48/64/80/96/112/128/256/512, GQA 1..16, lengths 1..4097, window and soft-cap, a context
// shorter than the block, every rotation kind, all-0x00 / all-0xff code bytes, an unaligned query,
// the batched call, the dispatch decision, and negative controls (a perturbed norm or stage-2
// code in the fast path's bytes must break the tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

/// kvh heads of RVQ keys (kbits) and values (vbits), n tokens, encoded by the reference codecs.
/// fill < 0: Gaussian data with an outlier channel; fill = 0x00 / 0xff: every code byte that value,
/// norms 0.5 .. 2. The fast codecs (make_cpu_codec) are made at the current simd_level().
struct RvqHeads : test::CodecHeads {
  RvqHeads(int d_, int kvh_, int ratio_, std::size_t n_, int kbits, int vbits, std::uint64_t seed, int fill = -1,
           RotationKind rot = RotationKind::kHadamard)
      : CodecHeads(d_, kvh_, ratio_, n_) {
    for (int g = 0; g < kvh; ++g) {
      CodecConfig kc;
      kc.method = Method::kRvq;
      kc.bits = kbits;
      kc.head_dim = d;
      kc.seed = seed + g;
      kc.rotation = rot;
      CodecConfig vc = kc;
      vc.bits = vbits;
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
        const std::size_t kcb = (kb[g].size() - 2 * n) / n, vcb = (vb[g].size() - 2 * n) / n;
        std::memset(kb[g].data(), fill, n * kcb);
        std::memset(vb[g].data(), fill, n * vcb);
        for (std::size_t t = 0; t < n; ++t) {
          store_half(kb[g].data() + n * kcb + 2 * t, 0.5f + (t % 7) * 0.25f);
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
  return simd_level() == SimdLevel::kScalar ? cpu::CodecAttentionPath::kGeneric : cpu::CodecAttentionPath::kRvqFused;
}

/// test::check_fused_all_levels with this file's expected path and tolerance.
void check_all_levels(RvqHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                      std::size_t ctx = 0) {
  test::check_fused_all_levels(h, q, p, want, [&] { return expected_path(); }, kTol, ctx);
}

AttentionParams plain(int d) { return AttentionParams{1.0 / std::sqrt(d), 0, 0}; }
const AttentionParams kWindowCap{0.3, 37, 20.0};

}  // namespace

TEST(CpuRvqFused, EveryKeyAndValueWidth) {
  for (int kbits = 1; kbits <= 4; ++kbits)
    for (int vbits = 1; vbits <= 4; ++vbits) {
      SCOPED_TRACE("kbits " + std::to_string(kbits) + " vbits " + std::to_string(vbits));
      RvqHeads h(128, 2, 4, 1000, kbits, vbits, 10 * kbits + vbits);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 5 + kbits);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuRvqFused, ShapesLengthsAndGqa) {
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits;
  };
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 1, 4},     {64, 2, 4, 2, 2, 3},     {80, 1, 5, 31, 3, 2},
                                           {80, 2, 8, 65, 4, 1},    {96, 1, 16, 64, 2, 2},   {96, 3, 6, 1000, 3, 4},
                                           {112, 1, 7, 63, 1, 2},   {112, 2, 3, 129, 4, 3},  {128, 1, 8, 4097, 4, 4},
                                           {128, 2, 16, 65, 1, 1},  {256, 1, 4, 1000, 2, 3}, {256, 2, 1, 31, 4, 2},
                                           {128, 1, 5, 4097, 1, 3}, {64, 1, 16, 1000, 3, 1}, {128, 1, 2, 17, 2, 4},
                                           {512, 1, 4, 300, 4, 2},  {512, 2, 3, 65, 1, 3},   {16, 1, 4, 100, 2, 4},
                                           {48, 2, 5, 129, 3, 1}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + std::to_string(s.kbits) + " vbits " +
                 std::to_string(s.vbits));
    RvqHeads h(s.d, s.kvh, s.ratio, s.n, s.kbits, s.vbits, 7 + s.d + s.n);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    // A context shorter than the block.
    if (s.n > 2) check_all_levels(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), s.n - 2), s.n - 2);
  }
}

TEST(CpuRvqFused, EveryRotationKind) {
  for (RotationKind rot : {RotationKind::kNone, RotationKind::kHadamard, RotationKind::kHaar})
    for (int bits : {1, 2, 4}) {
      SCOPED_TRACE(std::string("rotation ") + rotation_name(rot) + " bits " + std::to_string(bits));
      RvqHeads h(96, 2, 4, 300, bits, 5 - bits, 23 + bits, -1, rot);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 19);
      check_all_levels(h, q.data(), kWindowCap, reference(h, q.data(), kWindowCap));
    }
}

TEST(CpuRvqFused, AllZeroAndAllOnesCodeBytes) {
  for (int fill : {0x00, 0xff})
    for (int kbits : {1, 2, 3, 4}) {
      SCOPED_TRACE("fill " + std::to_string(fill) + " kbits " + std::to_string(kbits));
      RvqHeads h(96, 2, 5, 1000, kbits, 5 - kbits, 3, fill);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuRvqFused, UnalignedQuery) {
  RvqHeads h(128, 2, 4, 1000, 4, 3, 31);
  const std::size_t nq = static_cast<std::size_t>(h.heads()) * h.d;
  const auto q = test::gaussian(nq, 14);
  std::vector<float> buf(nq + 1);
  std::memcpy(buf.data() + 1, q.data(), nq * sizeof(float));
  const auto want = reference(h, q.data(), plain(h.d));
  check_all_levels(h, buf.data() + 1, plain(h.d), want);
}

TEST(CpuRvqFused, BatchedSequences) {
  RvqHeads a(128, 2, 4, 1000, 3, 4, 41), b(128, 2, 4, 65, 2, 1, 42);
  test::check_batched(a, b, kWindowCap, 60, kTol);
}

TEST(CpuRvqFused, DispatchDecision) {
  RvqHeads h(64, 2, 2, 10, 2, 3, 51);
  // head_dim 1024: RVQ has SIMD codecs there, but the fused kernel stops at 512 (generic path).
  RvqHeads wide(1024, 1, 2, 10, 2, 2, 52);
  CodecConfig tc;
  tc.method = Method::kTurboMse;
  tc.bits = 2;
  tc.head_dim = 64;
  const auto tq = make_codec(tc);
  std::vector<std::uint8_t> tb(tq->encoded_bytes(10));
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake(), wide.remake();
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path()) << simd_level_name(lvl);
    EXPECT_EQ(cpu::attention_codec_path(wide.fkeys, wide.fvalues), cpu::CodecAttentionPath::kGeneric);
    // RVQ keys with TurboQuant-MSE values (or the other way round): generic.
    const auto ftq = cpu::make_cpu_codec(*tq);
    const std::vector<cpu::CodecHead> tqv = {{ftq.get(), tb.data()}, {ftq.get(), tb.data()}};
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, tqv), cpu::CodecAttentionPath::kGeneric);
    EXPECT_EQ(cpu::attention_codec_path(tqv, h.fvalues), cpu::CodecAttentionPath::kGeneric);
  }
}

TEST(CpuRvqFused, PerturbedBytesBreakTheTolerance) {
  // Negative controls: the fused kernel must read every key norm and the stage-2 codes of the values.
  // (a) every stored key norm times 1.01; (b) the first stage-2 code byte of every value token
  // flipped; each in the bytes the fast path sees, the reference keeping the original bytes.
  RvqHeads h(128, 2, 4, 1000, 3, 3, 61);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 17);
  const auto want = reference(h, q.data(), plain(h.d));
  std::vector<std::vector<std::uint8_t>> kb2 = h.kb, vb2 = h.vb;
  const std::size_t cb = (kb2[0].size() - 2 * h.n) / h.n;  // code bytes per token (both stages)
  for (int g = 0; g < h.kvh; ++g)
    for (std::size_t t = 0; t < h.n; ++t) {
      std::uint8_t* p = kb2[g].data() + h.n * cb + 2 * t;
      store_half(p, half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))) * 1.01f);
      vb2[g][t * cb + cb / 2] ^= 0xff;
    }
  test::check_perturbed_bytes(h, q.data(), plain(h.d), want, kb2, vb2, kTol);
}

// ---- AttentionPrecision::kInt8 (src/cpu/rvq_int8_avx512.cpp): the TurboQuant kInt8 scheme with both stages'
// centroids on one integer grid (keys u8, values s8: c1[a] + c2[b] as one operand), at the AVX-512 level and
// 1..3 bits a stage (kernels.h rvq_int8_fits); 4-bit keys or values, and levels below AVX-512, run the fp32
// kernels and return exactly their result. Rounded: the rotated query to int8 (one scale per head, max / 127),
// both key codebooks to one u8 grid of step (range1 + range2) / 254, both value codebooks to one s8 grid of
// step (max |c1| + max |c2|) / 126, and the weights p ||v|| per head and pass of 64 tokens to u8. Measured on
// the sweep below (Gaussian data with an outlier key channel, whose larger logits make the softmax peakier than
// test_cpu_low_precision.cpp's data): 1.46e-2 on average, 5.5e-2 at worst. Tolerances: 1e-1 for any head (as
// TurboQuant's kInt8), 2e-2 for the sweep's mean (ToleranceCanFail: a 10% wrong softmax scale, or an output 4%
// off, exceeds them).
namespace {

constexpr double kInt8Tol = 1e-1, kInt8MeanTol = 2e-2;

#define SKIP_WITHOUT_INT8()                                  \
  if (detected_simd_level() != SimdLevel::kAvx512)           \
  GTEST_SKIP() << "kInt8 needs the AVX-512 level (VNNI, VBMI); below it the fp32 kernels run"

}  // namespace

TEST(CpuRvqInt8, ShapesWidthsLengthsAndGqa) {
  SKIP_WITHOUT_INT8();
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits;
  };
  std::vector<Shape> shapes{{64, 1, 1, 1, 1, 3},     {64, 2, 4, 2, 2, 3},     {80, 1, 5, 31, 3, 2},
                            {80, 2, 8, 65, 3, 1},    {96, 1, 16, 64, 2, 2},   {96, 3, 6, 1000, 3, 3},
                            {112, 1, 7, 63, 1, 2},   {112, 2, 3, 129, 2, 3},  {128, 1, 8, 4097, 3, 3},
                            {128, 2, 16, 65, 1, 1},  {256, 1, 4, 1000, 2, 3}, {256, 2, 1, 31, 3, 2},
                            {128, 1, 5, 4097, 1, 3}, {64, 1, 16, 1000, 3, 1}, {128, 1, 2, 17, 2, 1},
                            {512, 1, 4, 300, 3, 2},  {512, 2, 3, 65, 1, 3},   {16, 1, 4, 100, 2, 3},
                            {48, 2, 5, 129, 3, 1},   {128, 1, 6, 257, 2, 2},  {256, 2, 12, 511, 1, 2}};
  for (int kbits = 1; kbits <= 3; ++kbits)  // every width pair at head_dim 128
    for (int vbits = 1; vbits <= 3; ++vbits) shapes.push_back({128, 2, 4, 1000, kbits, vbits});
  double sum = 0, worst = 0;
  int count = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + std::to_string(s.kbits) + " vbits " +
                 std::to_string(s.vbits));
    RvqHeads h(s.d, s.kvh, s.ratio, s.n, s.kbits, s.vbits, 7 + s.d + s.n + 10 * s.kbits + s.vbits);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap})
      worst = std::max(worst, test::check_int8(h, q.data(), p, kInt8Tol, sum, count));
    if (s.n > 2) worst = std::max(worst, test::check_int8(h, q.data(), plain(h.d), kInt8Tol, sum, count, s.n - 2));
  }
  std::printf("CpuRvqInt8.ShapesWidthsLengthsAndGqa: %d heads, mean relative error %.3g, worst %.3g\n", count,
              sum / count, worst);
  EXPECT_LT(sum / count, kInt8MeanTol);
}

TEST(CpuRvqInt8, RotationsAndFilledCodeBytes) {
  SKIP_WITHOUT_INT8();
  double sum = 0;
  int count = 0;
  for (RotationKind rot : {RotationKind::kNone, RotationKind::kHadamard, RotationKind::kHaar})
    for (int bits : {1, 2, 3}) {
      SCOPED_TRACE(std::string("rotation ") + rotation_name(rot) + " bits " + std::to_string(bits));
      RvqHeads h(96, 2, 4, 300, bits, 4 - bits, 23 + bits, -1, rot);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 19);
      test::check_int8(h, q.data(), kWindowCap, kInt8Tol, sum, count);
    }
  for (int fill : {0x00, 0xff})
    for (int kbits : {1, 2, 3}) {
      SCOPED_TRACE("fill " + std::to_string(fill) + " kbits " + std::to_string(kbits));
      RvqHeads h(96, 2, 5, 1000, kbits, 4 - kbits, 3, fill);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) test::check_int8(h, q.data(), p, kInt8Tol, sum, count);
    }
}

TEST(CpuRvqInt8, BatchedSequences) {
  SKIP_WITHOUT_INT8();
  RvqHeads a(128, 2, 4, 1000, 3, 3, 41), b(128, 2, 4, 65, 2, 1, 42);  // every head fits: the call runs int8
  test::check_batched_int8(a, b, kWindowCap, 60, kInt8Tol);
}

TEST(CpuRvqInt8, RunsOnlyWhereItFits) {
  // The int8 kernel really runs at the AVX-512 level and 1..3 bits (its result is not the fp32 one, and close
  // to it); 4-bit keys or values, and levels below AVX-512, return exactly the fp32 kernel's result.
  const int widths[][3] = {{3, 3, 1}, {1, 2, 1}, {4, 3, 0}, {2, 4, 0}};  // key bits, value bits, fits
  for (const auto& w : widths) {
    SCOPED_TRACE("kbits " + std::to_string(w[0]) + " vbits " + std::to_string(w[1]));
    RvqHeads h(128, 2, 4, 1000, w[0], w[1], 400 + w[0]);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 31);
    test::expect_int8_runs_iff(h, q.data(), plain(h.d), w[2] != 0, kInt8Tol);
  }
}

TEST(CpuRvqInt8, ToleranceCanFail) {
  // Not vacuous: a 10% wrong softmax scale in the same kernel exceeds the per-head tolerance, and an output 4%
  // off everywhere exceeds the mean tolerance.
  SKIP_WITHOUT_INT8();
  RvqHeads h(128, 2, 4, 1000, 3, 3, 700);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 41);
  test::expect_int8_tolerance_can_fail(h, q.data(), kInt8Tol, kInt8MeanTol);
}
