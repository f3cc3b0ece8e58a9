// The QJL and TurboQuant-Prod CPU fast paths (src/cpu/qjl*.cpp, tq_prod*.cpp)
// against the scalar reference (src/ref/qjl.cpp, tq_prod.cpp), at every SIMD
// level this CPU has: encoded bytes and decoded floats identical; scores,
// value accumulation and fused attention within 1e-5 relative (fp32 vs the
// reference's fp64). Shapes: token counts 1, 2, 31, 64, 65, 1000, 4097;
// head_dim 64, 80, 96, 112, 128, 256; sketch rows head_dim, head_dim + 8 (a
// half 16-row chunk) and 2 * head_dim; Gaussian and orthogonal sketches;
// unaligned pointers; all-zero / all-0xff code bytes; GQA ratios 1..16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

constexpr double kTol = 1e-5;  // scores, accumulation, attention: relative, fp32 vs fp64

struct Case {
  Method method;
  int bits;  // tq-prod: 1..4; qjl: 1
  int d;
  int rows;  // qjl_rows (0 = head_dim)
  bool orth;
  RotationKind rot = RotationKind::kHadamard;
};

std::string name(const Case& c, SimdLevel lvl) {
  return std::string(method_name(c.method)) + " b" + std::to_string(c.bits) + " d" + std::to_string(c.d) + " m" +
         std::to_string(c.rows) + (c.orth ? " orth" : " gauss") + " rot " + rotation_name(c.rot) + " " +
         simd_level_name(lvl);
}

CodecConfig config(const Case& c, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = c.method;
  cfg.bits = c.bits;
  cfg.head_dim = c.d;
  cfg.qjl_rows = c.rows;
  cfg.qjl_orthogonal = c.orth;
  cfg.rotation = c.rot;
  cfg.seed = seed;
  return cfg;
}

/// Every method/bits, head_dim, rows and sketch kind (plus a few rotations).
std::vector<Case> all_cases() {
  std::vector<Case> out;
  std::vector<std::pair<Method, int>> mb = {{Method::kQjl, 1},       {Method::kTurboProd, 1}, {Method::kTurboProd, 2},
                                            {Method::kTurboProd, 3}, {Method::kTurboProd, 4}};
  for (auto [m, b] : mb)
    for (int d : {64, 80, 96, 112, 128, 256})
      for (int rows : {0, d + 8, 2 * d})
        for (bool orth : {false, true}) {
          if (d == 256 && rows != 0 && orth) continue;  // orthogonal 512-row sketches: QR of 256x256, twice; enough
          out.push_back({m, b, d, rows, orth});
        }
  for (int b : {1, 3, 4}) {
    out.push_back({Method::kTurboProd, b, 128, 0, false, RotationKind::kHaar});
    out.push_back({Method::kTurboProd, b, 64, 72, false, RotationKind::kNone});
  }
  return out;
}

/// Gaussian rows with an outlier channel; row 0 is all zeros (norm 0) when n > 1.
std::vector<float> data(std::size_t n, int d, std::uint64_t seed) {
  auto x = test::gaussian(n * d, seed);
  for (std::size_t t = 0; t < n; ++t) x[t * d + 1] = x[t * d + 1] * 5 + 2;
  if (n > 1) std::fill(x.begin(), x.begin() + d, 0.0f);
  return x;
}

