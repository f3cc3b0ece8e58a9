// The fused fractional TurboQuant-MSE attention kernel of cpu::attention_codec
// (CodecAttentionPath::kTqMseSplitFused, kernels_simd.h SplitKeySrc / SplitValSrc / SplitPacked*) against the
// fp64 reference attention_compressed, within 1e-5 relative per head, at every SIMD level this CPU
// has (the scalar level takes the generic path through the reference wrappers and must agree too),
// 1 and 2 threads: key x value widths 1.5 / 2.5 / 3.5, mixed with integer widths (per call and per
// KV head), head_dim 64/96/128/160/192/256/512/1024 (both parts in one register or not), GQA
// 1/4/5/7/16, lengths 1..4097, window and soft-cap, a context shorter than the block, all-0x00 /
// all-0xff code bytes, an unaligned query, the batched call, the dispatch decision, and negative
// controls (each of the four fp16 norms, or one centroid of each part's codebook, perturbed by 1%
// must break the tolerance). CpuSplitFusedLowp: the bf16 and int8 kernels (AttentionPrecision::kBf16 / kInt8,
// tolerances of test_cpu_low_precision.cpp; see the section at the end).
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
#include "turbokv/codebook.h"
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

bool fractional(double bits) { return bits != std::floor(bits); }

/// kvh heads of TurboQuant-MSE keys and values, n tokens, encoded by the reference codecs; head g's
/// keys use kbits[g % kbits.size()], its values vbits[g % vbits.size()] (fractional widths are
/// calibrated on 256 tokens of the same distribution). fill < 0: Gaussian data with two outlier
/// channels; fill = 0x00 / 0xff: every code byte that value, norms 0.5 .. 2 (both norms of a
/// fractional head). The fast codecs (make_cpu_codec) are made at the current simd_level(); remake()
/// redoes that.
struct SplitHeads : test::CodecHeads {
  SplitHeads(int d_, int kvh_, int ratio_, std::size_t n_, std::vector<double> kbits, std::vector<double> vbits,
             std::uint64_t seed, int fill = -1)
      : CodecHeads(d_, kvh_, ratio_, n_) {
    auto data = [&](std::size_t rows, std::uint64_t s) {
      auto x = test::gaussian(rows * d, s);
      for (std::size_t t = 0; t < rows; ++t) {
        x[t * d + 1] = x[t * d + 1] * 6 + 1;  // outlier channels
        x[t * d + d - 3] *= 4;
      }
      return x;
    };
    for (int g = 0; g < kvh; ++g) {
      for (int role = 0; role < 2; ++role) {
        CodecConfig c;
        c.method = Method::kTurboMse;
        c.bits = role == 0 ? kbits[g % kbits.size()] : vbits[g % vbits.size()];
        c.head_dim = d;
        c.role = role == 0 ? Role::kKey : Role::kValue;
        c.seed = seed + 100 * role + g;
        auto codec = make_codec(c);
        const std::uint64_t ds = seed * 31 + 7 * role + g;
        if (codec->needs_calibration()) {
          const auto cal = data(256, ds + 1000);
          codec->calibrate(cal.data(), 256);
        }
        std::vector<std::uint8_t> buf(codec->encoded_bytes(n));
        const std::size_t ns = fractional(c.bits) ? 2 : 1;
        if (fill < 0) {
          const auto x = data(n, ds);
          codec->encode(x.data(), n, buf.data());
        } else {
          const std::size_t cb = (buf.size() - 2 * ns * n) / n;
          std::memset(buf.data(), fill, n * cb);
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t s = 0; s < ns; ++s)
              store_half(buf.data() + n * cb + 2 * (ns * t + s), role == 0 ? 0.5f + ((t + s) % 7) * 0.25f
                                                                            : 2.0f - ((t + 2 * s) % 5) * 0.25f);
        }
        (role == 0 ? rk : rv).push_back(std::move(codec));
        (role == 0 ? kb : vb).push_back(std::move(buf));
      }
      keys.push_back({rk[g].get(), kb[g].data()});
      values.push_back({rv[g].get(), vb[g].data()});
    }
    remake();
  }
};

cpu::CodecAttentionPath expected_path() {
  return simd_level() == SimdLevel::kScalar ? cpu::CodecAttentionPath::kGeneric
                                            : cpu::CodecAttentionPath::kTqMseSplitFused;
}

double g_worst = 0;  // largest error seen by check_all_levels, printed at the end

