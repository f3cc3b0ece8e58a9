// Fused decode attention on TurboQuant-MSE codes (src/cpu), every SIMD level
// against the reference attention_compressed (fp64): within 1e-5 relative per
// head, for lengths 1..4097, head_dim 64..256, GQA 1..16, mixed widths, window,
// soft-capping, causal prefixes, unaligned pointers, all-zero / all-max codes,
// batched sequences, and the dense fp32 / fp16 baselines against attention_exact.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "test_util.h"
#include "tq_heads.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"
#include "turbokv/simd.h"

using namespace turbokv;

namespace {

constexpr double kAttnTol = 1e-5;
double g_worst = 0;  // worst relative error seen (printed by the last test)

struct TqCase : test::TqMseHeads {
  using TqMseHeads::TqMseHeads;
  std::string shape(const char* extra = "") const {
    return detail::concat("d=", d, " kvh=", kvh, " gqa=", ratio, " n=", n, " kbits=", kbits, " vbits=", vbits,
                          " seed=", seed, " level=", simd_level_name(simd_level()), extra);
  }

  /// Worst per-head relative error of the fast path against the reference, on every level and thread count.
  void check(const AttentionParams& p, std::size_t context = 0, int offset = 0) {
    const int H = heads();
    auto q = test::gaussian(static_cast<std::size_t>(H) * d, seed + 5);
    std::vector<double> want(static_cast<std::size_t>(H) * d);
    attention_compressed(keys, values, n, q.data(), H, p, want.data(), nullptr, context);
    std::vector<float> qs(q.size() + 3);
    std::copy(q.begin(), q.end(), qs.begin() + offset);
    for (SimdLevel l : available_simd_levels()) {
      ScopedSimdLevel g(l);
      for (int threads : {1, 2}) {
        SCOPED_TRACE(shape(detail::concat(" threads=", threads, " context=", context, " window=", p.window,
                                          " softcap=", p.softcap, " offset=", offset)
                               .c_str()));
        std::vector<float> got(want.size() + 3, NAN);
        cpu::attention_tq_mse(fkeys, fvalues, n, qs.data() + offset, H, p, got.data() + offset, context, threads);
        for (int h = 0; h < H; ++h) {
          const double e = test::rel_err(got.data() + offset + h * d, want.data() + h * d, d);
          g_worst = std::max(g_worst, e);
          ASSERT_LT(e, kAttnTol) << "head " << h;
        }
      }
    }
  }
};

AttentionParams params(int d, int window = 0, double softcap = 0) {
  AttentionParams p;
  p.softmax_scale = 1.0 / std::sqrt(static_cast<double>(d));
  p.window = window;
  p.softcap = softcap;
  return p;
}

}  // namespace

TEST(CpuAttention, Lengths) {
  const int bits[][2] = {{4, 4}, {3, 2}, {2, 4}, {1, 3}, {4, 1}, {3, 3}, {2, 2}};
  const std::size_t lens[] = {1, 2, 31, 64, 65, 1000, 4097};
  for (int i = 0; i < 7; ++i) {
    TqCase c(128, 2, 4, lens[i], bits[i][0], bits[i][1], 40 + i);
    c.check(params(128), 0, i % 4);
  }
}

TEST(CpuAttention, HeadDims) {
  int i = 0;
  for (int d : {64, 80, 96, 112, 128, 256}) {
    TqCase c(d, 2, 3, 300, 1 + i % 4, 4 - i % 4, 60 + i);
    c.check(params(d), 0, 1 + i % 3);
    ++i;
  }
}

TEST(CpuAttention, GqaRatios) {
  for (int ratio = 1; ratio <= 16; ++ratio) {
    TqCase c(64, ratio % 3 == 0 ? 1 : 2, ratio, 150 + 7 * ratio, 1 + ratio % 4, 1 + (ratio / 4) % 4, 80 + ratio);
    c.check(params(64));
  }
}

TEST(CpuAttention, WindowSoftcapContext) {
  TqCase c(128, 2, 4, 700, 4, 3, 101);
  c.check(params(128, 100));
  c.check(params(128, 0, 5.0));
  c.check(params(128), 333);
  c.check(params(128, 50, 3.0), 421, 2);
  c.check(params(128, 5000));  // window longer than the sequence
}

TEST(CpuAttention, AllZeroAndAllMaxCodes) {
  for (int bits = 1; bits <= 4; ++bits)
    for (int fill : {0x00, 0xFF}) {
      TqCase c(bits % 2 ? 96 : 128, 2, 3, 97, bits, 5 - bits, 200 + bits, fill);
      c.check(params(c.d));
    }
}

