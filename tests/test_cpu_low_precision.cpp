// The opt-in low-precision fused TurboQuant-MSE decode attentions against the
// fp64 reference attention_compressed, and the default kFp32 path unchanged by
// them: AttentionPrecision::kBf16 (bf16 dot products,
// src/cpu/tq_mse_bf16_avx512.cpp) and kInt8 (int8 dot products,
// src/cpu/tq_mse_int8_avx512.cpp). Every test runs once per precision
// (CpuLowPrecision/<name>/bf16, /int8) with that precision's tolerances.
//
// Tolerances, relative L2 error per head.
// kBf16: bf16 keeps 8 significant bits: unit roundoff u = 2^-8 = 3.9e-3 (round
// to nearest even). Each product rounds two operands (rotated query and key
// centroid; weight * value norm and value centroid), so one product is off by up
// to 2u(1 + u) = 7.8e-3; fp32 accumulation adds ~1e-7. Over the d (scores) or n
// (values) terms the errors mostly cancel: the mean over heads is ~0.9u (3.5e-3)
// and the tail reaches ~3u (1.2e-2 worst of 1338 random heads in RandomSweep,
// mostly head_dim 64 with 4-bit keys). So 2e-2 (~5u) for any head, and 5e-3 for
// the mean over the sweep.
// kInt8: the rotated query is rounded to 8 bits over its range (step max |q_i| / 127, error up to half a
// step: ~0.5% of the rms coordinate for head_dim 64..128 Gaussian queries, against ~0.1% for bf16), the
// key codebook to 8 bits over its range, the value codebook to 8 bits (max |c| / 127) and the weights
// per pass of 64 tokens to u8 of the pass's largest weight. The query rounding dominates: it moves each
// logit by ~0.7% of the logits' spread, and the output error follows the softmax weights, so it grows with
// how peaked the softmax is. Measured: mean 1.2e-2 and worst 3.4e-2 over the 1338 random heads of
// RandomSweep and the other tests here (softmax scale 1 / sqrt(head_dim)); worst 7.7e-2 in
// test_cpu_split_fused.cpp's cases with softmax scale 0.3 over a 37-token window (logits ~3.4x larger).
// So 1e-1 for any head and 1.5e-2 for the mean over RandomSweep (the tighter guard: a kernel 5% off
// everywhere fails it).
// ToleranceCanFail shows a 10% wrong softmax scale in the same kernel, or a 5%
// wrong output, exceeds each tolerance.
// Tests that need a kernel skip where the CPU lacks it (kBf16: AVX512-BF16; kInt8: the AVX-512
// level). The fractional-width kernel with kBf16 is tested with these tolerances in
// test_cpu_split_fused.cpp (CpuSplitFusedBf16), which also checks that kInt8 runs it there.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "test_util.h"
#include "tq_heads.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

constexpr double kFp32Tol = 1e-5;  // the kFp32 fast path's tolerance (test_cpu_attention.cpp)

/// One low-precision mode under test: its tolerances (see the file comment) and where it runs.
struct Mode {
  AttentionPrecision precision;
  const char* name;
  double tol;       ///< any head
  double mean_tol;  ///< mean over RandomSweep's heads
  /// True where the CPU runs this precision's kernel at the AVX-512 level.
  bool available() const {
    if (detected_simd_level() != SimdLevel::kAvx512) return false;
    return precision != AttentionPrecision::kBf16 || cpu_has_avx512_bf16();
  }
};
const Mode kModes[] = {{AttentionPrecision::kBf16, "bf16", 2e-2, 5e-3},
                       {AttentionPrecision::kInt8, "int8", 1e-1, 1.5e-2}};

double g_worst[2] = {0, 0};  // worst relative error seen per mode (printed when the test program ends)

struct PrintWorst : ::testing::Environment {
  void TearDown() override {
    for (int i = 0; i < 2; ++i)
      if (g_worst[i] > 0)
        std::printf("worst %s relative L2 error per head against attention_compressed: %.3g (tolerance %.0e)\n",
                    kModes[i].name, g_worst[i], kModes[i].tol);
  }
};
[[maybe_unused]] ::testing::Environment* const g_print_worst = ::testing::AddGlobalTestEnvironment(new PrintWorst);

/// The mode under test (set by the fixture) and its worst-error slot.
const Mode* g_mode = &kModes[0];
double& worst_seen() { return g_worst[g_mode == &kModes[0] ? 0 : 1]; }

class CpuLowPrecision : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { g_mode = &kModes[GetParam()]; }
};