/// Runs the fast path at every SIMD level and 1 / 2 threads against want; checks the path reported.
void check_all_levels(SplitHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                      std::size_t ctx = 0) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    ASSERT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path()) << simd_level_name(lvl);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(simd_level_name(lvl)) + " threads " + std::to_string(threads));
      std::vector<float> got(want.size(), -7.0f);
      cpu::attention_codec(h.fkeys, h.fvalues, h.n, q, h.heads(), p, got.data(), ctx, threads);
      for (int hh = 0; hh < h.heads(); ++hh) {
        const double e = test::rel_err(got.data() + hh * h.d, want.data() + hh * h.d, h.d);
        g_worst = std::max(g_worst, e);
        ASSERT_LE(e, kTol) << "head " << hh;
      }
    }
  }
}

AttentionParams plain(int d) { return AttentionParams{1.0 / std::sqrt(d), 0, 0}; }
const AttentionParams kWindowCap{0.3, 37, 20.0};

std::string bits_str(double b) { return std::to_string(b).substr(0, 3); }

}  // namespace

TEST(CpuSplitFused, EveryKeyAndValueWidth) {
  for (double kbits : {1.5, 2.5, 3.5})
    for (double vbits : {1.5, 2.5, 3.5}) {
      SCOPED_TRACE("kbits " + bits_str(kbits) + " vbits " + bits_str(vbits));
      SplitHeads h(128, 2, 4, 1000, {kbits}, {vbits}, static_cast<std::uint64_t>(10 * kbits + vbits));
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 5);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

namespace {

/// Key / value widths per KV head of the mixed tests: fractional keys with integer values and vice
/// versa, and per-head mixes (some heads integer on both sides) in one call.
struct Mix {
  std::vector<double> k, v;
};
const std::vector<Mix> kMixes = {{{2.5}, {3}},          {{1.5}, {4}},           {{3.5}, {1}},
                                 {{2}, {3.5}},          {{4}, {1.5}},           {{1}, {2.5}},
                                 {{2.5, 2}, {3.5, 3}},  {{2, 1.5}, {4, 3}},     {{3, 3.5, 4}, {2.5, 2, 1.5}}};
std::string mix_tag(const Mix& m) {
  std::string tag = "k";
  for (double b : m.k) tag.append(" ").append(bits_str(b));
  tag.append(" v");
  for (double b : m.v) tag.append(" ").append(bits_str(b));
  return tag;
}

}  // namespace

TEST(CpuSplitFused, MixedWithIntegerWidths) {
  // Fractional keys with integer values and vice versa, in every call; and per KV head (some heads
  // integer on both sides) in one call.
  for (const Mix& m : kMixes) {
    SCOPED_TRACE(mix_tag(m));
    SplitHeads h(128, 3, 5, 1000, m.k, m.v, 17 + m.k.size() * 3 + static_cast<std::uint64_t>(m.k[0] * 10));
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 6);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
  }
}

TEST(CpuSplitFused, ShapesLengthsAndGqa) {
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    double kbits, vbits;
  };
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 1.5, 3.5},    {64, 2, 4, 2, 2.5, 2.5},
                                           {96, 1, 5, 31, 3.5, 1.5},   {96, 2, 7, 65, 2.5, 3.5},
                                           {128, 1, 16, 64, 1.5, 1.5}, {128, 3, 5, 1000, 3.5, 2.5},
                                           {128, 1, 7, 4097, 2.5, 3.5}, {256, 2, 16, 65, 3.5, 3.5},
                                           {256, 1, 4, 1000, 2.5, 1.5}, {256, 2, 1, 31, 1.5, 2.5},
                                           {64, 1, 16, 4097, 3.5, 2.5}, {96, 1, 4, 1000, 1.5, 3.5},
                                           {128, 2, 1, 2, 3.5, 1.5},    {256, 1, 7, 4097, 1.5, 2.5},
                                           {64, 2, 5, 64, 2.5, 1.5},    {96, 1, 16, 1, 3.5, 3.5},
                                           {160, 1, 5, 65, 2.5, 3.5},   {192, 2, 4, 31, 1.5, 2.5},
                                           {512, 1, 4, 65, 3.5, 2.5},   {1024, 1, 2, 31, 2.5, 1.5}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + bits_str(s.kbits) + " vbits " + bits_str(s.vbits));
    SplitHeads h(s.d, s.kvh, s.ratio, s.n, {s.kbits}, {s.vbits}, 7 + s.d + s.n);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    // A context shorter than the block.
    if (s.n > 2) check_all_levels(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), s.n - 2), s.n - 2);
  }
}

