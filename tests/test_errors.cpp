// Bad input throws std::invalid_argument naming the argument and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/bench.h"
#include "turbokv/codec.h"

using namespace turbokv;

namespace {
template <class F>
void expect_message(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}
CodecConfig cfg(Method m, double bits, int d) {
  CodecConfig c;
  c.method = m;
  c.bits = bits;
  c.head_dim = d;
  return c;
}
}  // namespace

TEST(Errors, HeadDim) {
  expect_message([] { make_codec(cfg(Method::kTurboMse, 2, 0)); }, {"head_dim", "0"});
  expect_message([] { make_codec(cfg(Method::kTurboMse, 2, 70)); }, {"head_dim", "70"});
  expect_message([] { make_codec(cfg(Method::kPolar, 2, 72)); }, {"head_dim", "72"});
}

TEST(Errors, Bits) {
  expect_message([] { make_codec(cfg(Method::kTurboMse, 5, 64)); }, {"bits", "5"});
  expect_message([] { make_codec(cfg(Method::kTurboMse, 0, 64)); }, {"bits", "0"});
  expect_message([] { make_codec(cfg(Method::kQjl, 2, 64)); }, {"bits", "2"});
  expect_message([] { make_codec(cfg(Method::kTurboProd, 2.5, 64)); }, {"bits", "2.5"});
  expect_message([] { parse_method("tq"); }, {"method", "tq"});
}

TEST(Errors, NonFiniteInput) {
  auto c = make_codec(cfg(Method::kTurboMse, 2, 64));
  auto x = test::gaussian(2 * 64, 1);
  std::vector<std::uint8_t> codes(c->encoded_bytes(2), 0x5a);
  const auto before = codes;
  x[70] = std::numeric_limits<float>::quiet_NaN();
  expect_message([&] { c->encode(x.data(), 2, codes.data()); }, {"x[70]", "nan"});
  EXPECT_EQ(codes, before) << "a rejected encode must not write";
  x[70] = std::numeric_limits<float>::infinity();
  expect_message([&] { c->encode(x.data(), 2, codes.data()); }, {"x[70]", "inf"});
  x[70] = 1e5f;
  expect_message([&] { c->encode(x.data(), 2, codes.data()); }, {"||x[1]||", "32768"});
  EXPECT_EQ(codes, before);
  x[70] = std::numeric_limits<float>::quiet_NaN();
  std::vector<double> st(64);
  expect_message([&] { c->prepare_query(x.data() + 64, st.data()); }, {"q[6]"});
}

TEST(Errors, Calibration) {
  auto c = make_codec(cfg(Method::kPvq, 2, 64));
  auto x = test::gaussian(64, 1);
  expect_message([&] { c->calibrate(x.data(), 0); }, {"n", "0"});
}

TEST(Errors, CalibrationRequired) {
  auto c = make_codec(cfg(Method::kPvq, 2, 64));
  auto x = test::gaussian(64, 1);
  std::vector<std::uint8_t> codes(c->encoded_bytes(1));
  expect_message([&] { c->encode(x.data(), 1, codes.data()); }, {"pvq", "calibrate"});
}

TEST(Errors, AttentionShapes) {
  auto c = make_codec(cfg(Method::kTurboMse, 2, 64));
  auto x = test::gaussian(64 * 4, 1);
  std::vector<std::uint8_t> codes(c->encoded_bytes(4));
  c->encode(x.data(), 4, codes.data());
  std::vector<EncodedHead> kv = {{c.get(), codes.data()}, {c.get(), codes.data()}};
  std::vector<double> out(64 * 3);
  AttentionParams p;
  p.softmax_scale = 0.125;
  expect_message([&] { attention_compressed(kv, kv, 4, x.data(), 3, p, out.data()); }, {"num_heads", "3"});
  expect_message([&] { attention_compressed(kv, kv, 0, x.data(), 2, p, out.data()); }, {"num_tokens", "0"});
  expect_message([&] { attention_compressed(kv, kv, 4, x.data(), 2, p, out.data(), nullptr, 5); }, {"context", "5"});
  std::vector<EncodedHead> one = {{c.get(), codes.data()}};
  expect_message([&] { attention_compressed(kv, one, 4, x.data(), 2, p, out.data()); }, {"values.size()", "1"});
  p.softmax_scale = -1;
  expect_message([&] { attention_compressed(kv, kv, 4, x.data(), 2, p, out.data()); }, {"softmax_scale", "-1"});
  p.softmax_scale = 0.125;
  auto c80 = make_codec(cfg(Method::kTurboMse, 2, 80));
  std::vector<EncodedHead> mixed = {{c.get(), codes.data()}, {c80.get(), codes.data()}};
  expect_message([&] { attention_compressed(mixed, mixed, 4, x.data(), 2, p, out.data()); }, {"head_dim", "80"});
  std::vector<float> v(4 * 2 * 64, 0.0f), k = v;
  k[5] = std::numeric_limits<float>::quiet_NaN();
  expect_message([&] { attention_exact(k.data(), v.data(), 4, 2, 64, x.data(), 2, p, out.data()); }, {"k[5]"});
  expect_message([&] { attention_exact(v.data(), v.data(), 4, 2, 64, x.data(), 3, p, out.data()); }, {"num_heads", "3"});
}

