// The CPU fast paths of the three vector quantizers (turbokv/cpu_codec.h) —
// two-stage residual scalar VQ (rvq), product VQ with smoothing + Hadamard
// (pvq, VecInfer-style) and PolarQuant (polar) — against their scalar
// references (src/ref/), at every SIMD level this CPU has:
//   - encoded bytes identical (fp32 and fp16 input, unaligned pointers);
//   - decoded floats identical;
//   - scores and value accumulation within kTol relative (fp32 vs fp64),
//     including blocks whose code bytes are all 0x00 or all 0xff;
//   - attention_codec within kTol of attention_compressed for GQA ratios 1..16
//     (the codec-domain path: domain_size() > 0 at SIMD levels);
//   - the codec-domain contract (domain_size / decode_domain) of rvq, pvq, polar
//     and fractional TurboQuant-MSE, and the latter's fused attention;
//   - PolarQuant at every head_dim multiple of 16 in 64..272 and 320..1024 samples (encode and decode bit for bit, scores, domain);
//   - the fast codec really is the SIMD one at AVX2 / AVX-512 (isa()).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

constexpr double kTol = 1e-5;

struct Case {
  Method method;
  int bits;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {{Method::kRvq, 1},   {Method::kRvq, 2},   {Method::kRvq, 3},
                                      {Method::kRvq, 4},   {Method::kPvq, 1},   {Method::kPvq, 2},
                                      {Method::kPvq, 3},   {Method::kPvq, 4},   {Method::kPolar, 2},
                                      {Method::kPolar, 3}, {Method::kPolar, 4}};
  return c;
}

std::string name(const Case& c, int d) {
  return std::string(method_name(c.method)) + " bits " + std::to_string(c.bits) + " d " + std::to_string(d);
}

std::vector<float> data_with_outlier(std::size_t n, int d, std::uint64_t seed) {
  auto x = test::gaussian(n * d, seed);
  for (std::size_t t = 0; t < n; ++t) x[t * d + 1] = x[t * d + 1] * 5 + 2;
  return x;
}

std::unique_ptr<Codec> make_ref(const Case& c, int d, std::uint64_t seed, RotationKind rot = RotationKind::kHadamard) {
  CodecConfig cfg;
  cfg.method = c.method;
  cfg.bits = c.bits;
  cfg.head_dim = d;
  cfg.seed = seed;
  cfg.rotation = rot;
  auto codec = make_codec(cfg);
  if (codec->needs_calibration()) {
    const auto cal = data_with_outlier(512, d, seed ^ 0xca11);
    codec->calibrate(cal.data(), 512);
  }
  return codec;
}

/// Levels other than scalar must get the SIMD codec of that level.
void expect_simd(const cpu::CpuCodec& fast, SimdLevel lvl) {
  if (lvl == SimdLevel::kScalar) return;
  EXPECT_STREQ(fast.isa(), simd_level_name(lvl));
}