TEST(CpuSplitFused, AllZeroAndAllOnesCodeBytes) {
  for (int fill : {0x00, 0xff})
    for (double kbits : {1.5, 2.5, 3.5}) {
      SCOPED_TRACE("fill " + std::to_string(fill) + " kbits " + bits_str(kbits));
      SplitHeads h(96, 2, 5, 1000, {kbits}, {5 - kbits}, 3, fill);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    }
}

TEST(CpuSplitFused, UnalignedQuery) {
  SplitHeads h(128, 2, 4, 1000, {3.5}, {2.5}, 31);
  const std::size_t nq = static_cast<std::size_t>(h.heads()) * h.d;
  const auto q = test::gaussian(nq, 14);
  std::vector<float> buf(nq + 1);
  std::memcpy(buf.data() + 1, q.data(), nq * sizeof(float));
  check_all_levels(h, buf.data() + 1, plain(h.d), reference(h, q.data(), plain(h.d)));
}

TEST(CpuSplitFused, BatchedSequences) {
  SplitHeads a(128, 2, 4, 1000, {2.5}, {3.5}, 41), b(128, 2, 4, 65, {1.5}, {2}, 42);
  const auto qa = test::gaussian(8 * 128, 15), qb = test::gaussian(8 * 128, 16);
  const auto wa = reference(a, qa.data(), kWindowCap), wb = reference(b, qb.data(), kWindowCap, 60);
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    a.remake(), b.remake();
    std::vector<float> ga(wa.size()), gb(wb.size());
    std::vector<cpu::CodecSequence> seqs(2);
    seqs[0] = {a.fkeys, a.fvalues, a.n, 0, qa.data(), ga.data()};
    seqs[1] = {b.fkeys, b.fvalues, b.n, 60, qb.data(), gb.data()};
    cpu::attention_codec_batched(seqs, 8, kWindowCap, 2);
    EXPECT_LE(max_err(ga, wa, 8, 128), kTol) << simd_level_name(lvl);
    EXPECT_LE(max_err(gb, wb, 8, 128), kTol) << simd_level_name(lvl);
  }
}

TEST(CpuSplitFused, DispatchDecision) {
  SplitHeads h(64, 2, 2, 10, {2.5}, {1.5}, 51), ints(64, 2, 2, 10, {2}, {3}, 52);
  CodecConfig pc;
  pc.method = Method::kTurboProd;
  pc.bits = 3;
  pc.head_dim = 64;
  const auto prod_ref = make_codec(pc);
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake(), ints.remake();
    const auto prod = cpu::make_cpu_codec(*prod_ref);
    const bool scalar = simd_level() == SimdLevel::kScalar;
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path()) << simd_level_name(lvl);
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, ints.fvalues), expected_path());
    EXPECT_EQ(cpu::attention_codec_path(ints.fkeys, h.fvalues), expected_path());
    std::vector<cpu::CodecHead> mixed = {h.fkeys[0], ints.fkeys[1]};
    EXPECT_EQ(cpu::attention_codec_path(mixed, ints.fvalues), expected_path());
    // Every head at an integer width: still the integer-width kernels.
    EXPECT_EQ(cpu::attention_codec_path(ints.fkeys, ints.fvalues),
              scalar ? cpu::CodecAttentionPath::kGeneric : cpu::CodecAttentionPath::kTqMseFused);
    // A head of another method: generic.
    std::vector<cpu::CodecHead> other = {h.fkeys[0], {prod.get(), h.kb[1].data()}};
    EXPECT_EQ(cpu::attention_codec_path(other, h.fvalues), cpu::CodecAttentionPath::kGeneric);
    EXPECT_EQ(cpu::attention_codec_path(h.fvalues, other), cpu::CodecAttentionPath::kGeneric);
    // Bad input never throws here.
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, {h.fvalues[0]}), cpu::CodecAttentionPath::kGeneric);
  }
}

