// Google Benchmark cases for the CPU fast path (src/cpu). Built in CI, run by hand:
//   ./build/bench/bench_cpu --benchmark_filter=Attention
// Counters: bytes_per_second (input consumed for encode; bytes read for
// attention and stream), items_per_second (tokens), bits_per_element (all-in).
// TURBOKV_SIMD=scalar|avx2|avx512 and TURBOKV_THREADS select the level and pool size.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/half.h"
#include "turbokv/rng.h"

using namespace turbokv;

namespace {

std::vector<float> normal(std::size_t n, std::uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal());
  return v;
}

CodecConfig tq(int d, int bits, std::uint64_t seed = 1) {
  CodecConfig c;
  c.method = Method::kTurboMse;
  c.bits = bits;
  c.head_dim = d;
  c.seed = seed;
  return c;
}

// args: bits, head_dim. One head, 4096 tokens, one thread.
void BM_Encode(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0)), d = static_cast<int>(st.range(1));
  const std::size_t n = 4096;
  cpu::TqMse c(tq(d, bits));
  const auto x = normal(n * d, 1);
  std::vector<std::uint8_t> out(c.encoded_bytes(n));
  for (auto _ : st) {
    c.encode(x.data(), n, out.data(), 1);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * d * 4));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.counters["bits_per_element"] = 8.0 * c.encoded_bytes(n) / (double(n) * d);
}
BENCHMARK(BM_Encode)->ArgsProduct({{1, 2, 3, 4}, {64, 128, 256}});

void BM_EncodeReference(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0)), d = static_cast<int>(st.range(1));
  const std::size_t n = 4096;
  auto c = make_codec(tq(d, bits));
  const auto x = normal(n * d, 1);
  std::vector<std::uint8_t> out(c->encoded_bytes(n));
  for (auto _ : st) {
    c->encode(x.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * d * 4));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_EncodeReference)->ArgsProduct({{4}, {128}});

void BM_Decode(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0)), d = 128;
  const std::size_t n = 4096;
  cpu::TqMse c(tq(d, bits));
  const auto x = normal(n * d, 1);
  std::vector<std::uint8_t> codes(c.encoded_bytes(n));
  c.encode(x.data(), n, codes.data(), 1);
  std::vector<float> out(n * d);
  for (auto _ : st) {
    c.decode(codes.data(), n, out.data(), 1);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * codes.size()));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_Decode)->DenseRange(1, 4);

// Inner products of one query with packed keys (rotate the query once, score from the codes).
// args: bits, head_dim. 65536 keys, one thread; items = keys scored.
void BM_Scores(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0)), d = static_cast<int>(st.range(1));
  const std::size_t n = 65536;
  cpu::TqMse c(tq(d, bits));
  const auto x = normal(n * d, 1), q = normal(d, 2);
  std::vector<std::uint8_t> codes(c.encoded_bytes(n));
  c.encode(x.data(), n, codes.data(), 1);
  std::vector<float> out(n);
  for (auto _ : st) {
    c.scores(q.data(), codes.data(), n, 0, n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * codes.size()));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.counters["bits_per_element"] = 8.0 * codes.size() / (double(n) * d);
}
BENCHMARK(BM_Scores)->ArgsProduct({{1, 2, 3, 4}, {64, 128, 256}});

// Decode attention: head_dim 128, 32 query heads over 8 KV heads.
struct Cache {
  int d = 128, kvh = 8, H = 32;
  std::size_t n;
  std::vector<std::unique_ptr<cpu::TqMse>> codecs;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<cpu::TqHead> keys, values;
  std::vector<float> q, out;
  std::size_t bytes = 0;
  Cache(std::size_t n_, int bits) : n(n_), q(normal(32 * 128, 7)), out(32 * 128) {
    const auto x = normal(n * d, 3);
    for (int g = 0; g < kvh; ++g) {
      codecs.push_back(std::make_unique<cpu::TqMse>(tq(d, bits, 100 + g)));
      kb.emplace_back(codecs[g]->encoded_bytes(n));
      vb.emplace_back(codecs[g]->encoded_bytes(n));
      codecs[g]->encode(x.data(), n, kb[g].data());
      codecs[g]->encode(x.data(), n, vb[g].data());
      bytes += kb[g].size() + vb[g].size();
    }
    for (int g = 0; g < kvh; ++g) {
      keys.push_back({codecs[g].get(), kb[g].data()});
      values.push_back({codecs[g].get(), vb[g].data()});
    }
  }
};