/// Scores and accumulation of block `codes` (n tokens) over [t0, t1) against the reference.
void check_scores_accumulate(const Codec& ref, const cpu::CpuCodec& fast, const std::uint8_t* codes, std::size_t n,
                             std::size_t t0, std::size_t t1, std::uint64_t seed) {
  const int d = ref.head_dim();
  const auto q = test::gaussian(static_cast<std::size_t>(d), seed);
  std::vector<double> rs(ref.query_state_size());
  std::vector<float> fs(fast.query_state_size());
  ref.prepare_query(q.data(), rs.data());
  fast.prepare_query(q.data(), fs.data());
  std::vector<double> sw(t1 - t0);
  std::vector<float> sg(t1 - t0 + 1, -7.0f);
  ref.scores(rs.data(), codes, n, t0, t1, sw.data());
  fast.scores(fs.data(), codes, n, t0, t1, sg.data());
  ASSERT_EQ(sg[t1 - t0], -7.0f) << "scores wrote past t1 - t0";
  // Relative to the Cauchy-Schwarz bound ||q|| ||x_hat_t|| of the score (a
  // score that nearly cancels has no meaningful relative error of its own).
  std::vector<float> xh(n * static_cast<std::size_t>(d));
  ref.decode(codes, n, xh.data());
  double qn = 0;
  for (float v : q) qn += double(v) * v;
  for (std::size_t i = 0; i < sw.size(); ++i) {
    double xn = 0;
    for (int j = 0; j < d; ++j) xn += double(xh[(t0 + i) * d + j]) * xh[(t0 + i) * d + j];
    ASSERT_NEAR(sg[i], sw[i], kTol * std::sqrt(qn * xn) + 1e-30) << "score of token " << t0 + i;
  }
  // Softmax-like positive weights (no cancellation), one of them zero.
  std::vector<float> w(t1 - t0);
  Rng rng(seed + 1);
  for (auto& v : w) v = static_cast<float>(rng.uniform());
  if (!w.empty()) w[0] = 0;
  std::vector<double> wd(w.begin(), w.end()), aw(ref.accumulator_size(), 0.0), ow(d);
  std::vector<float> ag(fast.accumulator_size(), 0.0f), og(d);
  ref.accumulate(codes, n, t0, t1, wd.data(), aw.data());
  fast.accumulate(codes, n, t0, t1, w.data(), ag.data());
  ref.finalize(aw.data(), ow.data());
  fast.finalize(ag.data(), 1.0, og.data());
  double nrm = 0;
  for (double v : ow) nrm += v * v;
  if (nrm > 0)
    ASSERT_LE(test::rel_err(og.data(), ow.data(), d), kTol) << "finalized accumulation";
  else
    for (int i = 0; i < d; ++i) ASSERT_EQ(og[i], 0.0f);
}

}  // namespace

TEST(CpuVq, EncodeDecodeScoresMatchTheReference) {
  int simd_checked = 0;
  for (const Case& c : cases()) {
    for (int d : {64, 80, 96, 112, 128, 256}) {
      auto ref = make_ref(c, d, 31 + d);
      for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{31}, std::size_t{64}, std::size_t{65},
                            std::size_t{1000}, std::size_t{4097}}) {
        SCOPED_TRACE(name(c, d) + " n " + std::to_string(n));
        const std::size_t nd = n * static_cast<std::size_t>(d), bytes = ref->encoded_bytes(n);
        // Unaligned buffers: inputs and outputs one element / byte past an aligned start.
        std::vector<float> xbuf(nd + 1);
        const auto x0 = data_with_outlier(n, d, 1000 + n + d);
        std::copy(x0.begin(), x0.end(), xbuf.begin() + 1);
        const float* x = xbuf.data() + 1;
        std::vector<std::uint8_t> want(bytes);
        ref->encode(x, n, want.data());
        std::vector<float> dw(nd);
        ref->decode(want.data(), n, dw.data());
        std::vector<std::uint16_t> x16(nd + 1);
        std::vector<float> xr16(nd);
        for (std::size_t i = 0; i < nd; ++i) {
          x16[i + 1] = float_to_half(x[i]);
          xr16[i] = half_to_float(x16[i + 1]);
        }
        std::vector<std::uint8_t> want16(bytes);
        ref->encode(xr16.data(), n, want16.data());

        for (SimdLevel lvl : available_simd_levels()) {
          ScopedSimdLevel guard(lvl);
          SCOPED_TRACE(simd_level_name(lvl));
          auto fast = cpu::make_cpu_codec(*ref);
          expect_simd(*fast, lvl);
          if (lvl != SimdLevel::kScalar) ++simd_checked;
          std::vector<std::uint8_t> got(bytes + 1, 0xee);
          fast->encode(x, n, got.data() + 1, 2);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data() + 1, bytes)) << "encoded bytes differ";
          ASSERT_EQ(got[0], 0xee) << "encode wrote before out";
          if (n <= 1000) {
            fast->encode(x16.data() + 1, cpu::DType::kF16, n, got.data() + 1, 2);
            ASSERT_EQ(0, std::memcmp(want16.data(), got.data() + 1, bytes)) << "fp16 input: bytes differ";
          }
          std::vector<float> dg(nd + 2, -7.0f);
          fast->decode(want.data(), n, dg.data() + 1, 2);
          ASSERT_EQ(0, std::memcmp(dw.data(), dg.data() + 1, nd * sizeof(float))) << "decoded floats differ";
          ASSERT_EQ(dg[nd + 1], -7.0f) << "decode wrote past the end";
          check_scores_accumulate(*ref, *fast, want.data(), n, n / 3, n, 77 + n);
          check_scores_accumulate(*ref, *fast, want.data(), n, 0, (n + 1) / 2, 78 + n);
        }
      }
    }
  }
  if (available_simd_levels().size() > 1) {
    EXPECT_GT(simd_checked, 0);
  }
}