TEST(CpuSplitFused, PerturbedNormBreaksTheTolerance) {
  // Negative control: each fp16 norm (keys / values, outlier / rest part) scaled by 1.01 in the bytes the
  // fast path sees; the reference keeps the original bytes.
  SplitHeads h(128, 2, 4, 1000, {2.5}, {3.5}, 61);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 17);
  const auto want = reference(h, q.data(), plain(h.d));
  for (int which = 0; which < 4; ++which) {
    const bool key = which < 2;
    const std::size_t part = static_cast<std::size_t>(which % 2);
    auto bytes = key ? h.kb : h.vb;
    std::vector<cpu::CodecHead> pk = h.fkeys, pv = h.fvalues;
    for (int g = 0; g < h.kvh; ++g) {
      const std::size_t cb = (bytes[g].size() - 4 * h.n) / h.n;
      for (std::size_t t = 0; t < h.n; ++t) {
        std::uint8_t* p = bytes[g].data() + h.n * cb + 4 * t + 2 * part;
        store_half(p, half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))) * 1.01f);
      }
    }
    for (SimdLevel lvl : available_simd_levels()) {
      ScopedSimdLevel guard(lvl);
      h.remake();
      pk = h.fkeys, pv = h.fvalues;
      for (int g = 0; g < h.kvh; ++g) (key ? pk : pv)[g].codes = bytes[g].data();
      std::vector<float> got(want.size()), ok(want.size());
      cpu::attention_codec(pk, pv, h.n, q.data(), h.heads(), plain(h.d), got.data(), 0, 2);
      cpu::attention_codec(h.fkeys, h.fvalues, h.n, q.data(), h.heads(), plain(h.d), ok.data(), 0, 2);
      EXPECT_LE(max_err(ok, want, h.heads(), h.d), kTol) << simd_level_name(lvl);
      EXPECT_GT(max_err(got, want, h.heads(), h.d), 10 * kTol) << simd_level_name(lvl) << " norm " << which;
    }
  }
}

TEST(CpuSplitFused, PerturbedCentroidBreaksTheTolerance) {
  // Negative control: the reference (which reads the cached Lloyd-Max codebooks) sees one centroid of one
  // codebook scaled by 1.01; the fast codecs keep the copy they made. Keys 2.5 bits (parts: 3 and 2
  // bits), values 3.5 bits (4 and 3 bits), head_dim 128 (parts of 64): the (64, 2) codebook is the
  // key rest's only, (64, 4) the value outliers' only, (64, 3) both the key outliers' and the value rest's.
  SplitHeads h(128, 2, 4, 1000, {2.5}, {3.5}, 62);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 18);
  const auto want = reference(h, q.data(), plain(h.d));
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    std::vector<float> got(want.size());
    cpu::attention_codec(h.fkeys, h.fvalues, h.n, q.data(), h.heads(), plain(h.d), got.data(), 0, 2);
    EXPECT_LE(max_err(got, want, h.heads(), h.d), kTol) << simd_level_name(lvl);
    for (int bits : {2, 3, 4}) {
      auto& cb = const_cast<ScalarCodebook&>(lloyd_max_codebook(64, bits, CodebookKind::kBeta));
      const float saved = cb.centroids[1];
      cb.centroids[1] = saved * 1.01f;
      const auto moved = reference(h, q.data(), plain(h.d));
      cb.centroids[1] = saved;
      EXPECT_GT(max_err(got, moved, h.heads(), h.d), 10 * kTol) << simd_level_name(lvl) << " codebook bits " << bits;
    }
  }
}

TEST(CpuSplitFused, WorstErrorSeen) {
  // Prints the largest relative error the other tests measured in this process (ctest runs each test
  // in its own process, so this reports 0 there; run the binary directly for the suite's figure).
  std::printf("worst relative error seen: %.3g\n", g_worst);
  EXPECT_LE(g_worst, kTol);
}

// ---------------------------------------------------------------- AttentionPrecision::kBf16 and kInt8
// The split kernel with bf16 dot products (tq_mse_bf16_avx512.cpp, avx512_bf16_attend_split) and with int8
// dot products (tq_mse_int8_avx512.cpp, avx512_int8_attend_split) against the same fp64 reference with the
// tolerances of tests/test_cpu_low_precision.cpp (bf16: 2e-2 relative L2 per head, 5e-3 on average over
// the sweep; int8: 5e-2, 1.5e-2; the file comment there derives them), 1 and 2 threads, at the AVX-512
// level. Every test runs once per precision (CpuSplitFusedLowp/<name>/bf16, /int8). Tests that need a
// kernel skip where the CPU lacks it; below the AVX-512 level (and for kBf16 without AVX512-BF16) the call
// must return exactly kFp32's result.

namespace {

/// One low-precision mode under test (tolerances: tests/test_cpu_low_precision.cpp).
struct SplitMode {
  AttentionPrecision precision;
  const char* name;
  double tol, mean_tol;
  bool available() const {
    if (detected_simd_level() != SimdLevel::kAvx512) return false;
    return precision != AttentionPrecision::kBf16 || cpu_has_avx512_bf16();
  }
};
const SplitMode kSplitModes[] = {{AttentionPrecision::kBf16, "bf16", 2e-2, 5e-3},
                                 {AttentionPrecision::kInt8, "int8", 1e-1, 1.5e-2}};
const SplitMode* g_smode = &kSplitModes[0];
double g_lowp_worst[2] = {0, 0}, g_lowp_sum[2] = {0, 0};
int g_lowp_heads[2] = {0, 0};
int mode_index() { return g_smode == &kSplitModes[0] ? 0 : 1; }

class CpuSplitFusedLowp : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { g_smode = &kSplitModes[GetParam()]; }
};