TEST(Errors, ScoreRange) {
  auto c = make_codec(cfg(Method::kTurboMse, 2, 64));
  std::vector<std::uint8_t> codes(c->encoded_bytes(4));
  std::vector<double> st(64), out(8);
  expect_message([&] { c->scores(st.data(), codes.data(), 4, 2, 6, out.data()); }, {"t1", "6"});
}

TEST(Errors, KiviScaleOverflowRejectedBeforeWriting) {
  // A 1-bit key group spanning -32760..32760 would need scale 65520 (> fp16 max).
  auto c = make_codec(cfg(Method::kKivi, 1, 8));
  std::vector<float> x(16, 0.0f);
  x[0] = -32760.0f;
  x[8] = 32760.0f;
  std::vector<std::uint8_t> codes(c->encoded_bytes(2), 0x5a);
  const auto before = codes;
  expect_message([&] { c->encode(x.data(), 2, codes.data()); }, {"kivi", "scale"});
  EXPECT_EQ(codes, before);
}

// `turbokv bench --configs`: shapes parsed in order; a malformed item is named.
TEST(BenchConfigs, ParsesShapesAndNamesBadItems) {
  const auto v = parse_bench_configs("128:32:8,64:9:3,256:4:1");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].head_dim, 64);
  EXPECT_EQ(v[1].num_heads, 9);
  EXPECT_EQ(v[1].num_kv_heads, 3);
  EXPECT_EQ(v[2].head_dim, 256);
  for (const char* bad : {"64:3:2", "64:3", "", "128:32:8,", "128:32:8x", "0:4:1", "128:-8:-8"})
    expect_message([&] { (void)parse_bench_configs(bad); }, {"--configs"});
  expect_message([&] { (void)parse_bench_configs("128:32:8,64:9"); }, {"--configs", "'64:9'"});
}

// The CSV (turbokv bench --csv, turbokv_cuda_bench --csv): the header's columns and one row's values in order.
TEST(BenchConfigs, CsvLineHasTheHeaderColumns) {
  BenchRow r;
  r.op = "decode_attention", r.method = "tq-mse", r.bits = 3.5, r.context = 4096, r.head_dim = 128;
  r.num_heads = 32, r.num_kv_heads = 8, r.batch = 16, r.threads = 0, r.time_us = 12.25, r.baseline = "fp16";
  r.baseline_time_us = 49, r.speedup = 4, r.gbps = 3800.5, r.max_err = 1e-3, r.rel_err = 2e-4, r.check_tol = 3e-3;
  EXPECT_EQ(bench_csv_header(),
            "op,method,bits,context,head_dim,num_heads,num_kv_heads,batch,threads,time_us,baseline,baseline_time_us,"
            "speedup,gbps,max_err,rel_err,check_tol\n");
  EXPECT_EQ(bench_csv_line(r), "decode_attention,tq-mse,3.5,4096,128,32,8,16,0,12.250,fp16,49.000,4.0000,3800.50,0.001,"
                               "0.0002,0.003\n");
  // Text fields with commas or quotes are quoted (RFC 4180), so every line keeps 17 columns.
  r.method = "tq-prod keys (paged, \"cuda\" cores)";
  EXPECT_EQ(bench_csv_line(r), "decode_attention,\"tq-prod keys (paged, \"\"cuda\"\" cores)\",3.5,4096,128,32,8,16,0,12.250,"
                               "fp16,49.000,4.0000,3800.50,0.001,0.0002,0.003\n");
}