TEST(CpuVq, RvqOtherRotationsMatchTheReference) {
  for (RotationKind rot : {RotationKind::kNone, RotationKind::kHaar}) {
    for (int bits : {1, 3, 4}) {
      const Case c{Method::kRvq, bits};
      for (int d : {64, 96}) {
        SCOPED_TRACE(name(c, d) + " rotation " + rotation_name(rot));
        auto ref = make_ref(c, d, 5, rot);
        const std::size_t n = 65;
        const auto x = data_with_outlier(n, d, 9);
        std::vector<std::uint8_t> want(ref->encoded_bytes(n)), got(want.size());
        ref->encode(x.data(), n, want.data());
        std::vector<float> dw(n * d), dg(n * d);
        ref->decode(want.data(), n, dw.data());
        for (SimdLevel lvl : available_simd_levels()) {
          ScopedSimdLevel guard(lvl);
          auto fast = cpu::make_cpu_codec(*ref);
          expect_simd(*fast, lvl);
          fast->encode(x.data(), n, got.data());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << simd_level_name(lvl);
          fast->decode(want.data(), n, dg.data());
          ASSERT_EQ(0, std::memcmp(dw.data(), dg.data(), dw.size() * sizeof(float))) << simd_level_name(lvl);
          check_scores_accumulate(*ref, *fast, want.data(), n, 3, n, 11);
        }
      }
    }
  }
}

TEST(CpuVq, AllZeroAndAllOnesCodeBytes) {
  for (const Case& c : cases()) {
    for (int d : {64, 80, 128}) {
      auto ref = make_ref(c, d, 7);
      const std::size_t n = 65, bytes = ref->encoded_bytes(n);
      // The code section of a block is its first n * code_bytes bytes; the rest are fp16 scalars.
      const std::size_t scal = c.method == Method::kRvq ? 1 : c.method == Method::kPolar ? d / 16 : 0;
      const std::size_t code_bytes = (bytes - 2 * scal * n) / n;
      for (std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xff}}) {
        SCOPED_TRACE(name(c, d) + " fill " + std::to_string(fill));
        std::vector<std::uint8_t> block(bytes, fill);
        for (std::size_t i = 0; i < n * scal; ++i)  // finite scalars: 0.5 .. 2
          store_half(block.data() + n * code_bytes + 2 * i, 0.5f + static_cast<float>(i % 7) * 0.25f);
        std::vector<float> dw(n * d), dg(n * d);
        ref->decode(block.data(), n, dw.data());
        for (SimdLevel lvl : available_simd_levels()) {
          ScopedSimdLevel guard(lvl);
          SCOPED_TRACE(simd_level_name(lvl));
          auto fast = cpu::make_cpu_codec(*ref);
          expect_simd(*fast, lvl);
          fast->decode(block.data(), n, dg.data());
          ASSERT_EQ(0, std::memcmp(dw.data(), dg.data(), dw.size() * sizeof(float))) << "decoded floats differ";
          check_scores_accumulate(*ref, *fast, block.data(), n, 0, n, 3);
          check_scores_accumulate(*ref, *fast, block.data(), n, 17, 18, 4);
        }
      }
    }
  }
}

