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