/// Positive weights like softmax probabilities.
std::vector<float> weights(std::size_t n, std::uint64_t seed) {
  auto w = test::gaussian(n, seed);
  for (auto& v : w) v = std::exp(-std::abs(v));
  return w;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Scores over [t0, t1) and accumulate + finalize, fast vs reference, on `codes` (n tokens).
void check_compute(const Codec& ref, const cpu::CpuCodec& fast, const std::uint8_t* codes, std::size_t n,
                   std::size_t t0, std::size_t t1, std::uint64_t seed) {
  const int d = ref.head_dim();
  const auto q = test::gaussian(d, seed);
  std::vector<double> rs(ref.query_state_size());
  std::vector<float> fs(fast.query_state_size() + 1);
  ref.prepare_query(q.data(), rs.data());
  fast.prepare_query(q.data(), fs.data() + 1);  // unaligned state
  std::vector<double> sw(t1 - t0);
  std::vector<float> sg(t1 - t0 + 1, -7.0f);
  ref.scores(rs.data(), codes, n, t0, t1, sw.data());
  fast.scores(fs.data() + 1, codes, n, t0, t1, sg.data() + 1);
  // Scale: |<q, x_hat_t>| <= ||q|| ||x_hat_t|| (both estimators are linear in q).
  std::vector<float> xh(n * static_cast<std::size_t>(d));
  ref.decode(codes, n, xh.data());
  double bound = max_abs(sw), qn = 0;
  for (float v : q) qn += double(v) * v;
  for (std::size_t t = t0; t < t1; ++t) {
    double s = 0;
    for (int i = 0; i < d; ++i) s += double(xh[t * d + i]) * xh[t * d + i];
    bound = std::max(bound, std::sqrt(qn * s));
  }
  const double tol = kTol * std::max(bound, 1e-30);
  for (std::size_t i = 0; i < sw.size(); ++i) ASSERT_NEAR(sg[i + 1], sw[i], tol) << "score of token " << t0 + i;
  ASSERT_EQ(sg[0], -7.0f) << "scores wrote before out";

  const auto w = weights(t1 - t0, seed + 1);
  std::vector<double> wd(w.begin(), w.end()), aw(ref.accumulator_size(), 0.0), ow(d);
  std::vector<float> ag(fast.accumulator_size() + 1, 0.0f), og(d + 1);
  ref.accumulate(codes, n, t0, t1, wd.data(), aw.data());
  fast.accumulate(codes, n, t0, t1, w.data(), ag.data() + 1);
  ref.finalize(aw.data(), ow.data());
  fast.finalize(ag.data() + 1, 0.5, og.data() + 1);
  for (double& v : ow) v *= 0.5;
  ASSERT_LE(test::rel_err(og.data() + 1, ow.data(), d), kTol) << "finalized accumulation";
}

/// The codec-domain contract (cpu_codec.h) of a fast QJL / TurboQuant-Prod codec on
/// `codes` (n tokens), tokens [t0, t1): domain_size() > 0 and == accumulator_size(),
/// laid out as [d MSE floats (tq-prod only) | m sketch rows | zeros up to 16-row
/// padding]; scores(state)[t] == <state[0, D), y_t> within kTol of sum_i |state_i y_ti|;
/// accumulate(w) == sum_t w_t y_t within kTol of sum_t |w_t y_ti| (and kTol overall);
/// decode_domain writes exactly (t1 - t0) * D floats.
void check_domain(const Codec& ref, const cpu::CpuCodec& fast, const std::uint8_t* codes, std::size_t n,
                  std::size_t t0, std::size_t t1, std::uint64_t seed) {
  if (std::string(fast.isa()) == "scalar") return;  // the reference wrapper: no codec domain
  const CodecConfig& c = ref.config();
  const std::size_t d = static_cast<std::size_t>(c.head_dim);
  const std::size_t m = static_cast<std::size_t>(c.qjl_rows ? c.qjl_rows : c.head_dim);
  const std::size_t off = c.method == Method::kQjl ? 0 : d;  // tq-prod: the rotated MSE part first
  const std::size_t D = fast.domain_size();
  ASSERT_EQ(D, off + (m + 15) / 16 * 16) << "domain_size";
  ASSERT_EQ(fast.accumulator_size(), D);
  ASSERT_LE(D, fast.query_state_size());
  const std::size_t cnt = t1 - t0;
  std::vector<float> yb(cnt * D + 2, -7.0f);
  float* y = yb.data() + 1;  // unaligned
  fast.decode_domain(codes, n, t0, t1, y);
  ASSERT_EQ(yb.front(), -7.0f) << "decode_domain wrote before y";
  ASSERT_EQ(yb.back(), -7.0f) << "decode_domain wrote past (t1 - t0) * domain_size()";
  for (std::size_t t = 0; t < cnt; ++t) {
    for (std::size_t i = off + m; i < D; ++i) {
      ASSERT_EQ(y[t * D + i], 0.0f) << "padding row " << i << " token " << t0 + t;
    }
    if (c.method == Method::kTurboProd && c.bits == 1) {  // no MSE stage: the MSE part is zero
      for (std::size_t i = 0; i < d; ++i) {
        ASSERT_EQ(y[t * D + i], 0.0f) << "MSE part " << i << " token " << t0 + t;
      }
    }
  }
  const auto q = test::gaussian(d, seed);
  std::vector<float> st(fast.query_state_size());
  fast.prepare_query(q.data(), st.data());
  std::vector<float> sc(cnt);
  fast.scores(st.data(), codes, n, t0, t1, sc.data());
  for (std::size_t t = 0; t < cnt; ++t) {
    double dot = 0, mag = 0;
    for (std::size_t i = 0; i < D; ++i) {
      dot += double(st[i]) * y[t * D + i];
      mag += std::abs(double(st[i]) * y[t * D + i]);
    }
    ASSERT_NEAR(sc[t], dot, kTol * mag + 1e-30) << "score vs <state, y_t>, token " << t0 + t;
  }
  const auto w = weights(cnt, seed + 1);
  std::vector<float> acc(D + 1, 0.0f);
  fast.accumulate(codes, n, t0, t1, w.data(), acc.data() + 1);
  std::vector<double> want(D, 0.0);
  for (std::size_t i = 0; i < D; ++i) {
    double mag = 0;
    for (std::size_t t = 0; t < cnt; ++t) {
      want[i] += double(w[t]) * y[t * D + i];
      mag += std::abs(double(w[t]) * y[t * D + i]);
    }
    ASSERT_NEAR(acc[i + 1], want[i], kTol * mag + 1e-30) << "accumulator row " << i;
  }
  if (cnt > 0) {
    ASSERT_LE(test::rel_err(acc.data() + 1, want.data(), D), kTol) << "accumulate vs sum_t w_t y_t";
  }
  EXPECT_THROW(fast.decode_domain(codes, n, t0, n + 1, y), std::invalid_argument);
}

std::vector<SimdLevel> fast_levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : available_simd_levels())
    if (l != SimdLevel::kScalar) out.push_back(l);
  return out;
}

}  // namespace