TEST(CpuVq, FusedAttentionMatchesReferenceForEveryGqaRatio) {
  for (const Case& c : cases()) {
    // head_dim 64..256 with lengths 1, 2, 31, 64, 65, 300 (1000 and 4097 tokens: CpuCodec.FusedAttentionMatchesReference,
    // test_cpu_codec.cpp).
    for (auto [d, n] : std::vector<std::pair<int, std::size_t>>{
             {128, 300}, {96, 65}, {64, 1}, {80, 31}, {112, 2}, {256, 64}}) {
      const int kvh = 2;
      std::vector<std::unique_ptr<Codec>> rk, rv;
      std::vector<std::vector<std::uint8_t>> kb, vb;
      std::vector<EncodedHead> keys, values;
      for (int g = 0; g < kvh; ++g) {
        rk.push_back(make_ref(c, d, 100 + g));
        rv.push_back(make_ref(c, d, 200 + g));
        const auto k = data_with_outlier(n, d, 300 + g), v = test::gaussian(n * d, 400 + g);
        kb.emplace_back(rk[g]->encoded_bytes(n));
        vb.emplace_back(rv[g]->encoded_bytes(n));
        rk[g]->encode(k.data(), n, kb[g].data());
        rv[g]->encode(v.data(), n, vb[g].data());
        keys.push_back({rk[g].get(), kb[g].data()});
        values.push_back({rv[g].get(), vb[g].data()});
      }
      for (SimdLevel lvl : available_simd_levels()) {
        ScopedSimdLevel guard(lvl);
        std::vector<std::unique_ptr<cpu::CpuCodec>> fk, fv;
        std::vector<cpu::CodecHead> fkeys, fvalues;
        for (int g = 0; g < kvh; ++g) {
          fk.push_back(cpu::make_cpu_codec(*rk[g]));
          fv.push_back(cpu::make_cpu_codec(*rv[g]));
          expect_simd(*fk.back(), lvl);
          if (lvl != SimdLevel::kScalar) {  // the codec domain (RVQ heads take the fused kernel instead)
            EXPECT_GT(fk.back()->domain_size(), 0u);
            EXPECT_GT(fv.back()->domain_size(), 0u);
          }
          fkeys.push_back({fk[g].get(), kb[g].data()});
          fvalues.push_back({fv[g].get(), vb[g].data()});
        }
        for (int ratio = 1; ratio <= 16; ++ratio) {
          SCOPED_TRACE(name(c, d) + " n " + std::to_string(n) + " gqa " + std::to_string(ratio) + " " +
                       simd_level_name(lvl));
          const int heads = kvh * ratio;
          const auto q = test::gaussian(static_cast<std::size_t>(heads) * d, 9 + ratio);
          const AttentionParams p = ratio % 2 ? AttentionParams{1.0 / std::sqrt(d), 0, 0}
                                              : AttentionParams{0.3, 37, 20.0};
          std::vector<double> want(static_cast<std::size_t>(heads) * d);
          std::vector<float> got(want.size());
          attention_compressed(keys, values, n, q.data(), heads, p, want.data());
          cpu::attention_codec(fkeys, fvalues, n, q.data(), heads, p, got.data(), 0, 2);
          for (int h = 0; h < heads; ++h)
            ASSERT_LE(test::rel_err(got.data() + h * d, want.data() + h * d, d), kTol) << "head " << h;
        }
      }
    }
  }
}

// ------------------------------------------------------------ codec domain
// CpuCodec::domain_size() / decode_domain() (turbokv/cpu_codec.h) of rvq, pvq,
// polar and fractional TurboQuant-MSE: the fast codecs claim a domain at every
// SIMD level, and its vectors y_t satisfy the contract directly.