TEST(CpuAttention, BatchedDifferentLengths) {
  const std::size_t lens[] = {1, 1000, 65, 4097, 31};
  std::vector<std::unique_ptr<TqCase>> cases;
  for (int i = 0; i < 5; ++i) cases.push_back(std::make_unique<TqCase>(128, 2, 4, lens[i], 4 - i % 3, 2 + i % 3, 300));
  const int H = 8, d = 128;
  const AttentionParams p = params(d);
  std::vector<std::vector<float>> qs, outs;
  std::vector<std::vector<double>> want;
  for (auto& c : cases) {
    qs.push_back(test::gaussian(H * d, c->n));
    want.emplace_back(H * d);
    attention_compressed(c->keys, c->values, c->n, qs.back().data(), H, p, want.back().data());
  }
  for (SimdLevel l : available_simd_levels()) {
    ScopedSimdLevel g(l);
    outs.assign(cases.size(), std::vector<float>(H * d));
    std::vector<cpu::TqSequence> seqs;
    for (std::size_t i = 0; i < cases.size(); ++i)
      seqs.push_back({cases[i]->fkeys, cases[i]->fvalues, cases[i]->n, 0, qs[i].data(), outs[i].data()});
    cpu::attention_tq_mse_batched(seqs, H, p, 2);
    for (std::size_t i = 0; i < cases.size(); ++i)
      for (int h = 0; h < H; ++h)
        ASSERT_LT(test::rel_err(&outs[i][h * d], &want[i][h * d], d), kAttnTol)
            << cases[i]->shape() << " sequence " << i << " head " << h;
  }
}

TEST(CpuAttention, CalledFromThreadedHost) {
  // Two host threads call at once: one gets the pool, the other runs inline; both correct.
  TqCase c(128, 2, 4, 2000, 4, 4, 500);
  const int H = 8, d = 128;
  const auto q = test::gaussian(H * d, 9);
  std::vector<double> want(H * d);
  attention_compressed(c.keys, c.values, c.n, q.data(), H, params(d), want.data());
  std::vector<float> a(H * d), b(H * d);
  std::thread t1([&] { for (int i = 0; i < 5; ++i) cpu::attention_tq_mse(c.fkeys, c.fvalues, c.n, q.data(), H, params(d), a.data()); });
  std::thread t2([&] { for (int i = 0; i < 5; ++i) cpu::attention_tq_mse(c.fkeys, c.fvalues, c.n, q.data(), H, params(d), b.data()); });
  t1.join();
  t2.join();
  EXPECT_LT(test::rel_err(a.data(), want.data(), a.size()), kAttnTol);
  EXPECT_LT(test::rel_err(b.data(), want.data(), b.size()), kAttnTol);
}

TEST(CpuAttention, DenseBaselines) {
  for (int d : {64, 80, 128, 256})
    for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1000}}) {
      const int kvh = 2, ratio = d == 80 ? 5 : 4, H = kvh * ratio;
      auto k = test::gaussian(n * kvh * d, n + d), v = test::gaussian(n * kvh * d, n + d + 1);
      const auto q = test::gaussian(H * d, 3);
      std::vector<std::uint16_t> k16(k.size()), v16(v.size());
      for (std::size_t i = 0; i < k.size(); ++i) {
        k16[i] = float_to_half(k[i]);
        v16[i] = float_to_half(v[i]);
      }
      std::vector<float> kr(k.size()), vr(v.size());
      for (std::size_t i = 0; i < k.size(); ++i) {
        kr[i] = half_to_float(k16[i]);
        vr[i] = half_to_float(v16[i]);
      }
      const AttentionParams p = params(d, n > 100 ? 700 : 0, n == 33 ? 4.0 : 0);
      std::vector<double> w32(H * d), w16(H * d);
      attention_exact(k.data(), v.data(), n, kvh, d, q.data(), H, p, w32.data());
      attention_exact(kr.data(), vr.data(), n, kvh, d, q.data(), H, p, w16.data());
      for (SimdLevel l : available_simd_levels()) {
        ScopedSimdLevel g(l);
        SCOPED_TRACE(detail::concat("dense d=", d, " n=", n, " level=", simd_level_name(l)));
        std::vector<float> o(H * d);
        cpu::attention_dense(k.data(), v.data(), cpu::DType::kF32, n, kvh, d, q.data(), H, p, o.data());
        for (int h = 0; h < H; ++h) ASSERT_LT(test::rel_err(&o[h * d], &w32[h * d], d), kAttnTol) << "fp32 head " << h;
        cpu::attention_dense(k16.data(), v16.data(), cpu::DType::kF16, n, kvh, d, q.data(), H, p, o.data());
        for (int h = 0; h < H; ++h) ASSERT_LT(test::rel_err(&o[h * d], &w16[h * d], d), kAttnTol) << "fp16 head " << h;
      }
    }
}

