// The CPU fast paths for KIVI (keys per channel over G tokens, values per token
// over G channels; bits 1, 2, 3, 4, 8), fp8 e4m3 with a per-token scale, fp16
// passthrough and fractional TurboQuant-MSE (1.5 / 2.5 / 3.5 bits, outlier
// split) against the scalar reference, at every SIMD level this CPU has:
//   - encoded bytes and decoded floats identical, for lengths 1..4097 (KIVI key
//     groups partial at the end), head_dim 64..256, unaligned pointers, and
//     data built to hit signed zeros, subnormals and rounding ties;
//   - scores and value accumulation within 1e-5 relative (fp32 vs fp64),
//     including all-zero / all-0xff / random code bytes (NaN where the
//     reference gives NaN);
//   - attention_codec vs attention_compressed for GQA ratios 1..16;
//   - the fast path is really taken where covered (isa() != "scalar").
// A failure names method, bits, role, head_dim, length, level and seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/half.h"
#include "turbokv/rng.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

constexpr double kTol = 1e-5;  // scores / accumulation / attention, relative

struct Case {
  Method method;
  double bits;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {{Method::kKivi, 1}, {Method::kKivi, 2},   {Method::kKivi, 3},
                                      {Method::kKivi, 4}, {Method::kKivi, 8},   {Method::kFp8, 8},
                                      {Method::kFp16, 16}, {Method::kTurboMse, 1.5}, {Method::kTurboMse, 2.5},
                                      {Method::kTurboMse, 3.5}};
  return c;
}

std::string name(const Case& c, Role role, int d, std::size_t n, SimdLevel lvl, int group) {
  return std::string(method_name(c.method)) + " bits " + std::to_string(c.bits) +
         (role == Role::kKey ? " key" : " value") + " d " + std::to_string(d) + " n " + std::to_string(n) +
         " G " + std::to_string(group) + " " + simd_level_name(lvl);
}

std::vector<float> data(std::size_t n, int d, std::uint64_t seed) {
  auto x = test::gaussian(n * d, seed);
  for (std::size_t t = 0; t < n; ++t) x[t * d + 1] = x[t * d + 1] * 5 + 2;  // an outlier channel
  return x;
}

/// Values from a small set that hits signed zeros, subnormals, fp16 rounding
/// boundaries and exact rounding ties of (x - min) / scale.
std::vector<float> tricky(std::size_t n, int d, std::uint64_t seed) {
  static const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.5f, 3.0f, -3.5f, 1e-30f, -1e-30f,
                               6e-8f, -6e-8f, 1e-5f, 0.25f, 7.0f, 448.0f, -448.0f, 0.1f};
  Rng r(seed);
  std::vector<float> x(n * d);
  const bool zero_rows = seed % 2 == 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = pool[r.next() % (sizeof(pool) / sizeof(pool[0]))];
    if (zero_rows && (i / d) % 3 == 0) x[i] = (r.next() & 1) ? 0.0f : -0.0f;
  }
  return x;
}

int group_for(Role role, int d) {
  if (role == Role::kKey) return d % 3 == 0 ? 20 : 32;  // 20: groups straddle blocks
  return d % 32 == 0 ? 32 : 16;
}

std::unique_ptr<Codec> make_ref(const Case& c, int d, Role role, std::uint64_t seed, int group = 0) {
  CodecConfig cfg;
  cfg.method = c.method;
  cfg.bits = c.bits;
  cfg.head_dim = d;
  cfg.role = role;
  cfg.seed = seed;
  cfg.group_size = group ? group : group_for(role, d);
  auto codec = make_codec(cfg);
  if (codec->needs_calibration()) {
    const auto cal = data(512, d, seed ^ 0xca11);
    codec->calibrate(cal.data(), 512);
  }
  return codec;
}

/// The configurations the fast path covers (elsewhere it must be the wrapper).
bool covered(const Case& c, int d) {
  if (c.method == Method::kTurboMse) return d % 32 == 0;
  return true;
}