#define SKIP_WITHOUT_LOWP()                                                                                  \
  if (!g_smode->available())                                                                               \
  GTEST_SKIP() << "this CPU lacks the " << g_smode->name                                                   \
               << " kernel (kBf16: AVX512-BF16; kInt8: the AVX-512 level): it runs the fp32 kernels here " \
                  "(FallbackIsExact checks that)"

/// p with the mode's precision.
AttentionParams lowp(AttentionParams p) {
  p.precision = g_smode->precision;
  return p;
}

std::vector<float> run_codec(const SplitHeads& h, const float* q, const AttentionParams& p, std::size_t ctx,
                             int threads) {
  std::vector<float> got(static_cast<std::size_t>(h.heads()) * h.d, -7.0f);
  cpu::attention_codec(h.fkeys, h.fvalues, h.n, q, h.heads(), p, got.data(), ctx, threads);
  return got;
}

/// The mode's kernel at the AVX-512 level, 1 and 2 threads, against want (p's precision is set to the mode's).
void check_lowp(SplitHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                std::size_t ctx = 0) {
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  h.remake();
  ASSERT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), cpu::CodecAttentionPath::kTqMseSplitFused);
  for (int threads : {1, 2}) {
    const auto got = run_codec(h, q, lowp(p), ctx, threads);
    for (int hh = 0; hh < h.heads(); ++hh) {
      const double e = test::rel_err(got.data() + hh * h.d, want.data() + hh * h.d, h.d);
      g_lowp_worst[mode_index()] = std::max(g_lowp_worst[mode_index()], e);
      g_lowp_sum[mode_index()] += e;
      ++g_lowp_heads[mode_index()];
      ASSERT_LT(e, g_smode->tol) << "threads " << threads << " head " << hh << " window " << p.window << " softcap "
                             << p.softcap << " context " << ctx;
    }
  }
}

}  // namespace

TEST_P(CpuSplitFusedLowp, EveryKeyAndValueWidth) {
  SKIP_WITHOUT_LOWP();
  for (int d : {128, 256, 64})  // both parts in one register (128, 64) or not (256)
    for (double kbits : {1.5, 2.5, 3.5})
      for (double vbits : {1.5, 2.5, 3.5}) {
        SCOPED_TRACE("d " + std::to_string(d) + " kbits " + bits_str(kbits) + " vbits " + bits_str(vbits));
        SplitHeads h(d, 2, 4, 1000, {kbits}, {vbits}, static_cast<std::uint64_t>(10 * kbits + vbits + d));
        const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 5);
        for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_lowp(h, q.data(), p, reference(h, q.data(), p));
        check_lowp(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), 777), 777);
      }
}

TEST_P(CpuSplitFusedLowp, MixedWithIntegerWidths) {
  SKIP_WITHOUT_LOWP();
  for (const Mix& m : kMixes) {
    SCOPED_TRACE(mix_tag(m));
    for (int d : {128, 256}) {
      SplitHeads h(d, 3, 5, 1000, m.k, m.v, 17 + m.k.size() * 3 + static_cast<std::uint64_t>(m.k[0] * 10) + d);
      const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 6);
      for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_lowp(h, q.data(), p, reference(h, q.data(), p));
    }
  }
}

TEST_P(CpuSplitFusedLowp, ShapesLengthsAndGqa) {
  SKIP_WITHOUT_LOWP();
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    double kbits, vbits;
  };
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 1.5, 3.5},    {64, 2, 4, 2, 2.5, 2.5},
                                           {96, 1, 5, 31, 3.5, 1.5},   {96, 2, 7, 65, 2.5, 3.5},
                                           {128, 1, 16, 64, 1.5, 1.5}, {128, 3, 5, 1000, 3.5, 2.5},
                                           {128, 1, 7, 4097, 2.5, 3.5}, {256, 2, 16, 65, 3.5, 3.5},
                                           {256, 1, 4, 1000, 2.5, 1.5}, {256, 2, 1, 31, 1.5, 2.5},
                                           {64, 1, 16, 4097, 3.5, 2.5}, {128, 2, 1, 2, 3.5, 1.5},
                                           {128, 2, 3, 127, 2.5, 2.5},  {128, 1, 9, 129, 1.5, 3.5},
                                           {160, 1, 5, 65, 2.5, 3.5},   {192, 2, 4, 31, 1.5, 2.5},
                                           {512, 1, 4, 65, 3.5, 2.5},   {1024, 1, 2, 31, 2.5, 1.5},
                                           {1024, 1, 3, 200, 3.5, 3.5}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + bits_str(s.kbits) + " vbits " + bits_str(s.vbits));
    SplitHeads h(s.d, s.kvh, s.ratio, s.n, {s.kbits}, {s.vbits}, 7 + s.d + s.n);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_lowp(h, q.data(), p, reference(h, q.data(), p));
    if (s.n > 2) check_lowp(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), s.n - 2), s.n - 2);
  }
}