namespace {

struct DomCase {
  Method method;
  double bits;
};

const std::vector<DomCase>& dom_cases() {
  static const std::vector<DomCase> c = [] {
    std::vector<DomCase> v;
    for (const Case& k : cases()) v.push_back({k.method, static_cast<double>(k.bits)});
    for (double b : {1.5, 2.5, 3.5}) v.push_back({Method::kTurboMse, b});
    return v;
  }();
  return c;
}

std::string dom_name(const DomCase& c, int d) {
  return std::string(method_name(c.method)) + " bits " + std::to_string(c.bits) + " d " + std::to_string(d);
}

std::unique_ptr<Codec> make_dom_ref(const DomCase& c, int d, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = c.method;
  cfg.bits = c.bits;
  cfg.head_dim = d;
  cfg.seed = seed;
  auto codec = make_codec(cfg);
  if (codec->needs_calibration()) {
    const auto cal = data_with_outlier(512, d, seed ^ 0xca11);
    codec->calibrate(cal.data(), 512);
  }
  return codec;
}

/// The contract over tokens [t0, t1) of an n-token block: scores == <state[0, D), y_t>,
/// accumulate == sum w_t y_t (1e-5 relative), y beyond the range untouched, and y the
/// reconstruction: finalize(sum w_t y_t) == sum w_t decode_t.
void check_domain(const Codec& ref, const cpu::CpuCodec& fast, const std::uint8_t* codes, std::size_t n,
                  std::size_t t0, std::size_t t1, std::uint64_t seed) {
  const int d = ref.head_dim();
  const std::size_t D = fast.domain_size(), m = t1 - t0;
  ASSERT_GT(D, 0u) << "no codec domain";
  ASSERT_EQ(fast.accumulator_size(), D);
  ASSERT_GE(fast.query_state_size(), D);
  std::vector<float> y(m * D + 8, -7.0f);
  fast.decode_domain(codes, n, t0, t1, y.data());
  for (std::size_t i = m * D; i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "decode_domain wrote past the range";
  for (std::size_t i = 0; i < m * D; ++i) ASSERT_TRUE(std::isfinite(y[i])) << "y entry " << i;
  std::vector<float> xh(n * static_cast<std::size_t>(d));
  ref.decode(codes, n, xh.data());
  for (int rep = 0; rep < 3; ++rep) {
    const auto q = test::gaussian(static_cast<std::size_t>(d), seed + 10 * rep, rep == 2 ? 30.0f : 1.0f);
    std::vector<float> st(fast.query_state_size());
    fast.prepare_query(q.data(), st.data());
    std::vector<float> sc(m + 1, -7.0f);
    fast.scores(st.data(), codes, n, t0, t1, sc.data());
    double sn = 0;
    for (std::size_t i = 0; i < D; ++i) sn += double(st[i]) * st[i];
    for (std::size_t t = 0; t < m; ++t) {
      double dot = 0, yn = 0;
      for (std::size_t i = 0; i < D; ++i) {
        dot += double(st[i]) * y[t * D + i];
        yn += double(y[t * D + i]) * y[t * D + i];
      }
      ASSERT_NEAR(sc[t], dot, kTol * std::sqrt(sn * yn) + 1e-30) << "score vs <state, y_t>, token " << t0 + t;
    }
  }
  std::vector<float> w(m);
  Rng rng(seed + 3);
  for (auto& v : w) v = static_cast<float>(rng.uniform());
  if (m > 1) w[1] = 0;
  std::vector<float> acc(D, 0.0f), acc_y(D, 0.0f);
  std::vector<double> want(D, 0.0), xw(d, 0.0);
  fast.accumulate(codes, n, t0, t1, w.data(), acc.data());
  for (std::size_t t = 0; t < m; ++t) {
    for (std::size_t i = 0; i < D; ++i) {
      want[i] += double(w[t]) * y[t * D + i];
      acc_y[i] += w[t] * y[t * D + i];
    }
    for (int j = 0; j < d; ++j) xw[j] += double(w[t]) * xh[(t0 + t) * d + j];
  }
  double wn = 0;
  for (double v : want) wn += v * v;
  if (wn > 0)
    ASSERT_LE(test::rel_err(acc.data(), want.data(), D), kTol) << "accumulate vs sum w y";
  else
    for (std::size_t i = 0; i < D; ++i) ASSERT_EQ(acc[i], 0.0f);
  std::vector<float> out(d);
  fast.finalize(acc_y.data(), 1.0, out.data());
  double xn = 0;
  for (double v : xw) xn += v * v;
  if (xn > 0) {
    ASSERT_LE(test::rel_err(out.data(), xw.data(), d), kTol) << "finalize(sum w y) vs sum w decode";
  }
}

}  // namespace

TEST(CpuVq, CodecDomainContract) {
  int checked = 0;
  for (const DomCase& c : dom_cases()) {
    for (int d : {64, 96, 128, 256}) {
      if (c.method == Method::kTurboMse && d % 32 != 0) continue;
      auto ref = make_dom_ref(c, d, 51 + d);
      const std::size_t n = 130;
      const auto x = data_with_outlier(n, d, 900 + d);
      std::vector<std::uint8_t> codes(ref->encoded_bytes(n));
      ref->encode(x.data(), n, codes.data());
      for (SimdLevel lvl : available_simd_levels()) {
        if (lvl == SimdLevel::kScalar) continue;
        ScopedSimdLevel guard(lvl);
        SCOPED_TRACE(dom_name(c, d) + " " + simd_level_name(lvl));
        auto fast = cpu::make_cpu_codec(*ref);
        expect_simd(*fast, lvl);
        ASSERT_EQ(fast->domain_size(), static_cast<std::size_t>(d)) << "domain is the rotated [d] (no padding)";
        check_domain(*ref, *fast, codes.data(), n, 0, n, 5);
        check_domain(*ref, *fast, codes.data(), n, 5, 70, 6);
        check_domain(*ref, *fast, codes.data(), n, 64, n, 7);
        check_domain(*ref, *fast, codes.data(), n, 129, n, 8);
        ++checked;
      }
    }
  }
  if (available_simd_levels().size() > 1) {
    EXPECT_GT(checked, 0);
  }
}

TEST(CpuVq, CodecDomainAllZeroAndAllOnesCodeBytes) {
  for (const DomCase& c : dom_cases()) {
    const int d = 128;
    auto ref = make_dom_ref(c, d, 7);
    const std::size_t n = 65, bytes = ref->encoded_bytes(n);
    // fp16 scalars after the codes: rvq 1, polar d/16, split tq-mse 2 per token; pvq none.
    const std::size_t scal = c.method == Method::kRvq ? 1 : c.method == Method::kPolar ? d / 16
                             : c.method == Method::kTurboMse ? 2 : 0;
    const std::size_t code_bytes = (bytes - 2 * scal * n) / n;
    for (std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xff}}) {
      std::vector<std::uint8_t> block(bytes, fill);
      for (std::size_t i = 0; i < n * scal; ++i)
        store_half(block.data() + n * code_bytes + 2 * i, 0.5f + static_cast<float>(i % 7) * 0.25f);
      for (SimdLevel lvl : available_simd_levels()) {
        if (lvl == SimdLevel::kScalar) continue;
        ScopedSimdLevel guard(lvl);
        SCOPED_TRACE(dom_name(c, d) + " fill " + std::to_string(fill) + " " + simd_level_name(lvl));
        auto fast = cpu::make_cpu_codec(*ref);
        check_domain(*ref, *fast, block.data(), n, 0, n, 3);
        check_domain(*ref, *fast, block.data(), n, 17, 18, 4);
      }
    }
  }
}