TEST(CpuAttention, StreamChecksum) {
  std::vector<std::uint8_t> data(1 << 20 | 77);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 131 + (i >> 9));
  std::uint64_t want = 0;
  {
    ScopedSimdLevel g(SimdLevel::kScalar);
    want = cpu::stream_bytes(data.data(), data.size(), 1);
  }
  for (SimdLevel l : available_simd_levels()) {
    ScopedSimdLevel g(l);
    for (int off : {0, 1, 3}) {
      // xor of all 8-byte words depends on alignment of the split; compare same-offset scalar runs
      std::uint64_t ref;
      {
        ScopedSimdLevel s(SimdLevel::kScalar);
        ref = cpu::stream_bytes(data.data() + off, data.size() - off, 2);
      }
      EXPECT_EQ(cpu::stream_bytes(data.data() + off, data.size() - off, 2), ref) << simd_level_name(l);
    }
  }
  (void)want;
}

TEST(CpuAttention, FmaPeakDoesTheWork) {
  // The multiply-add baseline counts its work from the chains' results: macs rounded up to whole steps
  // of 12 chains x lanes per thread, at every level (a level that skipped or merged steps would not).
  for (SimdLevel l : available_simd_levels()) {
    ScopedSimdLevel g(l);
    const std::uint64_t lanes = l == SimdLevel::kAvx512 ? 16 : l == SimdLevel::kAvx2 ? 8 : 1;
    for (int thr : {1, 2})
      for (std::uint64_t macs : {1ull, 12ull * lanes, 12ull * lanes * 1000 + 5, 3000017ull}) {
        // thr pieces, or fewer where the pool has fewer threads (TURBOKV_THREADS, a 1-core machine)
        const std::uint64_t step = 12 * lanes, got = cpu::fma_peak(macs, thr);
        bool match = false;
        for (std::uint64_t t = 1; t <= static_cast<std::uint64_t>(thr); ++t)
          match = match || got == ((macs + step - 1) / step + t - 1) / t * t * step;
        EXPECT_TRUE(match) << simd_level_name(l) << " macs " << macs << " threads " << thr << ": " << got;
      }
    EXPECT_EQ(cpu::fma_peak(0, 2), 0u);
    EXPECT_THROW(cpu::fma_peak(1ull << 40, 1), std::invalid_argument);
  }
}

TEST(CpuAttention, Errors) {
  TqCase c(64, 2, 2, 10, 4, 4, 1);
  const auto q = test::gaussian(4 * 64, 1);
  std::vector<float> out(4 * 64);
  auto msg = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_NE(msg([&] { cpu::attention_tq_mse(c.fkeys, c.fvalues, 10, q.data(), 3, params(64), out.data()); })
                .find("num_heads = 3"), std::string::npos);
  EXPECT_NE(msg([&] { cpu::attention_tq_mse(c.fkeys, c.fvalues, 0, q.data(), 4, params(64), out.data()); })
                .find("num_tokens = 0"), std::string::npos);
  EXPECT_NE(msg([&] { cpu::attention_tq_mse(c.fkeys, c.fvalues, 10, q.data(), 4, params(64), out.data(), 11); })
                .find("context = 11"), std::string::npos);
  AttentionParams bad = params(64);
  bad.softmax_scale = 0;
  EXPECT_NE(msg([&] { cpu::attention_tq_mse(c.fkeys, c.fvalues, 10, q.data(), 4, bad, out.data()); })
                .find("softmax_scale = 0"), std::string::npos);
  std::vector<cpu::TqHead> one(c.fvalues.begin(), c.fvalues.begin() + 1);
  EXPECT_NE(msg([&] { cpu::attention_tq_mse(c.fkeys, one, 10, q.data(), 4, params(64), out.data()); })
                .find("values.size() = 1"), std::string::npos);
  EXPECT_NE(msg([&] { cpu::attention_dense(q.data(), q.data(), cpu::DType::kF32, 1, 1, 72, q.data(), 1, params(64), out.data()); })
                .find("head_dim = 72"), std::string::npos);
}

TEST(CpuAttention, ZzReportWorstError) {
  std::printf("worst per-head relative error of the fused attention against the reference: %.3g\n", g_worst);
}