TEST_P(CpuSplitFusedLowp, AllZeroAndAllOnesCodeBytes) {
  SKIP_WITHOUT_LOWP();
  for (int fill : {0x00, 0xff})
    for (int d : {96, 128, 256})
      for (double kbits : {1.5, 2.5, 3.5}) {
        SCOPED_TRACE("fill " + std::to_string(fill) + " d " + std::to_string(d) + " kbits " + bits_str(kbits));
        SplitHeads h(d, 2, 5, 1000, {kbits}, {5 - kbits}, 3, fill);
        const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
        for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_lowp(h, q.data(), p, reference(h, q.data(), p));
      }
}

TEST_P(CpuSplitFusedLowp, BatchedSequences) {
  SKIP_WITHOUT_LOWP();
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  SplitHeads a(128, 2, 4, 1000, {2.5}, {3.5}, 41), b(128, 2, 4, 65, {1.5}, {2}, 42);
  const auto qa = test::gaussian(8 * 128, 15), qb = test::gaussian(8 * 128, 16);
  const AttentionParams p = lowp(kWindowCap);
  const auto wa = reference(a, qa.data(), p), wb = reference(b, qb.data(), p, 60);
  a.remake(), b.remake();
  std::vector<float> ga(wa.size()), gb(wb.size());
  std::vector<cpu::CodecSequence> seqs(2);
  seqs[0] = {a.fkeys, a.fvalues, a.n, 0, qa.data(), ga.data()};
  seqs[1] = {b.fkeys, b.fvalues, b.n, 60, qb.data(), gb.data()};
  cpu::attention_codec_batched(seqs, 8, p, 2);
  EXPECT_LT(max_err(ga, wa, 8, 128), g_smode->tol);
  EXPECT_LT(max_err(gb, wb, 8, 128), g_smode->tol);
  // The batched call runs the same kernel as the single-sequence one.
  EXPECT_EQ(0, std::memcmp(ga.data(), run_codec(a, qa.data(), p, 0, 2).data(), ga.size() * sizeof(float)));
}

TEST_P(CpuSplitFusedLowp, RandomSweep) {
  // 60 random shapes: head_dim 64 / 128 / 96 / 256, GQA 1..8, 40..4700 tokens, key and value widths from
  // {1.5, 2, 2.5, 3, 3.5} (at least one fractional), per call.
  SKIP_WITHOUT_LOWP();
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  const double widths[] = {1.5, 2.5, 3.5, 2, 3};
  double sum = 0;
  int heads = 0;
  for (int s = 0; s < 60; ++s) {
    const int d = s % 4 == 0 ? 64 : s % 4 == 1 ? 128 : s % 4 == 2 ? 96 : 256;
    const double kb = widths[s % 5], vb = widths[(s / 5) % 3];  // values always fractional
    SplitHeads h(d, 2, 1 + s % 8, 40 + 77 * static_cast<std::size_t>(s), {kb}, {vb}, 1000 + s);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 2000 + s);
    const AttentionParams p = plain(d);
    const auto want = reference(h, q.data(), p);
    const auto got = run_codec(h, q.data(), lowp(p), 0, 1 + s % 2);
    for (int hh = 0; hh < h.heads(); ++hh) {
      const double e = test::rel_err(got.data() + hh * d, want.data() + hh * d, d);
      g_lowp_worst[mode_index()] = std::max(g_lowp_worst[mode_index()], e);
      sum += e;
      ++heads;
      ASSERT_LT(e, g_smode->tol) << "d " << d << " kbits " << kb << " vbits " << vb << " n " << h.n << " head " << hh;
    }
  }
  std::printf("RandomSweep: %d heads, mean relative error %.3g\n", heads, sum / heads);
  EXPECT_LT(sum / heads, g_smode->mean_tol);
}

