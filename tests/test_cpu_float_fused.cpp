// The fused fp8 / fp16 codec attention kernel of cpu::attention_codec (CodecAttentionPath::kFp8Fp16Fused,
// kernels_simd.h Fp8Src and DenseSrc on per-head blocks) against the fp64 reference attention_compressed,
// within 1e-5 relative per head, at every SIMD level this CPU has (the scalar level takes the generic
// path and must agree too), 1 and 2 threads: fp8 and fp16 keys x values, head_dim 16..1024, GQA 1..16,
// lengths 1..4097, window and soft-cap, a context shorter than the block, every finite e4m3 code byte
// (subnormals, +-0, +-448) with scales from 2^-24 to 146, each finite e4m3 value decoded exactly (one
// token: the output is the value row itself), the batched call, the dispatch decision (head_dim not a
// multiple of 16, or another codec on either side, goes generic), and a negative control (a perturbed
// fp8 scale in the fast path's bytes must break the tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "turbokv/formats.h"
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

/// kvh heads of fp8 (bits 8) or fp16 (bits 16) keys and values, n tokens. all_codes: fp8 code bytes
/// cycling through every finite e4m3 value (0x7f / 0xff, the NaN codes, skipped) with per-token scales
/// from 2^-24 to 146 (values) and those over 8 (keys; the smallest rounds to 0 in fp16); else Gaussian
/// data with an outlier channel, encoded by the reference codecs.
struct FloatHeads : test::CodecHeads {
  FloatHeads(int d_, int kvh_, int ratio_, std::size_t n_, int kbits, int vbits, std::uint64_t seed,
             bool all_codes = false)
      : CodecHeads(d_, kvh_, ratio_, n_) {
    for (int g = 0; g < kvh; ++g)
      for (int kv = 0; kv < 2; ++kv) {
        const int bits = kv == 0 ? kbits : vbits;
        CodecConfig c;
        c.method = bits == 8 ? Method::kFp8 : Method::kFp16;
        c.bits = bits;
        c.head_dim = d;
        c.role = kv == 0 ? Role::kKey : Role::kValue;
        auto& refs = kv == 0 ? rk : rv;
        auto& bufs = kv == 0 ? kb : vb;
        refs.push_back(make_codec(c));
        bufs.emplace_back(refs.back()->encoded_bytes(n));
        auto& b = bufs.back();
        if (all_codes && bits == 8) {
          static const float kScales[] = {5.96046448e-8f, 0.001f, 0.03125f, 0.5f, 1.0f, 3.0f, 146.0f};
          for (std::size_t i = 0; i < n * d; ++i) {
            std::uint8_t code = static_cast<std::uint8_t>((i * 7 + seed + kv) % 256);
            if ((code & 0x7f) == 0x7f) code ^= 1;  // not a NaN code
            b[i] = code;
          }
          for (std::size_t t = 0; t < n; ++t) store_half(b.data() + n * d + 2 * t, kScales[(t + g) % 7] / (kv ? 1 : 8));
        } else {
          auto x = test::gaussian(n * d, seed * 31 + 7 * g + kv);
          for (std::size_t t = 0; t < n; ++t) x[t * d + 1] = x[t * d + 1] * 6 + 1;  // an outlier channel
          refs.back()->encode(x.data(), n, b.data());
        }
      }
    for (int g = 0; g < kvh; ++g) {
      keys.push_back({rk[g].get(), kb[g].data()});
      values.push_back({rv[g].get(), vb[g].data()});
    }
    remake();
  }
};

cpu::CodecAttentionPath expected_path(int d) {
  return simd_level() == SimdLevel::kScalar || d % 16 != 0 ? cpu::CodecAttentionPath::kGeneric
                                                           : cpu::CodecAttentionPath::kFp8Fp16Fused;
}

/// test::check_fused_all_levels with this file's expected path and tolerance.
void check_all_levels(FloatHeads& h, const float* q, const AttentionParams& p, const std::vector<double>& want,
                      std::size_t ctx = 0) {
  test::check_fused_all_levels(h, q, p, want, [&] { return expected_path(h.d); }, kTol, ctx);
}

AttentionParams plain(int d) { return AttentionParams{1.0 / std::sqrt(d), 0, 0}; }
const AttentionParams kWindowCap{0.3, 37, 20.0};

}  // namespace

TEST(CpuFloatFused, ShapesLengthsAndGqa) {
  struct Shape {
    int d, kvh, ratio;
    std::size_t n;
    int kbits, vbits;
  };
  for (const Shape& s : std::vector<Shape>{{64, 1, 1, 1, 8, 8},      {64, 2, 4, 2, 8, 16},    {96, 1, 5, 31, 16, 8},
                                           {96, 2, 8, 65, 16, 16},   {112, 1, 16, 64, 8, 8},  {112, 3, 6, 1000, 8, 16},
                                           {128, 1, 7, 63, 16, 8},   {128, 2, 3, 129, 8, 8},  {128, 1, 8, 4097, 8, 8},
                                           {128, 2, 16, 65, 16, 16}, {256, 1, 4, 1000, 8, 8}, {256, 2, 1, 31, 16, 8},
                                           {80, 2, 4, 300, 8, 8},    {16, 1, 4, 100, 8, 16},  {48, 2, 5, 129, 16, 8},
                                           {512, 1, 4, 300, 8, 8},   {1024, 1, 2, 65, 16, 8}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " kvh " + std::to_string(s.kvh) + " gqa " + std::to_string(s.ratio) +
                 " n " + std::to_string(s.n) + " kbits " + std::to_string(s.kbits) + " vbits " +
                 std::to_string(s.vbits));
    FloatHeads h(s.d, s.kvh, s.ratio, s.n, s.kbits, s.vbits, 7 + s.d + s.n);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 11);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
    if (s.n > 2) check_all_levels(h, q.data(), plain(h.d), reference(h, q.data(), plain(h.d), s.n - 2), s.n - 2);
  }
}