bool same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, 4) == 0;
}

/// ||got - want|| <= tol * ||want|| with NaN required where want is NaN.
::testing::AssertionResult close(const float* got, const double* want, std::size_t n, double tol) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i]))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
    if (std::isinf(want[i]) && got[i] != want[i])
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
    if (std::isnan(want[i]) || std::isinf(want[i])) continue;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  if (std::sqrt(diff) <= tol * std::max(std::sqrt(norm), 1e-30)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30)
                                       << " > " << tol;
}

/// KIVI, fp8 and fp16 codecs on the fast path have a codec domain (the original one).
bool has_domain(const Case& c, const cpu::CpuCodec& fast) {
  return c.method != Method::kTurboMse && std::string(fast.isa()) != "scalar";
}

/// The codec-domain contract (cpu_codec.h) on `codes` (n tokens), tokens [t0, t1):
/// where the codec claims a domain (required for KIVI / fp8 / fp16 on the fast path),
/// domain_size() == accumulator_size() (== head_dim for the original-domain methods,
/// whose y_t are decode()'s floats bit for bit, NaN included), decode_domain writes
/// exactly (t1 - t0) * D floats, scores(q)[t] == <q, y_t> within kTol relative over the
/// block and accumulate(w) == sum_t w_t y_t within kTol of sum_t |w_t y_ti| per row and kTol
/// relative overall (NaN / Inf where the sum has them).
void check_domain(const Case& c, const cpu::CpuCodec& fast, const std::uint8_t* codes, std::size_t n,
                  std::size_t t0, std::size_t t1, std::uint64_t seed) {
  const std::size_t D = fast.domain_size(), d = static_cast<std::size_t>(fast.head_dim());
  if (has_domain(c, fast)) {
    ASSERT_EQ(D, d) << "domain_size";
  }
  if (D == 0) return;
  ASSERT_EQ(fast.accumulator_size(), D);
  ASSERT_LE(D, fast.query_state_size());
  const std::size_t cnt = t1 - t0;
  std::vector<float> yb(cnt * D + 2, -7.0f);
  float* y = yb.data() + 1;  // unaligned
  fast.decode_domain(codes, n, t0, t1, y);
  ASSERT_EQ(yb.front(), -7.0f) << "decode_domain wrote before y";
  ASSERT_EQ(yb.back(), -7.0f) << "decode_domain wrote past (t1 - t0) * domain_size()";
  if (c.method != Method::kTurboMse) {
    std::vector<float> dec(n * d);
    fast.decode(codes, n, dec.data(), 1);
    for (std::size_t i = 0; i < cnt * D; ++i)
      ASSERT_TRUE(same_float(y[i], dec[t0 * d + i])) << "y differs from decode at token " << t0 + i / D << " row "
                                                     << i % D;
  }
  const auto q = test::gaussian(d, seed);
  std::vector<float> st(fast.query_state_size());
  fast.prepare_query(q.data(), st.data());
  std::vector<float> sc(cnt);
  std::vector<double> dots(cnt, 0.0);
  fast.scores(st.data(), codes, n, t0, t1, sc.data());
  for (std::size_t t = 0; t < cnt; ++t)
    for (std::size_t i = 0; i < D; ++i) dots[t] += double(st[i]) * y[t * D + i];
  // Relative over the block, like the scores-vs-reference checks: KIVI keys fold
  // <q, mn> + <q * sc, codes>, whose rounding scales with those terms, not with <q, y_t>.
  ASSERT_TRUE(close(sc.data(), dots.data(), cnt, kTol)) << "scores vs <state, y_t>";
  auto w = test::gaussian(cnt, seed + 1);
  for (auto& v : w) v = std::exp(v);
  std::vector<float> acc(D, 0.0f);
  fast.accumulate(codes, n, t0, t1, w.data(), acc.data());
  std::vector<double> want(D, 0.0);
  for (std::size_t i = 0; i < D; ++i) {
    double mag = 0;
    for (std::size_t t = 0; t < cnt; ++t) {
      want[i] += double(w[t]) * y[t * D + i];
      mag += std::abs(double(w[t]) * y[t * D + i]);
    }
    if (!std::isfinite(want[i]) || !std::isfinite(mag)) continue;  // NaN / Inf: close() below
    ASSERT_NEAR(acc[i], want[i], kTol * mag + 1e-30) << "accumulator row " << i;
  }
  ASSERT_TRUE(close(acc.data(), want.data(), D, kTol)) << "accumulate vs sum_t w_t y_t";
  EXPECT_THROW(fast.decode_domain(codes, n, t0, n + 1, y), std::invalid_argument);
}