#define SKIP_WITHOUT_KERNEL()                                                                               \
  if (!g_mode->available())                                                                               \
  GTEST_SKIP() << "this CPU lacks the " << g_mode->name                                                   \
               << " kernel (kBf16: AVX512-BF16, cpuid leaf 7 subleaf 1 EAX bit 5; kInt8: the AVX-512 level): " \
                  "it runs the fp32 kernels here (FallbackIsExact checks that)"

AttentionParams params_prec(int d, int window, double softcap, AttentionPrecision prec) {
  AttentionParams p;
  p.softmax_scale = 1.0 / std::sqrt(static_cast<double>(d));
  p.window = window;
  p.softcap = softcap;
  p.precision = prec;
  return p;
}

/// The parameters of the mode under test.
AttentionParams params(int d, int window = 0, double softcap = 0) {
  return params_prec(d, window, softcap, g_mode->precision);
}

/// num_kv_heads TurboQuant-MSE heads of keys and values (reference codecs and fast codecs on the same bytes).
struct Case : test::TqMseHeads {
  using TqMseHeads::TqMseHeads;
  std::vector<float> query() const { return test::gaussian(static_cast<std::size_t>(heads()) * d, seed + 5); }
  std::string shape() const {
    return detail::concat("d=", d, " kvh=", kvh, " gqa=", ratio, " n=", n, " kbits=", kbits, " vbits=", vbits,
                          " seed=", seed);
  }
  std::vector<double> reference(const AttentionParams& p, std::size_t context = 0) const {
    const auto q = query();
    std::vector<double> want(q.size());
    attention_compressed(keys, values, n, q.data(), heads(), p, want.data(), nullptr, context);
    return want;
  }
  std::vector<float> fast(const AttentionParams& p, std::size_t context = 0, int threads = 1) const {
    const auto q = query();
    std::vector<float> got(q.size(), NAN);
    cpu::attention_tq_mse(fkeys, fvalues, n, q.data(), heads(), p, got.data(), context, threads);
    return got;
  }
  /// Worst per-head relative L2 error of `got` against `want`.
  double worst(const std::vector<float>& got, const std::vector<double>& want) const {
    double e = 0;
    for (int h = 0; h < heads(); ++h) e = std::max(e, test::rel_err(got.data() + h * d, want.data() + h * d, d));
    return e;
  }
  /// The mode's kernel against the reference, 1 and 2 threads, at the AVX-512 level.
  void check(const AttentionParams& p, std::size_t context = 0) {
    ScopedSimdLevel lvl(SimdLevel::kAvx512);
    const auto want = reference(p, context);
    for (int threads : {1, 2}) {
      const double e = worst(fast(p, context, threads), want);
      worst_seen() = std::max(worst_seen(), e);
      ASSERT_LT(e, g_mode->tol) << shape() << " threads=" << threads << " context=" << context << " window=" << p.window
                             << " softcap=" << p.softcap;
    }
  }
};

}  // namespace

TEST_P(CpuLowPrecision, Lengths) {
  SKIP_WITHOUT_KERNEL();
  const int bits[][2] = {{4, 4}, {3, 2}, {2, 4}, {1, 3}, {4, 1}, {3, 3}, {2, 2}};
  const std::size_t lens[] = {1, 2, 31, 64, 65, 1000, 4097};
  for (int i = 0; i < 7; ++i) {
    Case c(128, 2, 4, lens[i], bits[i][0], bits[i][1], 40 + i);
    c.check(params(128));
  }
}

TEST_P(CpuLowPrecision, HeadDims) {
  SKIP_WITHOUT_KERNEL();
  int i = 0;
  for (int d : {16, 64, 80, 96, 112, 128, 144, 256, 400, 512}) {  // 144, 400: a partial second group vector
    Case c(d, 2, 4, 300 + 33 * i, 1 + i % 4, 4 - i % 4, 60 + i);
    c.check(params(d));
    ++i;
  }
}

TEST_P(CpuLowPrecision, GqaRatios) {
  SKIP_WITHOUT_KERNEL();
  for (int ratio : {1, 2, 3, 4, 5, 8, 9, 16, 24}) {  // 24: two jobs of 16 and 8 heads per KV head
    Case c(128, 2, ratio, 257 + 31 * ratio, 1 + ratio % 4, 1 + (ratio / 4) % 4, 80 + ratio);
    c.check(params(128));
  }
}

TEST_P(CpuLowPrecision, SixteenHeadsAtHeadDim512) {
  // The largest job: 16 query heads a KV head at head_dim 512 (every query-head and group buffer full).
  SKIP_WITHOUT_KERNEL();
  Case c(512, 1, 16, 300, 3, 4, 90);
  c.check(params(512));
  c.check(params(512, 40, 4.0));
}