// PolarQuant at every head_dim its compile-time reconstruction covers (polar_reconstruct_d: multiples of 16 in
// 64..256) and past it (272, 320, 336, 512, 784, 1024: the run-time path): encode() and decode() bit for bit the reference's (the encode's
// fp64 lanes and their scalar tails at every level size; zero, one-hot tokens), scores and accumulation
// within kTol, and the codec-domain contract, at every SIMD level but scalar; the block is an exact-size buffer
// (its last token's radii end it), so a read past the last token's radii shows in the sanitizer build (a read past
// another row lands in the next row or the radii: polar_simd.h's compile-time byte counts are what prevent those).
TEST(CpuVq, PolarEveryHeadDimMatchesTheReference) {
  int checked = 0;
  for (int bits : {2, 3, 4}) {
    for (int d = 64; d <= 1024; d += 16) {
      if (d > 272 && d != 320 && d != 336 && d != 512 && d != 784 && d != 1024) continue;
      const Case c{Method::kPolar, bits};
      auto ref = make_ref(c, d, 300 + d);
      const std::size_t n = 19, nd = n * static_cast<std::size_t>(d);
      auto x = data_with_outlier(n, d, 700 + d + bits);
      // Pairs on the axes and diagonals (the rotation of a zero, one-hot or signed one-hot vector), where the
      // angle cells' edges lie.
      std::fill(x.begin(), x.begin() + 3 * d, 0.0f);
      x[static_cast<std::size_t>(d)] = 1.5f;
      x[static_cast<std::size_t>(2 * d + 3)] = -0.25f;
      std::vector<std::uint8_t> codes(ref->encoded_bytes(n));
      ref->encode(x.data(), n, codes.data());
      std::vector<float> want(nd);
      ref->decode(codes.data(), n, want.data());
      for (SimdLevel lvl : available_simd_levels()) {
        if (lvl == SimdLevel::kScalar) continue;
        ScopedSimdLevel guard(lvl);
        SCOPED_TRACE(name(c, d) + " " + simd_level_name(lvl));
        auto fast = cpu::make_cpu_codec(*ref);
        expect_simd(*fast, lvl);
        std::vector<std::uint8_t> enc(codes.size());
        fast->encode(x.data(), n, enc.data(), 1);
        ASSERT_EQ(codes, enc) << "encoded bytes differ";
        std::vector<float> got(nd);
        fast->decode(codes.data(), n, got.data(), 1);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), nd * sizeof(float))) << "decoded floats differ";
        check_scores_accumulate(*ref, *fast, codes.data(), n, 0, n, 5 + d);
        check_scores_accumulate(*ref, *fast, codes.data(), n, n - 1, n, 6 + d);
        check_domain(*ref, *fast, codes.data(), n, 0, n, 7 + d);
        check_domain(*ref, *fast, codes.data(), n, n - 2, n, 8 + d);
        ++checked;
      }
    }
  }
  if (available_simd_levels().size() > 1) {
    EXPECT_GT(checked, 0);
  }
}