/// Encode (fp32, unaligned), decode, scores, accumulate of one configuration against the reference.
void check_codec(const Case& c, Role role, int d, std::size_t n, SimdLevel lvl, bool tricky_data,
                 std::uint64_t seed) {
  auto ref = make_ref(c, d, role, seed);
  SCOPED_TRACE(name(c, role, d, n, lvl, ref->config().group_size) + " seed " + std::to_string(seed) +
               (tricky_data ? " tricky" : ""));
  auto fast = cpu::make_cpu_codec(*ref);
  if (lvl != SimdLevel::kScalar && covered(c, d)) {
    ASSERT_STRNE(fast->isa(), "scalar") << "the fast path was not taken";
  }
  const auto x = tricky_data ? tricky(n, d, seed) : data(n, d, seed);
  const std::size_t bytes = ref->encoded_bytes(n);
  ASSERT_EQ(bytes, fast->encoded_bytes(n));
  std::vector<std::uint8_t> want(bytes), gbuf(bytes + 1, 0xee);
  std::uint8_t* got = gbuf.data() + 1;  // unaligned output
  std::vector<float> xbuf(x.size() + 1);
  std::memcpy(xbuf.data() + 1, x.data(), x.size() * sizeof(float));  // unaligned input
  ref->encode(x.data(), n, want.data());
  fast->encode(xbuf.data() + 1, n, got, 2);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(want[i], got[i]) << "encoded byte " << i << " of " << bytes;

  std::vector<float> dw(n * d), dbuf(n * d + 1, -7.0f);
  float* dg = dbuf.data() + 1;
  ref->decode(want.data(), n, dw.data());
  fast->decode(got, n, dg, 2);
  for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_TRUE(same_float(dw[i], dg[i])) << "decoded float " << i;

  const auto q = test::gaussian(d + 1, seed + 7);
  std::vector<double> rs(ref->query_state_size());
  std::vector<float> fs(fast->query_state_size());
  ref->prepare_query(q.data() + 1, rs.data());
  fast->prepare_query(q.data() + 1, fs.data());
  for (auto [t0, t1] : {std::pair<std::size_t, std::size_t>{0, n}, {n / 3, n}, {n / 2, n / 2}}) {
    std::vector<double> sw(t1 - t0);
    std::vector<float> sg(t1 - t0, -1.0f);
    ref->scores(rs.data(), want.data(), n, t0, t1, sw.data());
    fast->scores(fs.data(), got, n, t0, t1, sg.data());
    ASSERT_TRUE(close(sg.data(), sw.data(), sw.size(), kTol)) << "scores [" << t0 << ", " << t1 << ")";
    // Positive weights, like softmax's.
    auto w = test::gaussian(t1 - t0, seed + 11);
    for (auto& v : w) v = std::exp(v);
    std::vector<double> wd(w.begin(), w.end()), aw(ref->accumulator_size(), 0.0), ow(d);
    std::vector<float> ag(fast->accumulator_size(), 0.0f), og(d);
    ref->accumulate(want.data(), n, t0, t1, wd.data(), aw.data());
    fast->accumulate(got, n, t0, t1, w.data(), ag.data());
    ref->finalize(aw.data(), ow.data());
    fast->finalize(ag.data(), 1.0, og.data());
    ASSERT_TRUE(close(og.data(), ow.data(), d, kTol)) << "accumulate [" << t0 << ", " << t1 << ")";
    check_domain(c, *fast, got, n, t0, t1, seed + 13);
    if (::testing::Test::HasFatalFailure()) return;
  }
  check_domain(c, *fast, got, n, n / 2, n / 2 + std::min<std::size_t>(n - n / 2, 64), seed + 17);
}

}  // namespace