TEST_P(CpuLowPrecision, AllWidths) {
  SKIP_WITHOUT_KERNEL();
  for (int kb = 1; kb <= 4; ++kb)
    for (int vb = 1; vb <= 4; ++vb)
      for (std::size_t n : {65, 1000}) {
        Case c(kb % 2 ? 64 : 128, 2, 4, n, kb, vb, 100 + 4 * kb + vb);
        c.check(params(c.d));
      }
}

TEST_P(CpuLowPrecision, WindowSoftcapContext) {
  SKIP_WITHOUT_KERNEL();
  Case c(128, 2, 4, 4097, 4, 3, 101);
  c.check(params(128, 100));
  c.check(params(128, 0, 5.0));
  c.check(params(128), 333);
  c.check(params(128, 50, 3.0), 421);
  c.check(params(128, 5000));  // window longer than the sequence
  Case c2(256, 1, 5, 1000, 2, 2, 102);
  c2.check(params(256, 77, 2.0), 999);
}

TEST_P(CpuLowPrecision, AllZeroAndAllMaxCodes) {
  SKIP_WITHOUT_KERNEL();
  for (int bits = 1; bits <= 4; ++bits)
    for (int fill : {0x00, 0xFF}) {
      Case c(bits % 2 ? 96 : 128, 2, 4, 97, bits, 5 - bits, 200 + bits, fill);
      c.check(params(c.d));
    }
}

TEST_P(CpuLowPrecision, BatchedAndCodecPath) {
  SKIP_WITHOUT_KERNEL();
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  const std::size_t lens[] = {1, 1000, 65, 4097, 31};
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < 5; ++i) cases.push_back(std::make_unique<Case>(128, 2, 4, lens[i], 4 - i % 3, 2 + i % 3, 300 + i));
  const int H = 8, d = 128;
  const AttentionParams p = params(d);
  std::vector<std::vector<float>> qs, outs(cases.size(), std::vector<float>(H * d, NAN));
  std::vector<cpu::TqSequence> seqs;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    qs.push_back(cases[i]->query());
    seqs.push_back({cases[i]->fkeys, cases[i]->fvalues, cases[i]->n, 0, qs[i].data(), outs[i].data()});
  }
  cpu::attention_tq_mse_batched(seqs, H, p, 2);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double e = cases[i]->worst(outs[i], cases[i]->reference(p));
    worst_seen() = std::max(worst_seen(), e);
    EXPECT_LT(e, g_mode->tol) << "batched " << cases[i]->shape();
  }
  // attention_codec takes the fused kernels when every head is TurboQuant-MSE: precision reaches them.
  const Case& c = *cases[3];
  std::vector<std::unique_ptr<Codec>> refs;
  std::vector<std::unique_ptr<cpu::CpuCodec>> codecs;
  std::vector<cpu::CodecHead> keys, values;
  for (int g = 0; g < c.kvh; ++g) {
    codecs.push_back(cpu::make_cpu_codec(*c.rk[g]));
    keys.push_back({codecs.back().get(), c.kb[g].data()});
    codecs.push_back(cpu::make_cpu_codec(*c.rv[g]));
    values.push_back({codecs.back().get(), c.vb[g].data()});
  }
  const auto q = c.query();
  std::vector<float> got(q.size()), fused(q.size());
  cpu::attention_codec(keys, values, c.n, q.data(), H, p, got.data(), 0, 1);
  cpu::attention_tq_mse(c.fkeys, c.fvalues, c.n, q.data(), H, p, fused.data(), 0, 1);
  EXPECT_EQ(0, std::memcmp(got.data(), fused.data(), got.size() * sizeof(float)))
      << "attention_codec with " << g_mode->name << " must run the fused " << g_mode->name << " kernel";
  EXPECT_LT(c.worst(got, c.reference(p)), g_mode->tol);
}

