// probe (session 35; session 39 added COLD=1: a 512 MB write between calls, so the cache comes from memory, and the median): TurboQuant-MSE fused attention via attention_codec, timed in a loop. Args: bits reps threads precision(0 fp32, 1 bf16, 2 int8) n H kvh d
// (defaults 4 50 1 2 32768 32 8 128). Build: g++ -O2 -std=c++20 -Iinclude int8-probe-s35.cpp build/libturbokv.a -lpthread -lfmt
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
using namespace turbokv;
int main(int argc, char** argv) {
  const double bits = argc > 1 ? atof(argv[1]) : 4;
  const int reps = argc > 2 ? atoi(argv[2]) : 50;
  const int thr = argc > 3 ? atoi(argv[3]) : 1;
  const int prec = argc > 4 ? atoi(argv[4]) : 2;
  const std::size_t n = argc > 5 ? atoi(argv[5]) : 32768;
  const int d = argc > 8 ? atoi(argv[8]) : 128, kvh = argc > 7 ? atoi(argv[7]) : 8, H = argc > 6 ? atoi(argv[6]) : 32;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> rows(n * d), q(H * d), out(H * d);
  for (auto& x : q) x = nd(rng);
  std::vector<std::unique_ptr<Codec>> refs;
  std::vector<std::unique_ptr<cpu::CpuCodec>> codecs;
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<cpu::CodecHead> keys, values;
  bufs.reserve(2 * kvh);
  for (int g = 0; g < kvh; ++g)
    for (Role role : {Role::kKey, Role::kValue}) {
      for (auto& x : rows) x = nd(rng);
      CodecConfig cfg; cfg.method = Method::kTurboMse; cfg.bits = bits; cfg.head_dim = d; cfg.role = role; cfg.seed = 7 + g;
      refs.push_back(make_codec(cfg));
      if (refs.back()->needs_calibration()) refs.back()->calibrate(rows.data(), std::min<std::size_t>(n, 4096));
      codecs.push_back(cpu::make_cpu_codec(*refs.back()));
      bufs.emplace_back(codecs.back()->encoded_bytes(n));
      codecs.back()->encode(rows.data(), n, bufs.back().data(), 1);
      (role == Role::kKey ? keys : values).push_back({codecs.back().get(), bufs.back().data()});
    }
  AttentionParams p; p.softmax_scale = 1.0 / std::sqrt(d); p.precision = static_cast<AttentionPrecision>(prec);
  cpu::attention_codec(keys, values, n, q.data(), H, p, out.data(), 0, thr);
  double best = 1e30, sum = 0;
  static std::vector<char> junk(std::getenv("COLD") ? (512u << 20) : 0);
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    for (std::size_t i = 0; i < junk.size(); i += 64) junk[i] += 1;
    auto a = std::chrono::steady_clock::now();
    cpu::attention_codec(keys, values, n, q.data(), H, p, out.data(), 0, thr);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
    best = std::min(best, us); sum += us; ts.push_back(us);
  }
  std::sort(ts.begin(), ts.end()); std::printf("median %.1f ", ts[ts.size()/2]);
  double cs = 0; for (float x : out) cs += x;
  std::printf("H %d kvh %d d %d bits %.1f prec %d thr %d n %zu: best %.1f us, mean %.1f us, checksum %.9g\n", H, kvh, d, bits, prec, thr, n, best, sum / reps, cs);
}