TEST(CpuKivi, LengthsMatchTheReference) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : cases())
      for (Role role : {Role::kKey, Role::kValue})
        for (int d : {128, 80})
          for (std::size_t n : {1, 2, 31, 64, 65, 1000, 4097}) {
            check_codec(c, role, d, n, lvl, false, 1000 + n + d);
            if (HasFatalFailure()) return;
          }
  }
}

TEST(CpuKivi, HeadDimsMatchTheReference) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : cases())
      for (Role role : {Role::kKey, Role::kValue})
        for (int d : {64, 80, 96, 112, 128, 256})
          for (std::size_t n : {65, 1000}) {
            check_codec(c, role, d, n, lvl, false, 2000 + n + d);
            if (HasFatalFailure()) return;
          }
  }
}

TEST(CpuKivi, TrickyValuesMatchTheReference) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : cases())
      for (Role role : {Role::kKey, Role::kValue})
        for (int d : {64, 80})
          for (std::uint64_t seed : {4, 5, 6, 7}) {
            check_codec(c, role, d, 97, lvl, true, seed);
            if (HasFatalFailure()) return;
          }
  }
}

TEST(CpuKivi, GroupSizes) {
  // KIVI with small and odd groups (value groups need G | head_dim).
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (int bits : {2, 3, 8})
      for (auto [role, d, G] : std::vector<std::tuple<Role, int, int>>{
               {Role::kKey, 64, 1}, {Role::kKey, 96, 7}, {Role::kKey, 64, 128}, {Role::kValue, 80, 5},
               {Role::kValue, 64, 8}, {Role::kValue, 96, 48}, {Role::kValue, 128, 128}, {Role::kValue, 64, 1}}) {
        const Case c{Method::kKivi, static_cast<double>(bits)};
        auto ref = make_ref(c, d, role, 31, G);
        const std::size_t n = 301;
        SCOPED_TRACE(name(c, role, d, n, lvl, G));
        auto fast = cpu::make_cpu_codec(*ref);
        if (lvl != SimdLevel::kScalar) {
          ASSERT_STRNE(fast->isa(), "scalar");
        }
        for (bool tr : {false, true}) {
          const auto x = tr ? tricky(n, d, 8) : data(n, d, 9);
          std::vector<std::uint8_t> want(ref->encoded_bytes(n)), got(want.size(), 0xee);
          ref->encode(x.data(), n, want.data());
          fast->encode(x.data(), n, got.data(), 2);
          ASSERT_EQ(want, got) << (tr ? "tricky" : "gaussian");
          std::vector<float> dw(n * d), dg(n * d);
          ref->decode(want.data(), n, dw.data());
          fast->decode(want.data(), n, dg.data(), 2);
          ASSERT_EQ(0, std::memcmp(dw.data(), dg.data(), dw.size() * 4));
          const auto q = test::gaussian(d, 3);
          std::vector<double> rs(ref->query_state_size()), sw(n);
          std::vector<float> fs(fast->query_state_size()), sg(n);
          ref->prepare_query(q.data(), rs.data());
          fast->prepare_query(q.data(), fs.data());
          ref->scores(rs.data(), want.data(), n, 0, n, sw.data());
          fast->scores(fs.data(), want.data(), n, 0, n, sg.data());
          ASSERT_TRUE(close(sg.data(), sw.data(), n, kTol));
          check_domain(c, *fast, want.data(), n, 0, n, 29);
          check_domain(c, *fast, want.data(), n, 13, 77, 31);  // a key group straddling t0 and t1
        }
      }
  }
}