TEST(CpuVq, SplitTqMseFusedAttentionMatchesReferenceForEveryGqaRatio) {
  for (double bits : {1.5, 2.5, 3.5}) {
    const DomCase c{Method::kTurboMse, bits};
    for (auto [d, n] : std::vector<std::pair<int, std::size_t>>{{128, 300}, {96, 65}}) {
      const int kvh = 2;
      std::vector<std::unique_ptr<Codec>> rk, rv;
      std::vector<std::vector<std::uint8_t>> kb, vb;
      std::vector<EncodedHead> keys, values;
      for (int g = 0; g < kvh; ++g) {
        rk.push_back(make_dom_ref(c, d, 100 + g));
        rv.push_back(make_dom_ref(c, d, 200 + g));
        const auto k = data_with_outlier(n, d, 300 + g), v = test::gaussian(n * d, 400 + g);
        kb.emplace_back(rk[g]->encoded_bytes(n));
        vb.emplace_back(rv[g]->encoded_bytes(n));
        rk[g]->encode(k.data(), n, kb[g].data());
        rv[g]->encode(v.data(), n, vb[g].data());
        keys.push_back({rk[g].get(), kb[g].data()});
        values.push_back({rv[g].get(), vb[g].data()});
      }
      for (SimdLevel lvl : available_simd_levels()) {
        ScopedSimdLevel guard(lvl);
        std::vector<std::unique_ptr<cpu::CpuCodec>> fk, fv;
        std::vector<cpu::CodecHead> fkeys, fvalues;
        for (int g = 0; g < kvh; ++g) {
          fk.push_back(cpu::make_cpu_codec(*rk[g]));
          fv.push_back(cpu::make_cpu_codec(*rv[g]));
          expect_simd(*fk.back(), lvl);
          if (lvl != SimdLevel::kScalar) {
            EXPECT_GT(fk.back()->domain_size(), 0u);
            EXPECT_GT(fv.back()->domain_size(), 0u);
          }
          fkeys.push_back({fk[g].get(), kb[g].data()});
          fvalues.push_back({fv[g].get(), vb[g].data()});
        }
        for (int ratio = 1; ratio <= 16; ++ratio) {
          SCOPED_TRACE(dom_name(c, d) + " n " + std::to_string(n) + " gqa " + std::to_string(ratio) + " " +
                       simd_level_name(lvl));
          const int heads = kvh * ratio;
          const auto q = test::gaussian(static_cast<std::size_t>(heads) * d, 9 + ratio);
          const AttentionParams p = ratio % 2 ? AttentionParams{1.0 / std::sqrt(d), 0, 0}
                                              : AttentionParams{0.3, 37, 20.0};
          std::vector<double> want(static_cast<std::size_t>(heads) * d);
          std::vector<float> got(want.size());
          attention_compressed(keys, values, n, q.data(), heads, p, want.data());
          cpu::attention_codec(fkeys, fvalues, n, q.data(), heads, p, got.data(), 0, 2);
          for (int h = 0; h < heads; ++h)
            ASSERT_LE(test::rel_err(got.data() + h * d, want.data() + h * d, d), kTol) << "head " << h;
        }
      }
    }
  }
}
