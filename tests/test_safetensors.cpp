// safetensors: round trip, and every kind of malformed file rejected with a
// message naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "turbokv/half.h"
#include "turbokv/safetensors.h"

using namespace turbokv;
namespace fs = std::filesystem;

namespace {

std::string tmp(const std::string& name) { return (fs::temp_directory_path() / ("turbokv_st_" + name)).string(); }

std::vector<std::uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> b;
  for (float f : v) {
    const auto h = float_to_half(f);
    b.push_back(h & 0xff);
    b.push_back(h >> 8);
  }
  return b;
}

void write_raw(const std::string& path, const std::string& header, const std::vector<std::uint8_t>& data,
               std::uint64_t hlen_override = 0) {
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t hlen = hlen_override ? hlen_override : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((hlen >> (8 * i)) & 0xff));
  f << header;
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

void expect_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    SafetensorsFile::read(path);
    ADD_FAILURE() << "accepted " << path;
  } catch (const std::runtime_error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

}  // namespace

TEST(Safetensors, RoundTrip) {
  const std::string p = tmp("ok.safetensors");
  std::vector<float> a = {1, -2, 0.5, 3, 4, 5};
  std::vector<std::uint8_t> f32(24);
  std::memcpy(f32.data(), a.data(), 24);
  write_safetensors(p, {{"a", "F16", {2, 3}, f16_bytes(a)}, {"b", "F32", {6}, f32}}, {{"model", "x"}});
  const auto f = SafetensorsFile::read(p);
  EXPECT_EQ(f.meta("model"), "x");
  EXPECT_EQ(f.load_f32("a"), a);
  EXPECT_EQ(f.load_f32("b"), a);
  EXPECT_EQ(f.info("a").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_THROW(f.info("c"), std::runtime_error);
  EXPECT_THROW(f.meta("nope"), std::runtime_error);
}

TEST(Safetensors, RejectsMalformedFiles) {
  const auto data = f16_bytes({1, 2, 3, 4});
  const std::string good = R"({"t":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}})";
  std::string p = tmp("trunc_len.safetensors");
  { std::ofstream(p, std::ios::binary) << "abc"; }
  expect_error(p, {p, "truncated"});
  p = tmp("hlen.safetensors");
  write_raw(p, good, data, 1u << 30);
  expect_error(p, {p, "header length"});
  p = tmp("json.safetensors");
  write_raw(p, "{not json", data);
  expect_error(p, {p, "JSON"});
  p = tmp("dtype.safetensors");
  write_raw(p, R"({"t":{"dtype":"I4","shape":[2,2],"data_offsets":[0,8]}})", data);
  expect_error(p, {p, "'t'", "I4"});
  p = tmp("offsets.safetensors");
  write_raw(p, R"({"t":{"dtype":"F16","shape":[2,2],"data_offsets":[0,800]}})", data);
  expect_error(p, {p, "'t'", "out of range"});
  p = tmp("shape.safetensors");
  write_raw(p, R"({"t":{"dtype":"F16","shape":[2,3],"data_offsets":[0,8]}})", data);
  expect_error(p, {p, "'t'", "do not match"});
  p = tmp("truncdata.safetensors");
  write_raw(p, good, {data.begin(), data.begin() + 5});
  expect_error(p, {p, "'t'"});
  p = tmp("missing.safetensors");
  std::remove(p.c_str());
  expect_error(p, {p, "cannot open"});
}

TEST(Safetensors, WriterRejectsSizeMismatch) {
  EXPECT_THROW(write_safetensors(tmp("bad.safetensors"), {{"a", "F16", {3}, {0, 0}}}, {}), std::invalid_argument);
}