TEST(CpuKivi, EdgeCodeBytes) {
  // All-zero and all-0xff blocks, 0xff codes with real scalars, and random code
  // bytes with real scalars, through decode, scores and accumulate.
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : cases())
      for (Role role : {Role::kKey, Role::kValue})
        for (int d : {64, 80, 128}) {
          const std::size_t n = 70;
          auto ref = make_ref(c, d, role, 41);
          SCOPED_TRACE(name(c, role, d, n, lvl, ref->config().group_size));
          auto fast = cpu::make_cpu_codec(*ref);
          const auto x = data(n, d, 42);
          std::vector<std::uint8_t> real(ref->encoded_bytes(n));
          ref->encode(x.data(), n, real.data());
          // Code bytes = the first n * code_bytes bytes for every method here except
          // KIVI keys, whose scalars follow per group; fill only the code section.
          std::size_t code_bytes = 0;
          switch (c.method) {
            case Method::kKivi: code_bytes = n * ((static_cast<std::size_t>(d) * static_cast<int>(c.bits) + 7) / 8); break;
            case Method::kFp8: code_bytes = n * d; break;
            case Method::kFp16: code_bytes = n * 2 * d; break;
            default: code_bytes = real.size() - 4 * n; break;
          }
          for (int pattern = 0; pattern < 4; ++pattern) {
            SCOPED_TRACE("pattern " + std::to_string(pattern));
            std::vector<std::uint8_t> b = real;
            Rng r(pattern);
            if (pattern == 0) std::fill(b.begin(), b.end(), 0);
            if (pattern == 1) std::fill(b.begin(), b.end(), 0xff);
            if (pattern == 2) std::fill(b.begin(), b.begin() + code_bytes, 0xff);
            if (pattern == 3)
              for (std::size_t i = 0; i < code_bytes; ++i) b[i] = static_cast<std::uint8_t>(r.next());
            std::vector<float> dw(n * d), dg(n * d);
            ref->decode(b.data(), n, dw.data());
            fast->decode(b.data(), n, dg.data(), 1);
            for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_TRUE(same_float(dw[i], dg[i])) << "decoded " << i;
            const auto q = test::gaussian(d, 5);
            std::vector<double> rs(ref->query_state_size()), sw(n);
            std::vector<float> fs(fast->query_state_size()), sg(n);
            ref->prepare_query(q.data(), rs.data());
            fast->prepare_query(q.data(), fs.data());
            ref->scores(rs.data(), b.data(), n, 0, n, sw.data());
            fast->scores(fs.data(), b.data(), n, 0, n, sg.data());
            ASSERT_TRUE(close(sg.data(), sw.data(), n, kTol)) << "scores";
            std::vector<double> wd(n, 0.5), aw(ref->accumulator_size(), 0.0), ow(d);
            std::vector<float> w(n, 0.5f), ag(fast->accumulator_size(), 0.0f), og(d);
            ref->accumulate(b.data(), n, 0, n, wd.data(), aw.data());
            fast->accumulate(b.data(), n, 0, n, w.data(), ag.data());
            ref->finalize(aw.data(), ow.data());
            fast->finalize(ag.data(), 1.0, og.data());
            ASSERT_TRUE(close(og.data(), ow.data(), d, kTol)) << "accumulate";
            check_domain(c, *fast, b.data(), n, 0, n, 19);
            check_domain(c, *fast, b.data(), n, 5, 50, 23);
          }
        }
  }
}

