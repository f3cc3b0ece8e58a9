// Attention on the compressed cache equals exact fp64 attention over the
// decoded keys and values (within 1e-5 relative), for every method, head_dim
// 64..256, GQA ratios 1..16, sliding window, soft-capping and causal prefixes.
#include <gtest/gtest.h>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"

using namespace turbokv;

namespace {

struct CompressedCase {
  int d, kvh, ratio;
  std::size_t n;
  std::vector<std::unique_ptr<Codec>> kc, vc;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<float> k_dec, v_dec;  // [n, kvh, d] decoded
  std::vector<EncodedHead> keys, values;

  CompressedCase(Method km, double kbits, Method vm, double vbits, int d_, int kvh_, int ratio_, std::size_t n_,
                 bool center = false)
      : d(d_), kvh(kvh_), ratio(ratio_), n(n_), k_dec(n_ * kvh_ * d_), v_dec(n_ * kvh_ * d_) {
    for (int g = 0; g < kvh; ++g) {
      auto k = test::gaussian(n * d, 100 + g), v = test::gaussian(n * d, 200 + g);
      for (std::size_t t = 0; t < n; ++t) k[t * d] *= 6;  // an outlier channel
      CodecConfig cfg;
      cfg.head_dim = d;
      if (d % cfg.group_size) cfg.group_size = 16;  // KIVI value groups must divide head_dim
      cfg.method = km;
      cfg.bits = kbits;
      cfg.seed = 1 + g;
      cfg.center = center;
      kc.push_back(make_codec(cfg));
      cfg.center = false;
      cfg.method = vm;
      cfg.bits = vbits;
      cfg.role = Role::kValue;
      vc.push_back(make_codec(cfg));
      kc[g]->calibrate(k.data(), n);
      vc[g]->calibrate(v.data(), n);
      kb.emplace_back(kc[g]->encoded_bytes(n));
      vb.emplace_back(vc[g]->encoded_bytes(n));
      kc[g]->encode(k.data(), n, kb[g].data());
      vc[g]->encode(v.data(), n, vb[g].data());
      std::vector<float> dk(n * d), dv(n * d);
      kc[g]->decode(kb[g].data(), n, dk.data());
      vc[g]->decode(vb[g].data(), n, dv.data());
      for (std::size_t t = 0; t < n; ++t)
        for (int i = 0; i < d; ++i) {
          k_dec[(t * kvh + g) * d + i] = dk[t * d + i];
          v_dec[(t * kvh + g) * d + i] = dv[t * d + i];
        }
      keys.push_back({kc[g].get(), kb[g].data()});
      values.push_back({vc[g].get(), vb[g].data()});
    }
  }

  /// Max relative error over heads between compressed and exact-on-decoded attention.
  double check(const AttentionParams& p, std::size_t context, std::uint64_t qseed) {
    const int H = kvh * ratio;
    auto q = test::gaussian(static_cast<std::size_t>(H) * d, qseed);
    std::vector<double> oc(H * d), oe(H * d), wc(H * (context ? context : n)), we(wc.size());
    attention_compressed(keys, values, n, q.data(), H, p, oc.data(), wc.data(), context);
    attention_exact(k_dec.data(), v_dec.data(), context ? context : n, kvh, d, q.data(), H, p, oe.data(), we.data());
    double worst = 0;
    for (int h = 0; h < H; ++h) worst = std::max(worst, test::rel_err(&oc[h * d], &oe[h * d], d));
    worst = std::max(worst, test::rel_err(wc.data(), we.data(), wc.size()));
    return worst;
  }
};

}  // namespace

class AttentionGqa : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(AttentionGqa, CompressedEqualsExactOnDecoded) {
  const auto [d, ratio] = GetParam();
  struct Pair { Method km; double kb; Method vm; double vb; };
  const Pair pairs[] = {{Method::kTurboMse, 3, Method::kTurboMse, 2}, {Method::kTurboProd, 3, Method::kTurboMse, 4},
                        {Method::kQjl, 1, Method::kKivi, 2},          {Method::kRvq, 2, Method::kPvq, 2},
                        {Method::kPolar, 4, Method::kFp8, 8},         {Method::kKivi, 4, Method::kFp16, 16},
                        {Method::kTurboMse, 2.5, Method::kRvq, 1}};

  for (const auto& pr : pairs) {
    if (pr.km == Method::kPolar && d % 16) continue;
    CompressedCase s(pr.km, pr.kb, pr.vm, pr.vb, d, 2, ratio, 37);
    AttentionParams p;
    p.softmax_scale = 1.0 / std::sqrt(double(d));
    EXPECT_LT(s.check(p, 0, 1), 1e-5) << method_name(pr.km) << "/" << method_name(pr.vm) << " d=" << d << " gqa=" << ratio;
    p.window = 16;
    p.softcap = 5.0;
    EXPECT_LT(s.check(p, 0, 2), 1e-5) << "window+softcap " << method_name(pr.km);
    p.window = 0;
    EXPECT_LT(s.check(p, 20, 3), 1e-5) << "causal prefix " << method_name(pr.km);
  }
  // Key mean removal (CodecConfig::center) around a scalar and a sketch method.
  for (Method km : {Method::kTurboMse, Method::kTurboProd}) {
    CompressedCase s(km, 3, Method::kTurboMse, 3, d, 2, ratio, 29, true);
    AttentionParams p;
    p.softmax_scale = 1.0 / std::sqrt(double(d));
    EXPECT_LT(s.check(p, 0, 4), 1e-5) << "centered " << method_name(km) << " d=" << d;
  }
}

INSTANTIATE_TEST_SUITE_P(All, AttentionGqa,
                         ::testing::Combine(::testing::Values(64, 80, 96, 128, 256),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 16)));

TEST(Attention, ExactMatchesHandComputedSoftmax) {
  // Two tokens, one head, d = 8: weights are softmax of the scaled dots.
  std::vector<float> k(16, 0.0f), v(16, 0.0f), q(8, 0.0f);
  k[0] = 1;
  k[8 + 1] = 1;
  v[0] = 3;
  v[8 + 0] = -1;
  q[0] = 2;
  AttentionParams p;
  p.softmax_scale = 0.5;
  std::vector<double> out(8), w(2);
  attention_exact(k.data(), v.data(), 2, 1, 8, q.data(), 1, p, out.data(), w.data());
  const double e = std::exp(1.0), w0 = e / (e + 1.0);
  EXPECT_NEAR(w[0], w0, 1e-15);
  EXPECT_NEAR(out[0], 3 * w0 - (1 - w0), 1e-15);
}