AttentionParams params() {
  AttentionParams p;
  p.softmax_scale = 1.0 / std::sqrt(128.0);
  return p;
}

// args: bits, context, threads
void BM_AttentionTq(benchmark::State& st) {
  Cache c(static_cast<std::size_t>(st.range(1)), static_cast<int>(st.range(0)));
  const int threads = static_cast<int>(st.range(2));
  for (auto _ : st) {
    cpu::attention_tq_mse(c.keys, c.values, c.n, c.q.data(), c.H, params(), c.out.data(), 0, threads);
    benchmark::DoNotOptimize(c.out.data());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * c.bytes));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * c.n));
  st.counters["bits_per_element"] = 8.0 * c.bytes / (2.0 * c.n * c.kvh * c.d);
}
BENCHMARK(BM_AttentionTq)->ArgsProduct({{2, 3, 4}, {1024, 4096, 16384, 32768, 131072}, {1, 2}})->UseRealTime();

// args: fp16 (1) or fp32 (0), context, threads
void BM_AttentionDense(benchmark::State& st) {
  const bool f16 = st.range(0) == 1;
  const std::size_t n = static_cast<std::size_t>(st.range(1));
  const int threads = static_cast<int>(st.range(2)), d = 128, kvh = 8, H = 32;
  auto k = normal(n * kvh * d, 1), v = normal(n * kvh * d, 2);
  std::vector<std::uint16_t> k16(k.size()), v16(v.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k16[i] = float_to_half(k[i]);
    v16[i] = float_to_half(v[i]);
  }
  const auto q = normal(H * d, 3);
  std::vector<float> out(H * d);
  for (auto _ : st) {
    if (f16)
      cpu::attention_dense(k16.data(), v16.data(), cpu::DType::kF16, n, kvh, d, q.data(), H, params(), out.data(), threads);
    else
      cpu::attention_dense(k.data(), v.data(), cpu::DType::kF32, n, kvh, d, q.data(), H, params(), out.data(), threads);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * kvh * d * 2 * (f16 ? 2 : 4)));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.counters["bits_per_element"] = f16 ? 16 : 32;
}
BENCHMARK(BM_AttentionDense)->ArgsProduct({{0, 1}, {1024, 4096, 16384, 32768, 131072}, {1, 2}})->UseRealTime();

// The memory-stream baseline over the bytes of a 4-bit cache. args: context, threads
void BM_Stream(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  const std::size_t bytes = n * 8 * 2 * (64 + 2);
  std::vector<std::uint8_t> data(bytes, 1);
  for (auto _ : st) benchmark::DoNotOptimize(cpu::stream_bytes(data.data(), bytes, static_cast<int>(st.range(1))));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes));
  st.counters["bits_per_element"] = 4.125;
}
BENCHMARK(BM_Stream)->ArgsProduct({{1024, 4096, 16384, 32768, 131072}, {1, 2}})->UseRealTime();

}  // namespace

// ---- every method through CpuCodec (make_cpu_codec) and attention_codec.
// Methods are indexed in all_methods() order; widths as bits * 10 (25 = 2.5 bits).

std::unique_ptr<Codec> method_ref(int mi, int bits10, int d, Role role, std::uint64_t seed) {
  CodecConfig c;
  c.method = all_methods()[static_cast<std::size_t>(mi)];
  c.bits = bits10 / 10.0;
  c.head_dim = d;
  c.role = role;
  c.seed = seed;
  auto r = make_codec(c);
  if (r->needs_calibration()) {
    const auto cal = normal(2048 * static_cast<std::size_t>(d), seed + 9);
    r->calibrate(cal.data(), 2048);
  }
  return r;
}