TEST(CpuKivi, FusedAttentionMatchesReference) {
  std::vector<std::pair<Case, Case>> kv;
  for (const Case& c : cases()) kv.push_back({c, c});
  kv.push_back({{Method::kKivi, 2}, {Method::kFp8, 8}});  // mixed key / value methods
  kv.push_back({{Method::kFp16, 16}, {Method::kKivi, 4}});
  kv.push_back({{Method::kFp8, 8}, {Method::kKivi, 1}});
  kv.push_back({{Method::kKivi, 8}, {Method::kFp16, 16}});
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const auto& [kc, vc] : kv)
      for (auto [d, kvh, n] : std::vector<std::tuple<int, int, std::size_t>>{{128, 2, 300}, {80, 1, 65}, {128, 1, 4097}})
        for (int ratio = 1; ratio <= 16; ++ratio) {
          if (n > 1000 && ratio != 6 && ratio != 16) continue;  // long sequences: a few ratios
          SCOPED_TRACE(name(kc, Role::kKey, d, n, lvl, 0) + " / " + name(vc, Role::kValue, d, n, lvl, 0) + " gqa " +
                       std::to_string(ratio));
          std::vector<std::unique_ptr<Codec>> rk, rv;
          std::vector<std::unique_ptr<cpu::CpuCodec>> fk, fv;
          std::vector<std::vector<std::uint8_t>> kb, vb;
          std::vector<EncodedHead> keys, values;
          std::vector<cpu::CodecHead> fkeys, fvalues;
          for (int g = 0; g < kvh; ++g) {
            rk.push_back(make_ref(kc, d, Role::kKey, 100 + g));
            rv.push_back(make_ref(vc, d, Role::kValue, 200 + g));
            fk.push_back(cpu::make_cpu_codec(*rk.back()));
            fv.push_back(cpu::make_cpu_codec(*rv.back()));
            const auto k = data(n, d, 300 + g), v = test::gaussian(n * d, 400 + g);
            kb.emplace_back(rk[g]->encoded_bytes(n));
            vb.emplace_back(rv[g]->encoded_bytes(n));
            rk[g]->encode(k.data(), n, kb[g].data());
            rv[g]->encode(v.data(), n, vb[g].data());
            // KIVI / fp8 / fp16 pairs: the decode-once codec domain (KIVI at 1..4 bits takes its fused kernel).
            if (has_domain(kc, *fk[g]) && has_domain(vc, *fv[g])) {
              ASSERT_GT(fk[g]->domain_size(), 0u);
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
              ASSERT_TRUE(close(got.data() + h * d, want.data() + h * d, d, kTol)) << "head " << h;
          }
        }
  }
}

TEST(CpuKivi, RejectsLikeTheReference) {
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    for (const Case& c : cases()) {
      auto ref = make_ref(c, 64, Role::kKey, 3);
      auto fast = cpu::make_cpu_codec(*ref);
      SCOPED_TRACE(name(c, Role::kKey, 64, 4, lvl, ref->config().group_size));
      for (int bad = 0; bad < 3; ++bad) {
        auto x = test::gaussian(4 * 64, 1);
        if (bad == 0) x[2 * 64 + 5] = INFINITY;
        if (bad == 1) x[3 * 64 + 7] = 40000.0f;  // norm beyond the fp16 range
        if (bad == 2) x[1 * 64 + 3] = 20000.0f, x[2 * 64 + 3] = -20000.0f;  // KIVI key-group scale > 32768 at 1 bit
        bool ref_throws = false;
        try {
          ref->validate(x.data(), 4);
        } catch (const std::invalid_argument&) {
          ref_throws = true;
        }
        std::vector<std::uint8_t> out(fast->encoded_bytes(4), 0x5a);
        if (ref_throws) {
          EXPECT_THROW(fast->encode(x.data(), 4, out.data()), std::invalid_argument) << "case " << bad;
          for (auto b : out) ASSERT_EQ(b, 0x5a) << "output written on error, case " << bad;
        } else {
          std::vector<std::uint8_t> want(out.size());
          ref->encode(x.data(), 4, want.data());
          fast->encode(x.data(), 4, out.data());
          EXPECT_EQ(want, out) << "case " << bad;
        }
      }
      std::vector<float> st(fast->query_state_size()), s(2);
      std::vector<std::uint8_t> codes(fast->encoded_bytes(4));
      EXPECT_THROW(fast->scores(st.data(), codes.data(), 4, 3, 5, s.data()), std::invalid_argument);
      EXPECT_THROW(fast->accumulate(codes.data(), 4, 3, 2, s.data(), st.data()), std::invalid_argument);
    }
  }
}