TEST_P(CpuSplitFusedLowp, DiffersFromFp32) {
  // The bf16 kernel really runs (its result is not the fp32 one) and is close to it.
  SKIP_WITHOUT_LOWP();
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  for (int d : {128, 256}) {
    SplitHeads h(d, 2, 4, 1000, {2.5}, {3.5}, 71);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 19);
    const auto a = run_codec(h, q.data(), plain(d), 0, 2), b = run_codec(h, q.data(), lowp(plain(d)), 0, 2);
    EXPECT_NE(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << d;
    EXPECT_LT(max_err(b, std::vector<double>(a.begin(), a.end()), h.heads(), d), g_smode->tol) << d;
  }
}

TEST_P(CpuSplitFusedLowp, FallbackIsExact) {
  // Below the AVX-512 level (and for kBf16 on a CPU without AVX512-BF16 at any level) the call returns exactly kFp32's
  // result; the default precision is kFp32 and gives the same bits as the explicit value.
  SplitHeads h(128, 2, 4, 1000, {2.5}, {3.5}, 81), m(256, 2, 3, 333, {1.5, 3}, {2, 2.5}, 82);
  for (SplitHeads* x : {&h, &m}) {
    const auto q = test::gaussian(static_cast<std::size_t>(x->heads()) * x->d, 20);
    for (SimdLevel l : available_simd_levels()) {
      ScopedSimdLevel guard(l);
      x->remake();
      AttentionParams p32 = kWindowCap;
      p32.precision = AttentionPrecision::kFp32;
      const auto def = run_codec(*x, q.data(), kWindowCap, 0, 2), a = run_codec(*x, q.data(), p32, 0, 2);
      EXPECT_EQ(0, std::memcmp(def.data(), a.data(), a.size() * sizeof(float))) << simd_level_name(l);
      if (l == SimdLevel::kAvx512 && g_smode->available()) continue;
      const auto b = run_codec(*x, q.data(), lowp(kWindowCap), 0, 2);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << simd_level_name(l);
    }
  }
}

TEST_P(CpuSplitFusedLowp, ToleranceCanFail) {
  // The check is not vacuous: in the mode's kernel, a 10% wrong softmax scale, or each part's fp16 value norm
  // scaled by 1 + 2.5 x the tolerance (bf16: 1.05, int8: 1.125) in the bytes the kernel reads (the reference
  // keeps the original bytes), exceeds the tolerance.
  SKIP_WITHOUT_LOWP();
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  for (int d : {128, 256}) {
    SplitHeads h(d, 2, 4, 1000, {2.5}, {3.5}, 91);
    h.remake();
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 21);
    const AttentionParams p = plain(d);
    const auto want = reference(h, q.data(), p);
    EXPECT_LT(max_err(run_codec(h, q.data(), lowp(p), 0, 2), want, h.heads(), d), g_smode->tol) << d;
    AttentionParams wrong = p;
    wrong.softmax_scale *= 1.1;
    EXPECT_GT(max_err(run_codec(h, q.data(), lowp(wrong), 0, 2), want, h.heads(), d), g_smode->tol) << d;
    for (std::size_t part = 0; part < 2; ++part) {
      auto bytes = h.vb;
      std::vector<cpu::CodecHead> pv = h.fvalues;
      for (int g = 0; g < h.kvh; ++g) {
        const std::size_t cb = (bytes[g].size() - 4 * h.n) / h.n;
        for (std::size_t t = 0; t < h.n; ++t) {
          std::uint8_t* x = bytes[g].data() + h.n * cb + 4 * t + 2 * part;
          store_half(x, half_to_float(static_cast<std::uint16_t>(x[0] | (x[1] << 8))) *
                            static_cast<float>(1 + 2.5 * g_smode->tol));
        }
        pv[g].codes = bytes[g].data();
      }
      std::vector<float> got(want.size());
      cpu::attention_codec(h.fkeys, pv, h.n, q.data(), h.heads(), lowp(p), got.data(), 0, 2);
      const double e = max_err(got, want, h.heads(), d);
      std::printf("%s: d %d value norm of part %zu x %.3f: worst relative error %.3g\n", g_smode->name, d, part,
                  1 + 2.5 * g_smode->tol, e);
      EXPECT_GT(e, g_smode->tol) << d << " part " << part;
    }
  }
}