// The factory takes the SIMD path for every covered configuration (so the
// tests below exercise it) and the reference wrapper otherwise.
TEST(CpuQjl, FactoryCoverage) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : all_cases()) {
      auto ref = make_codec(config(c, 5));
      auto fast = cpu::make_cpu_codec(*ref);
      EXPECT_STREQ(fast->isa(), simd_level_name(lvl)) << name(c, lvl);
    }
    // tq-prod needs head_dim % 16 == 0: head_dim 72 is wrapped.
    auto ref = make_codec(config({Method::kTurboProd, 3, 72, 0, false}, 5));
    EXPECT_STREQ(cpu::make_cpu_codec(*ref)->isa(), "scalar");
    // qjl takes any multiple of 8.
    auto rq = make_codec(config({Method::kQjl, 1, 72, 24, false}, 5));
    EXPECT_STREQ(cpu::make_cpu_codec(*rq)->isa(), simd_level_name(lvl));
  }
  EXPECT_FALSE(fast_levels().empty()) << "this CPU runs no SIMD level: nothing fast was tested";
}

// Bytes identical (fp32 from unaligned rows, fp16, bf16), decoded floats
// identical, scores and accumulation within tolerance, for every case and a
// spread of token counts.
TEST(CpuQjl, MatchesReferenceEveryShape) {
  int checked = 0;
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    const auto cases = all_cases();
    for (std::size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      // Every case: 1, 2, 31, 65 and 64 or 1000 in turn; all of 1, 2, 31, 64, 65, 1000, 4097
      // at d 64 and 128 with m = d (Gaussian). The scalar level (the wrapper) runs only those.
      const bool primary = c.rows == 0 && !c.orth && (c.d == 64 || c.d == 128);
      if (lvl == SimdLevel::kScalar && !primary) continue;
      std::vector<std::size_t> ns = {1, 2, 31, 65};
      if (primary)
        ns.insert(ns.end(), {64, 1000, 4097});
      else
        ns.push_back(ci % 2 ? 64 : 1000);
      const std::uint64_t seed = 11 + ci;
      auto ref = make_codec(config(c, seed));
      auto fast = cpu::make_cpu_codec(*ref);
      for (std::size_t n : ns) {
        SCOPED_TRACE(name(c, lvl) + " n " + std::to_string(n) + " seed " + std::to_string(seed));
        const int d = c.d;
        const auto x = data(n, d, seed * 7 + n);
        std::vector<float> xu(x.size() + 1);  // rows at a 4-byte, not 16-byte, boundary
        std::copy(x.begin(), x.end(), xu.begin() + 1);
        const std::size_t bytes = ref->encoded_bytes(n);
        ASSERT_EQ(fast->encoded_bytes(n), bytes);
        std::vector<std::uint8_t> want(bytes), got(bytes + 1, 0xee);
        ref->encode(x.data(), n, want.data());
        fast->encode(xu.data() + 1, n, got.data() + 1, 2);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data() + 1, bytes)) << "encoded bytes differ";
        ASSERT_EQ(got[0], 0xee) << "encode wrote before out";
        for (cpu::DType dt : {cpu::DType::kF16, cpu::DType::kBf16}) {
          std::vector<std::uint16_t> x16(x.size());
          std::vector<float> xr(x.size());
          for (std::size_t i = 0; i < x.size(); ++i) {
            x16[i] = dt == cpu::DType::kF16 ? float_to_half(x[i]) : float_to_bf16(x[i]);
            xr[i] = dt == cpu::DType::kF16 ? half_to_float(x16[i]) : bf16_to_float(x16[i]);
          }
          std::vector<std::uint8_t> w16(bytes), g16(bytes);
          ref->encode(xr.data(), n, w16.data());
          fast->encode(x16.data(), dt, n, g16.data(), 2);
          ASSERT_EQ(0, std::memcmp(w16.data(), g16.data(), bytes)) << "16-bit input: bytes differ";
        }
        std::vector<float> dw(n * d), dg(n * d + 1, -7.0f);
        std::vector<std::uint8_t> cu(bytes + 1);  // codes at an odd address
        std::memcpy(cu.data() + 1, want.data(), bytes);
        ref->decode(want.data(), n, dw.data());
        fast->decode(cu.data() + 1, n, dg.data() + 1, 2);
        ASSERT_EQ(0, std::memcmp(dw.data(), dg.data() + 1, dw.size() * sizeof(float))) << "decoded floats differ";
        ASSERT_EQ(dg[0], -7.0f);
        check_compute(*ref, *fast, cu.data() + 1, n, n / 3, n, seed + n);
        check_compute(*ref, *fast, cu.data() + 1, n, 0, n, seed + n + 3);
        check_domain(*ref, *fast, cu.data() + 1, n, n / 3, n, seed + n + 5);
        check_domain(*ref, *fast, cu.data() + 1, n, 0, n, seed + n + 6);
        check_domain(*ref, *fast, cu.data() + 1, n, n / 2, n / 2 + std::min<std::size_t>(n - n / 2, 64), seed + 7);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// All-zero and all-0xff code bytes (every sign -1 / +1, every code 0 / max)
// with finite scalars, through decode, scores and accumulation.
TEST(CpuQjl, EdgeCodeBytes) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : all_cases()) {
      if (c.d > 128) continue;
      auto ref = make_codec(config(c, 3));
      auto fast = cpu::make_cpu_codec(*ref);
      for (std::uint8_t fill : {std::uint8_t{0}, std::uint8_t{0xff}}) {
        for (std::size_t n : {std::size_t{1}, std::size_t{33}}) {
          SCOPED_TRACE(name(c, lvl) + " fill " + std::to_string(fill) + " n " + std::to_string(n));
          const std::size_t bytes = ref->encoded_bytes(n);
          const std::size_t ns = c.method == Method::kQjl ? 1 : 2;
          const std::size_t code_bytes = bytes / n - 2 * ns;
          std::vector<std::uint8_t> codes(bytes, fill);
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t s = 0; s < ns; ++s)
              store_half(codes.data() + n * code_bytes + 2 * (t * ns + s), s == 0 ? 1.5f + 0.25f * t : 0.375f);
          std::vector<float> dw(n * c.d), dg(n * c.d);
          ref->decode(codes.data(), n, dw.data());
          fast->decode(codes.data(), n, dg.data());
          ASSERT_EQ(0, std::memcmp(dw.data(), dg.data(), dw.size() * sizeof(float))) << "decoded floats differ";
          check_compute(*ref, *fast, codes.data(), n, 0, n, 99);
          check_domain(*ref, *fast, codes.data(), n, 0, n, 98);
        }
      }
    }
  }
}