void method_label(benchmark::State& st, int mi, int bits10) {
  st.SetLabel(std::string(method_name(all_methods()[static_cast<std::size_t>(mi)])) + " " +
              std::to_string(bits10 / 10) + (bits10 % 10 ? ".5" : "") + "-bit");
}

/// (method index, bits * 10) for every supported width of every method.
std::vector<std::vector<std::int64_t>> method_cases() {
  std::vector<std::int64_t> mi, b;
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < all_methods().size(); ++i)
    for (double bits : supported_bits(all_methods()[i])) out.push_back({static_cast<std::int64_t>(i), std::llround(bits * 10)});
  return out;
}

// args: method, bits*10, head_dim. One head, 4096 tokens, one thread.
void BM_EncodeMethod(benchmark::State& st) {
  const int mi = static_cast<int>(st.range(0)), b10 = static_cast<int>(st.range(1)), d = static_cast<int>(st.range(2));
  const std::size_t n = 4096;
  auto ref = method_ref(mi, b10, d, Role::kKey, 1);
  auto c = cpu::make_cpu_codec(*ref);
  const auto x = normal(n * d, 1);
  std::vector<std::uint8_t> out(c->encoded_bytes(n));
  for (auto _ : st) {
    c->encode(x.data(), n, out.data(), 1);
    benchmark::DoNotOptimize(out.data());
  }
  method_label(st, mi, b10);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * d * 4));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.counters["bits_per_element"] = ref->bits_per_element(n);
}
void method_args(benchmark::internal::Benchmark* b, const std::vector<std::int64_t>& extra) {
  for (const auto& c : method_cases())
    for (std::int64_t e : extra) b->Args({c[0], c[1], e});
}
BENCHMARK(BM_EncodeMethod)->Apply([](benchmark::internal::Benchmark* b) { method_args(b, {64, 128, 256}); });

// args: method, bits*10, context, threads. head_dim 128, 32 query heads over 8 KV heads.
void BM_AttentionMethod(benchmark::State& st) {
  const int mi = static_cast<int>(st.range(0)), b10 = static_cast<int>(st.range(1));
  const std::size_t n = static_cast<std::size_t>(st.range(2));
  const int threads = static_cast<int>(st.range(3));
  const int d = 128, kvh = 8, H = 32;
  std::vector<std::unique_ptr<Codec>> refs;
  std::vector<std::unique_ptr<cpu::CpuCodec>> codecs;
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<cpu::CodecHead> keys, values;
  const auto x = normal(n * d, 3);
  std::size_t bytes = 0;
  for (int g = 0; g < kvh; ++g)
    for (Role role : {Role::kKey, Role::kValue}) {
      refs.push_back(method_ref(mi, b10, d, role, 100 + g));
      codecs.push_back(cpu::make_cpu_codec(*refs.back()));
      bufs.emplace_back(codecs.back()->encoded_bytes(n));
      codecs.back()->encode(x.data(), n, bufs.back().data());
      bytes += bufs.back().size();
      (role == Role::kKey ? keys : values).push_back({codecs.back().get(), bufs.back().data()});
    }
  const auto q = normal(static_cast<std::size_t>(H) * d, 7);
  std::vector<float> out(q.size());
  for (auto _ : st) {
    cpu::attention_codec(keys, values, n, q.data(), H, params(), out.data(), 0, threads);
    benchmark::DoNotOptimize(out.data());
  }
  method_label(st, mi, b10);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_AttentionMethod)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (const auto& c : method_cases())
        for (std::int64_t n : {1024, 4096, 16384, 32768, 131072})
          for (std::int64_t t : {1, 2}) b->Args({c[0], c[1], n, t});
    })
    ->UseRealTime();

BENCHMARK_MAIN();