TEST_P(CpuSplitFusedLowp, WorstErrorSeen) {
  // Like WorstErrorSeen above (0 under ctest, one process per test): the mode's tests' largest and mean error.
  if (g_lowp_heads[mode_index()] > 0)
    std::printf("%s: worst relative error %.3g, mean %.3g over %d head checks (tolerance %.0e, mean %.0e)\n",
                g_smode->name, g_lowp_worst[mode_index()], g_lowp_sum[mode_index()] / g_lowp_heads[mode_index()],
                g_lowp_heads[mode_index()], g_smode->tol, g_smode->mean_tol);
  EXPECT_LT(g_lowp_worst[mode_index()], g_smode->tol);
}

INSTANTIATE_TEST_SUITE_P(Modes, CpuSplitFusedLowp, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(kSplitModes[i.param].name); });

TEST(CpuSplitFusedInt8, PackedHeadsRunTheBf16Kernel) {
  // kInt8 on a job with a packed fractional head (both parts in one register: 64 + 64 channels at head_dim 128)
  // returns exactly kBf16's result where the CPU runs the bf16 kernel (kFp32's without AVX512-BF16); at
  // head_dim 256 (not packed) the int8 kernel runs and differs from both.
  if (detected_simd_level() != SimdLevel::kAvx512) GTEST_SKIP() << "needs the AVX-512 level";
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  for (int d : {128, 256}) {
    SplitHeads h(d, 2, 4, 700, {2.5}, {3.5}, 95);
    h.remake();
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 22);
    AttentionParams p8 = plain(d), pb = plain(d), p32 = plain(d);
    p8.precision = AttentionPrecision::kInt8;
    pb.precision = cpu_has_avx512_bf16() ? AttentionPrecision::kBf16 : AttentionPrecision::kFp32;
    p32.precision = AttentionPrecision::kFp32;
    const auto a = run_codec(h, q.data(), p8, 0, 2), b = run_codec(h, q.data(), pb, 0, 2);
    const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    EXPECT_EQ(d == 128, same) << d;
    if (d == 256) {
      const auto c = run_codec(h, q.data(), p32, 0, 2);
      EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
    }
  }
}

TEST(CpuSplitFusedInt8, AmxMatchesVpdpbusdBitForBit) {
  // With Intel AMX the split int8 kernel's sums are tile products (TURBOKV_AMX=1: every job) of the same
  // integers as vpdpbusd (TURBOKV_AMX=0), so the outputs must match bit for bit, and stay within the int8
  // tolerance of the reference. Fractional keys and values whose parts do not share a register (head_dim 160
  // .. 256), mixed with integer widths, GQA 1..16, partial blocks and passes, window and soft-capping.
  if (detected_simd_level() != SimdLevel::kAvx512 || !cpu_has_amx_int8())
    GTEST_SKIP() << "this CPU (or OS) has no AMX-INT8 tiles for this process: the int8 kernel runs on vpdpbusd only";
  ScopedSimdLevel guard(SimdLevel::kAvx512);
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    std::vector<double> k, v;
  };
  const Shape shapes[] = {{256, 2, 4, 1000, {2.5}, {3.5}},     {256, 1, 16, 65, {3.5}, {1.5}},
                          {160, 1, 5, 31, {2.5}, {3.5}},       {192, 2, 8, 4097, {1.5}, {2.5}},
                          {256, 1, 1, 1, {3.5}, {3.5}},        {256, 2, 7, 129, {2.5, 3}, {4, 1.5}},
                          {192, 1, 12, 333, {1.5}, {2}},       {256, 1, 6, 1000, {4}, {2.5}}};
  int i = 0;
  for (const Shape& s : shapes) {
    SplitHeads h(s.d, s.kvh, s.ratio, s.n, s.k, s.v, 300 + i++);
    h.remake();
    ASSERT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), cpu::CodecAttentionPath::kTqMseSplitFused);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 23 + i);
    for (AttentionParams p : {plain(s.d), kWindowCap}) {
      p.precision = AttentionPrecision::kInt8;
      const auto want = reference(h, q.data(), p);
      for (int threads : {1, 2}) {
        const auto [vnni, amx] = test::vpdpbusd_and_amx([&] { return run_codec(h, q.data(), p, 0, threads); });
        EXPECT_EQ(0, std::memcmp(vnni.data(), amx.data(), vnni.size() * sizeof(float)))
            << "d " << s.d << " ratio " << s.ratio << " n " << s.n << " threads " << threads << " window " << p.window;
        for (int hh = 0; hh < h.heads(); ++hh)
          EXPECT_LT(test::rel_err(amx.data() + hh * h.d, want.data() + hh * h.d, h.d), kSplitModes[1].tol)
              << "d " << s.d << " head " << hh;
      }
    }
  }
}