TEST_P(CpuLowPrecision, RandomSweep) {
  // 150 random shapes (head_dim 64 / 80 / 128, GQA 1..8, 50..5563 tokens, every key/value width pair).
  SKIP_WITHOUT_KERNEL();
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  double sum = 0;
  int heads = 0;
  for (int s = 0; s < 150; ++s) {
    const int d = s % 3 == 0 ? 64 : s % 3 == 1 ? 128 : 80;
    Case c(d, 2, 1 + s % 8, 50 + 37 * static_cast<std::size_t>(s), 1 + s % 4, 1 + (s / 4) % 4, 1000 + s);
    const AttentionParams p = params(d);
    const auto want = c.reference(p);
    const auto got = c.fast(p, 0, 1 + s % 2);
    for (int h = 0; h < c.heads(); ++h) {
      const double e = test::rel_err(got.data() + h * d, want.data() + h * d, d);
      worst_seen() = std::max(worst_seen(), e);
      sum += e;
      ++heads;
      ASSERT_LT(e, g_mode->tol) << c.shape() << " head " << h;
    }
  }
  std::printf("RandomSweep: %d heads, mean relative error %.3g\n", heads, sum / heads);
  EXPECT_LT(sum / heads, g_mode->mean_tol);
}

TEST_P(CpuLowPrecision, DiffersFromFp32) {
  // The low-precision kernel really runs (its result is not the fp32 one) and is close to it.
  SKIP_WITHOUT_KERNEL();
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  Case c(128, 2, 4, 1000, 3, 3, 400);
  const auto a = c.fast(params_prec(128, 0, 0, AttentionPrecision::kFp32));
  const auto b = c.fast(params(128));
  EXPECT_NE(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  std::vector<double> ad(a.begin(), a.end());
  EXPECT_LT(c.worst(b, ad), g_mode->tol);
}

TEST(CpuLowPrecisionCommon, Fp32Unchanged) {
  // The default (kFp32) path: within the fp32 tolerance of the reference at every level, and the explicit
  // kFp32 value is bit-identical to the default-constructed precision.
  for (int i = 0; i < 4; ++i) {
    Case c(i % 2 ? 64 : 128, 2, 1 + 3 * i, 65 + 500 * i, 1 + i, 4 - i, 500 + i);
    AttentionParams def;
    def.softmax_scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    EXPECT_EQ(def.precision, AttentionPrecision::kFp32);
    const auto want = c.reference(def);
    for (SimdLevel l : available_simd_levels()) {
      ScopedSimdLevel g(l);
      for (int threads : {1, 2}) {
        const auto a = c.fast(def, 0, threads);
        const auto b = c.fast(params_prec(c.d, 0, 0, AttentionPrecision::kFp32), 0, threads);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << c.shape();
        EXPECT_LT(c.worst(a, want), kFp32Tol) << c.shape() << " level=" << simd_level_name(l);
      }
    }
  }
}

TEST_P(CpuLowPrecision, FallbackIsExact) {
  // Below the AVX-512 level (and for kBf16 on a CPU without AVX512-BF16 at any level) the call returns
  // exactly kFp32's result.
  Case c(128, 2, 4, 1000, 4, 2, 600);
  for (SimdLevel l : available_simd_levels()) {
    if (l == SimdLevel::kAvx512 && g_mode->available()) continue;
    ScopedSimdLevel g(l);
    const auto a = c.fast(params_prec(128, 0, 0, AttentionPrecision::kFp32), 0, 2);
    const auto b = c.fast(params(128), 0, 2);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << simd_level_name(l);
  }
}

TEST_P(CpuLowPrecision, ToleranceCanFail) {
  // The check is not vacuous: a 10% wrong softmax scale in the same kernel, or an output 2.5x the tolerance
  // off (5% for kBf16, 12.5% for kInt8), exceeds it.
  SKIP_WITHOUT_KERNEL();
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  Case c(128, 2, 4, 1000, 4, 4, 700);
  const AttentionParams p = params(128);
  const auto want = c.reference(p);
  AttentionParams wrong = p;
  wrong.softmax_scale *= 1.1;
  EXPECT_GT(c.worst(c.fast(wrong), want), g_mode->tol);
  auto got = c.fast(p);
  EXPECT_LT(c.worst(got, want), g_mode->tol);
  for (auto& x : got) x *= static_cast<float>(1 + 2.5 * g_mode->tol);
  EXPECT_GT(c.worst(got, want), g_mode->tol);
}

// kInt8 with Intel AMX (cpu_has_amx_int8(); src/cpu/tq_mse_int8_avx512.cpp): the tile products sum the same
// u8 x s8 integers as vpdpbusd, so TURBOKV_AMX=1 (tiles for every job) must give the vpdpbusd path's
// (TURBOKV_AMX=0) output bit for bit, and both stay within the int8 tolerance of the fp64 reference. Shapes
// cover both key and value tile layouts: head_dim 16..512 (1..8 key chunks of 64 coordinates, a partial last
// chunk at 80 / 96 / 112 / 144 / 400, two value group vectors past 128), GQA 1..16 (tile rows), lengths 1..4097
// (partial blocks and passes), every width pair, window, soft-capping, a context, 1 and 2 threads.
TEST(CpuLowPrecisionCommon, Int8AmxMatchesVpdpbusdBitForBit) {
  if (detected_simd_level() != SimdLevel::kAvx512 || !cpu_has_amx_int8())
    GTEST_SKIP() << "this CPU (or OS) has no AMX-INT8 tiles for this process: the int8 kernel runs on vpdpbusd only";
  ScopedSimdLevel lvl(SimdLevel::kAvx512);
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits, window;
    double softcap;
    std::size_t context;
  };
  const Shape shapes[] = {
      {128, 2, 4, 1000, 4, 4, 0, 0, 0},   {128, 1, 5, 1, 3, 2, 0, 0, 0},     {128, 2, 8, 65, 2, 4, 0, 0, 0},
      {64, 2, 16, 4097, 1, 3, 0, 0, 0},   {64, 1, 1, 31, 4, 1, 0, 0, 0},     {80, 1, 6, 64, 3, 3, 0, 0, 0},
      {96, 2, 7, 2, 2, 2, 0, 0, 0},       {112, 1, 3, 1000, 1, 4, 0, 0, 0},  {144, 1, 9, 333, 4, 2, 0, 0, 0},
      {256, 1, 16, 300, 3, 4, 0, 0, 0},   {400, 1, 2, 129, 2, 3, 0, 0, 0},   {512, 1, 16, 100, 4, 4, 0, 0, 0},
      {16, 1, 12, 77, 3, 1, 0, 0, 0},     {128, 2, 8, 4097, 4, 3, 100, 0, 0}, {128, 1, 6, 1000, 2, 2, 0, 5.0, 0},
      {128, 1, 10, 1000, 3, 4, 50, 3.0, 421}, {256, 2, 5, 999, 1, 1, 77, 2.0, 0}};
  int i = 0;
  for (const Shape& sh : shapes) {
    Case c(sh.d, sh.kvh, sh.ratio, sh.n, sh.kbits, sh.vbits, 900 + i++);
    const AttentionParams p = params_prec(sh.d, sh.window, sh.softcap, AttentionPrecision::kInt8);
    const auto want = c.reference(p, sh.context);
    for (int threads : {1, 2}) {
      const auto [vnni, amx] = test::vpdpbusd_and_amx([&] { return c.fast(p, sh.context, threads); });
      EXPECT_EQ(0, std::memcmp(vnni.data(), amx.data(), vnni.size() * sizeof(float)))
          << c.shape() << " threads=" << threads << " window=" << sh.window << " softcap=" << sh.softcap;
      EXPECT_LT(c.worst(amx, want), kModes[1].tol) << c.shape() << " threads=" << threads;
    }
  }
}