// Fused attention over QJL / TurboQuant-Prod heads (mixed with each other and
// with TurboQuant-MSE values) vs attention_compressed, GQA ratios 1..16.
TEST(CpuQjl, AttentionMatchesReference) {
  struct Pair {
    Case k, v;
  };
  const std::vector<Pair> pairs = {
      {{Method::kQjl, 1, 128, 0, false}, {Method::kTurboProd, 3, 128, 0, false}},
      {{Method::kTurboProd, 4, 96, 0, true}, {Method::kQjl, 1, 96, 104, false}},
      {{Method::kTurboProd, 2, 64, 128, false}, {Method::kTurboProd, 1, 64, 0, true}},
      {{Method::kTurboProd, 3, 128, 0, false}, {Method::kTurboMse, 3, 128, 0, false}},
      {{Method::kQjl, 1, 64, 72, true}, {Method::kQjl, 1, 64, 0, false}},
      // mixed with the original-domain methods (KIVI-style fp8 / fp16 codecs)
      {{Method::kTurboProd, 2, 128, 136, false}, {Method::kFp8, 8, 128, 0, false}},
      {{Method::kFp16, 16, 128, 0, false}, {Method::kTurboProd, 4, 128, 0, false}},
  };
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (std::size_t pi = 0; pi < pairs.size(); ++pi) {
      const Pair& pr = pairs[pi];
      const int d = pr.k.d;
      for (int ratio = 1; ratio <= 16; ++ratio) {
        const int kvh = ratio <= 8 ? 2 : 1;
        const std::size_t n = ratio % 3 == 0 ? 4097 : ratio % 3 == 1 ? 1000 : 65;
        SCOPED_TRACE(name(pr.k, lvl) + " values " + name(pr.v, lvl) + " gqa " + std::to_string(ratio) + " n " +
                     std::to_string(n));
        std::vector<std::unique_ptr<Codec>> rk, rv;
        std::vector<std::unique_ptr<cpu::CpuCodec>> fk, fv;
        std::vector<std::vector<std::uint8_t>> kb, vb;
        std::vector<EncodedHead> keys, values;
        std::vector<cpu::CodecHead> fkeys, fvalues;
        for (int g = 0; g < kvh; ++g) {
          CodecConfig kc = config(pr.k, 100 + g), vc = config(pr.v, 200 + g);
          vc.role = Role::kValue;
          rk.push_back(make_codec(kc));
          rv.push_back(make_codec(vc));
          fk.push_back(cpu::make_cpu_codec(*rk.back()));
          fv.push_back(cpu::make_cpu_codec(*rv.back()));
          const auto k = data(n, d, 300 + g + pi), v = test::gaussian(n * d, 400 + g + pi);
          kb.emplace_back(rk[g]->encoded_bytes(n));
          vb.emplace_back(rv[g]->encoded_bytes(n));
          rk[g]->encode(k.data(), n, kb[g].data());
          rv[g]->encode(v.data(), n, vb[g].data());
          // Both QJL / TurboQuant-Prod (and fp8 / fp16) have a codec domain: attention_codec
          // takes its decode-once path for every pair here but the TurboQuant-MSE one.
          if (lvl != SimdLevel::kScalar && pr.v.method != Method::kTurboMse) {
            ASSERT_GT(fk[g]->domain_size(), 0u);
            ASSERT_GT(fv[g]->domain_size(), 0u);
            ASSERT_EQ(fv[g]->domain_size(), fv[g]->accumulator_size());
          }
        }
        for (int g = 0; g < kvh; ++g) {
          keys.push_back({rk[g].get(), kb[g].data()});
          values.push_back({rv[g].get(), vb[g].data()});
          fkeys.push_back({fk[g].get(), kb[g].data()});
          fvalues.push_back({fv[g].get(), vb[g].data()});
        }
        const int heads = kvh * ratio;
        const auto q = test::gaussian(static_cast<std::size_t>(heads) * d, 9 + ratio);
        for (AttentionParams p : {AttentionParams{1.0 / std::sqrt(d), 0, 0}, AttentionParams{0.3, 37, 20.0}}) {
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

// Bad input: nothing written, the reference's errors.
TEST(CpuQjl, RejectsBadInput) {
  for (SimdLevel lvl : fast_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : {Case{Method::kQjl, 1, 64, 0, false}, Case{Method::kTurboProd, 3, 64, 0, false}}) {
      SCOPED_TRACE(name(c, lvl));
      auto ref = make_codec(config(c, 1));
      auto fast = cpu::make_cpu_codec(*ref);
      auto x = test::gaussian(4 * 64, 1);
      x[2 * 64 + 5] = NAN;
      std::vector<std::uint8_t> out(fast->encoded_bytes(4), 0x5a);
      EXPECT_THROW(fast->encode(x.data(), 4, out.data()), std::invalid_argument);
      x[2 * 64 + 5] = 1e6f;  // norm above the fp16 range
      EXPECT_THROW(fast->encode(x.data(), 4, out.data()), std::invalid_argument);
      for (auto b : out) ASSERT_EQ(b, 0x5a) << "output written on error";
      std::vector<float> st(fast->query_state_size()), s(8), acc(fast->accumulator_size());
      EXPECT_THROW(fast->scores(st.data(), out.data(), 4, 3, 5, s.data()), std::invalid_argument);
      EXPECT_THROW(fast->scores(st.data(), out.data(), 4, 3, 2, s.data()), std::invalid_argument);
      EXPECT_THROW(fast->accumulate(out.data(), 4, 2, 5, s.data(), acc.data()), std::invalid_argument);
      std::vector<float> qn(64, 0.0f);
      qn[3] = INFINITY;
      EXPECT_THROW(fast->prepare_query(qn.data(), st.data()), std::invalid_argument);
    }
  }
}