TEST(CpuFloatFused, EveryFiniteE4m3Code) {
  for (int vbits : {8, 16}) {
    SCOPED_TRACE("vbits " + std::to_string(vbits));
    FloatHeads h(128, 2, 4, 1000, 8, vbits, 3, true);
    const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 12);
    for (const AttentionParams& p : {plain(h.d), kWindowCap}) check_all_levels(h, q.data(), p, reference(h, q.data(), p));
  }
}

TEST(CpuFloatFused, BatchedSequences) {
  FloatHeads a(128, 2, 4, 1000, 8, 8, 41), b(128, 2, 4, 65, 16, 8, 42);
  test::check_batched(a, b, kWindowCap, 60, kTol);
}

TEST(CpuFloatFused, PerturbedScaleBreaksTheTolerance) {
  // Negative control: every stored fp8 key scale times 1.01 in the bytes the fast path sees.
  FloatHeads h(128, 2, 4, 1000, 8, 8, 61);
  const auto q = test::gaussian(static_cast<std::size_t>(h.heads()) * h.d, 17);
  const auto want = reference(h, q.data(), plain(h.d));
  std::vector<std::vector<std::uint8_t>> kb2 = h.kb;
  for (int g = 0; g < h.kvh; ++g)
    for (std::size_t t = 0; t < h.n; ++t) {
      std::uint8_t* p = kb2[g].data() + h.n * h.d + 2 * t;
      store_half(p, half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))) * 1.01f);
    }
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    std::vector<cpu::CodecHead> pk;
    for (int g = 0; g < h.kvh; ++g) pk.push_back({h.fk[g].get(), kb2[g].data()});
    std::vector<float> ok(want.size()), gk(want.size());
    cpu::attention_codec(h.fkeys, h.fvalues, h.n, q.data(), h.heads(), plain(h.d), ok.data(), 0, 2);
    cpu::attention_codec(pk, h.fvalues, h.n, q.data(), h.heads(), plain(h.d), gk.data(), 0, 2);
    EXPECT_LE(max_err(ok, want, h.heads(), h.d), kTol) << simd_level_name(lvl);
    EXPECT_GT(max_err(gk, want, h.heads(), h.d), 10 * kTol) << simd_level_name(lvl);
  }
}

TEST(CpuFloatFused, OneTokenOutputIsTheValueRowExactly) {
  // With one token the softmax weight is 1, so each output coordinate is e4m3(code) * scale rounded
  // once, as the reference decodes it: every finite code byte must come back bit for bit.
  const int d = 256;
  FloatHeads h(d, 1, 2, 1, 8, 8, 81);
  std::vector<std::uint8_t>& vb = h.vb[0];
  for (int j = 0; j < d; ++j) vb[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>((j & 0x7f) == 0x7f ? 0 : j);
  store_half(vb.data() + d, 0.375f);
  const auto q = test::gaussian(2 * static_cast<std::size_t>(d), 19);
  const auto want = reference(h, q.data(), plain(d));
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake();
    ASSERT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path(d)) << simd_level_name(lvl);
    std::vector<float> got(want.size(), -7.0f);
    cpu::attention_codec(h.fkeys, h.fvalues, 1, q.data(), 2, plain(d), got.data());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], static_cast<float>(want[i])) << simd_level_name(lvl) << " coordinate " << i % d << " code "
                                                     << static_cast<int>(vb[i % d]);
  }
}

TEST(CpuFloatFused, DispatchDecision) {
  FloatHeads h(64, 2, 2, 10, 8, 16, 91), odd(72, 2, 2, 10, 8, 8, 92), odd40(40, 1, 2, 10, 16, 16, 93);
  CodecConfig rc;
  rc.method = Method::kRvq;
  rc.bits = 2;
  rc.head_dim = 64;
  const auto rvq = make_codec(rc);
  std::vector<std::uint8_t> rb(rvq->encoded_bytes(10));
  for (SimdLevel lvl : available_simd_levels()) {
    ScopedSimdLevel guard(lvl);
    h.remake(), odd.remake(), odd40.remake();
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, h.fvalues), expected_path(64)) << simd_level_name(lvl);
    EXPECT_EQ(cpu::attention_codec_path(odd.fkeys, odd.fvalues), cpu::CodecAttentionPath::kGeneric);
    EXPECT_EQ(cpu::attention_codec_path(odd40.fkeys, odd40.fvalues), cpu::CodecAttentionPath::kGeneric);
    const auto frvq = cpu::make_cpu_codec(*rvq);
    const std::vector<cpu::CodecHead> rv = {{frvq.get(), rb.data()}, {frvq.get(), rb.data()}};
    EXPECT_EQ(cpu::attention_codec_path(h.fkeys, rv), cpu::CodecAttentionPath::kGeneric);
    EXPECT_EQ(cpu::attention_codec_path(rv, h.fvalues), cpu::CodecAttentionPath::kGeneric);
  }
}