TEST(CpuLowPrecisionCommon, Int8AmxDecision) {
  // int8_uses_amx: never without AMX tiles; TURBOKV_AMX=0 never, =1 always (where the CPU has them); any other
  // value (or none) the default rule, GQA jobs of 5..16 query heads at head_dim <= 128.
  const bool has = cpu_has_amx_int8();
  {
    test::EnvGuard env("TURBOKV_AMX", "0");
    for (int g : {1, 5, 16})
      for (int d : {64, 128, 512}) EXPECT_FALSE(int8_uses_amx(g, d)) << g << " " << d;
  }
  {
    test::EnvGuard env("TURBOKV_AMX", "1");
    EXPECT_EQ(has, int8_uses_amx(1, 512));
    EXPECT_EQ(has, int8_uses_amx(4, 128));
  }
  test::EnvGuard env("TURBOKV_AMX", "auto");
  EXPECT_EQ(has, int8_uses_amx(5, 128));
  EXPECT_EQ(has, int8_uses_amx(16, 64));
  EXPECT_FALSE(int8_uses_amx(4, 128));
  EXPECT_FALSE(int8_uses_amx(16, 144));
  EXPECT_FALSE(int8_uses_amx(8, 256));
}

TEST(CpuLowPrecisionCommon, InvalidPrecisionRejected) {
  Case c(64, 1, 2, 10, 2, 2, 800);
  AttentionParams p = params(64);
  p.precision = static_cast<AttentionPrecision>(7);
  const auto q = c.query();
  std::vector<float> out(q.size());
  EXPECT_THROW(cpu::attention_tq_mse(c.fkeys, c.fvalues, c.n, q.data(), c.heads(), p, out.data()),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Modes, CpuLowPrecision, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(kModes[i.param].name); });
