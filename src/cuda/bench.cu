// run_cuda_bench: CUDA-event timings of the decode-attention kernels (TurboQuant-MSE
// on paged compressed K/V, and our fp16 flash-decoding baseline on the same
// shapes) and of the append (encode) kernel from fp32, fp16 and bf16 input, with BenchRow keys.
//
// Each timing: warm-up, then >= 50 calls each bracketed by events, median
// reported; calls rotate over enough copies of the inputs that the working set
// exceeds 256 MB (5x the H200's L2). Data is random (never zeros): codes are
// random bytes (every byte is a valid code at any width), norms random fp16 in
// [0.5, 1.5), fp16 K/V uniform in [-1, 1); the seed comes from the clock unless given (printed).
// Every timed result is checked (BenchOptions::check): one (sequence, KV head) row of the decode
// output against the CPU reference attention on the same cache (the row's pages gathered into
// formats.h blocks: attention_compressed in fp64, attention_exact for the fp16 baseline), the
// encodes' bytes of one row against the reference encode; BenchRow::max_err, rel_err, check_tol.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"
#include "turbokv/attention.h"
#include "turbokv/bench.h"
#include "turbokv/codec.h"
#include "turbokv/cuda.h"
#include "turbokv/cuda_kivi.h"
#include "turbokv/cuda_polar.h"
#include "turbokv/cuda_qjl.h"
#include "turbokv/cuda_vq.h"
#include "turbokv/error.h"
#include "turbokv/half.h"
#include "turbokv/rng.h"

namespace turbokv {
namespace {

using cuda::detail::stream_of;

__device__ __forceinline__ std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

/// Random code bytes (ANDed with code_mask per 16 bits); the norm section of every block gets fp16
/// values in [0.5, 1.5).
__global__ void fill_pages(std::uint8_t* pool, std::size_t bytes, std::size_t stride, std::size_t norm_off,
                           std::size_t norm_end, std::uint64_t seed, std::uint16_t code_mask = 0xffffu) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < bytes / 2;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t o = (2 * i) % stride;
    const std::uint32_t h = hash32(seed * 0x9E3779B97F4A7C15ull + i);
    std::uint16_t v;
    if (o >= norm_off && o < norm_end)
      v = __half_as_ushort(__float2half(0.5f + (h & 0xffff) * (1.0f / 65536.0f)));
    else
      v = static_cast<std::uint16_t>(h) & code_mask;
    reinterpret_cast<std::uint16_t*>(pool)[i] = v;
  }
}

__global__ void fill_half(std::uint16_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = __half_as_ushort(__float2half((hash32(seed * 0x9E3779B97F4A7C15ull + i) & 0xffff) * (2.0f / 65536.0f) - 1.0f));
}

/// Element i of the random fill: uniform in [-scale / 2, scale / 2).
__device__ __forceinline__ float fill_value(std::uint64_t seed, std::size_t i, float scale) {
  return ((hash32(seed * 0x9E3779B97F4A7C15ull + i) & 0xffffff) * (1.0f / 16777216.0f) - 0.5f) * scale;
}

__global__ void fill_float(float* p, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = fill_value(seed, i, scale);
}

/// fill_float's values rounded to fp16 (bf16 = false) or bf16 (round to nearest even), as 16-bit patterns.
__global__ void fill_half16(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale, bool bf16) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = fill_value(seed, i, scale);
    p[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

struct DevMem {
  void* p = nullptr;
  explicit DevMem(std::size_t bytes) { TKV_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

constexpr std::size_t kRotateBytes = 256ull << 20;

/// Median time in microseconds of fn(i) over `reps` calls (after warm-up).
template <class F>
double median_us(cudaStream_t s, int reps, F&& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) TKV_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    TKV_CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
    fn(i + 3);
    TKV_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  TKV_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    TKV_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1e3;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
#ifdef TURBOKV_H16_TRACE
  // Diagnostic build: one more call with decode_h16_kernel's per-block stamps on, appended to the file
  // named by TURBOKV_H16_TRACE_FILE as "call,median_us,block,word0..": only calls that wrote stamps.
  if (const char* path = std::getenv("TURBOKV_H16_TRACE_FILE")) {
    static int call = 0;
    const std::size_t words = std::size_t(cuda::detail::kH16TraceBlocks) * cuda::detail::kH16TraceWords;
    DevMem buf(words * 8);
    TKV_CUDA_CHECK(cudaMemset(buf.p, 0, words * 8));
    cuda::detail::h16_trace_buf = buf.as<unsigned long long>();
    fn(reps + 3);
    TKV_CUDA_CHECK(cudaStreamSynchronize(s));
    cuda::detail::h16_trace_buf = nullptr;
    std::vector<unsigned long long> h(words);
    TKV_CUDA_CHECK(cudaMemcpy(h.data(), buf.p, words * 8, cudaMemcpyDeviceToHost));
    if (FILE* f = std::fopen(path, "a")) {
      for (int b = 0; b < cuda::detail::kH16TraceBlocks; ++b) {
        const unsigned long long* w = h.data() + std::size_t(b) * cuda::detail::kH16TraceWords;
        if (w[1] == 0) continue;
        std::fprintf(f, "%d,%.2f,%d", call, t[reps / 2], b);
        for (int j = 0; j < cuda::detail::kH16TraceWords; ++j) std::fprintf(f, ",%llu", w[j]);
        std::fprintf(f, "\n");
      }
      std::fclose(f);
    }
    ++call;
  }
#endif
  return t[reps / 2];
}

unsigned fill_grid() { return static_cast<unsigned>(cuda::detail::num_sms() * 8); }

/// How many copies of a buffer set of `bytes` the timed calls rotate through (at most 64) so that together they
/// exceed kRotateBytes and each call reads DRAM, not L2.
int rotations(std::size_t bytes) {
  return static_cast<int>(std::min<std::size_t>(64, (kRotateBytes + bytes - 1) / bytes));
}

/// Median µs of a device-to-device copy moving `moved` bytes (moved / 2 read, moved / 2 written), its buffers
/// rotated like the timed kernels' (rotations): the encode rows' baseline.
double copy_baseline_us(cudaStream_t s, int reps, std::size_t moved) {
  const int nc = rotations(moved);
  std::vector<std::unique_ptr<DevMem>> cs;
  for (int i = 0; i < 2 * nc; ++i) cs.push_back(std::make_unique<DevMem>(moved / 2 + 16));
  return median_us(s, reps, [&](int i) {
    TKV_CUDA_CHECK(cudaMemcpyAsync(cs[2 * (i % nc) + 1]->p, cs[2 * (i % nc)]->p, moved / 2, cudaMemcpyDeviceToDevice, s));
  });
}

/// n page pools of pool_bytes each: random code bytes (ANDed with code_mask), scalars (bytes [norm_off,
/// norm_end) of each stride-byte block) fp16 in [0.5, 1.5). Pool i's seed: seed + seed_step * i.
std::vector<std::unique_ptr<DevMem>> filled_pools(cudaStream_t s, int n, std::size_t pool_bytes, std::size_t stride,
                                                  std::size_t norm_off, std::size_t norm_end, std::uint64_t seed,
                                                  std::uint64_t seed_step, std::uint16_t code_mask = 0xffffu) {
  std::vector<std::unique_ptr<DevMem>> p;
  for (int i = 0; i < n; ++i) {
    p.push_back(std::make_unique<DevMem>(pool_bytes));
    fill_pages<<<fill_grid(), 256, 0, s>>>(p.back()->as<std::uint8_t>(), pool_bytes, stride, norm_off, norm_end,
                                           seed + seed_step * i, code_mask);
    TKV_CHECK_LAUNCH();
  }
  return p;
}

/// Key and value page pools of pool_bytes each (filled_pools), rotations(2 * pool_bytes) pairs. Pair i's
/// seeds: seed + 2i (keys), seed + 2i + 1 (values).
struct PagePools {
  std::vector<std::unique_ptr<DevMem>> k, v;
  int size() const { return static_cast<int>(k.size()); }
};
PagePools make_pools(cudaStream_t s, std::size_t pool_bytes, std::size_t stride, std::size_t norm_off,
                     std::size_t norm_end, std::uint64_t seed, std::uint16_t code_mask = 0xffffu) {
  const int n = rotations(2 * pool_bytes);
  return {filled_pools(s, n, pool_bytes, stride, norm_off, norm_end, seed, 2, code_mask),
          filled_pools(s, n, pool_bytes, stride, norm_off, norm_end, seed + 1, 2, code_mask)};
}

/// A pool's (page, KV head) block (formats.h): cb code bytes per token, then the scalars: sb bytes per
/// token, or (KIVI keys: group > 0) 4 head_dim bytes per group of `group` tokens.
struct BlockFmt {
  std::size_t stride = 0, cb = 0, sb = 0;
  int group = 0, head_dim = 0;
};

/// The formats.h block of sequence b's first n tokens of KV head g, gathered from device pool dpool
/// under the bench's page table (page p of sequence b is page b * max_pages + p).
std::vector<std::uint8_t> gather_block(const std::uint8_t* dpool, const BlockFmt& f, int b, int g, int kvh,
                                       int max_pages, int page_size, std::size_t n) {
  const std::size_t ps = static_cast<std::size_t>(page_size), np = (n + ps - 1) / ps;
  std::vector<std::uint8_t> pages(np * f.stride);
  TKV_CUDA_CHECK(cudaMemcpy2D(pages.data(), f.stride, dpool + (std::size_t(b) * max_pages * kvh + g) * f.stride,
                              kvh * f.stride, f.stride, np, cudaMemcpyDeviceToHost));
  const std::size_t gb = 4 * static_cast<std::size_t>(f.head_dim);
  const std::size_t scal = f.group > 0 ? (n + f.group - 1) / f.group * gb : n * f.sb;
  std::vector<std::uint8_t> blk(n * f.cb + scal);
  for (std::size_t p = 0; p < np; ++p) {
    const std::size_t t0 = p * ps, nt = std::min(ps, n - t0);
    const std::uint8_t* pg = pages.data() + p * f.stride;
    std::memcpy(blk.data() + t0 * f.cb, pg, nt * f.cb);
    if (f.group > 0)
      std::memcpy(blk.data() + n * f.cb + t0 / f.group * gb, pg + ps * f.cb, (nt + f.group - 1) / f.group * gb);
    else
      std::memcpy(blk.data() + n * f.cb + t0 * f.sb, pg + ps * f.cb, nt * f.sb);
  }
  return blk;
}

/// The checked row of a (batch, context) shape: sequence b = batch - 1, KV head g = num_kv_heads - 1,
/// its `group` query heads (q: [group][head_dim], copied from the device queries); kvh, max_pages,
/// page_size: the bench's pools and page table; s: the bench's stream (synchronised before reads).
struct RowCheck {
  int b = 0, g = 0, group = 0, d = 0, nh = 0, kvh = 0, max_pages = 0, page_size = 0;
  std::size_t n = 0;
  std::vector<float> q;
  AttentionParams p;
  cudaStream_t s = nullptr;
  int failures = 0;

  /// The row's formats.h block from device pool dpool (gather_block, after the stream's pending work).
  std::vector<std::uint8_t> gather(const std::uint8_t* dpool, const BlockFmt& f) const {
    TKV_CUDA_CHECK(cudaStreamSynchronize(s));
    return gather_block(dpool, f, b, g, kvh, max_pages, page_size, n);
  }

  /// attention_compressed (fp64) of the row's query heads over one KV head's key and value blocks.
  std::vector<double> ref(const Codec& kc, const std::vector<std::uint8_t>& kb, const Codec& vc,
                          const std::vector<std::uint8_t>& vb) const {
    std::vector<double> r(static_cast<std::size_t>(group) * d);
    attention_compressed({{&kc, kb.data()}}, {{&vc, vb.data()}}, n, q.data(), group, p, r.data());
    return r;
  }
  /// Fills r's max_err / rel_err / check_tol from the row's heads of dout ([batch][num_heads][head_dim]
  /// fp32, device, the stream synchronised) against ref; prints and counts a failure above tol.
  void compare(BenchRow& r, const float* dout, const std::vector<double>& ref, double tol) {
    std::vector<float> o(ref.size());
    TKV_CUDA_CHECK(cudaMemcpy(o.data(), dout + (std::size_t(b) * nh + std::size_t(g) * group) * d, o.size() * 4,
                              cudaMemcpyDeviceToHost));
    double mx = 0, num = 0, den = 0;
    bool finite = true;
    for (std::size_t i = 0; i < o.size(); ++i) {
      finite = finite && std::isfinite(o[i]);
      const double e = o[i] - ref[i];
      mx = std::max(mx, std::fabs(e));
      num += e * e, den += ref[i] * ref[i];
    }
    r.max_err = finite ? mx : INFINITY;
    r.rel_err = finite ? std::sqrt(num / den) : INFINITY;
    r.check_tol = tol;
    if (r.check_failed()) {
      ++failures;
      std::fprintf(stderr,
                   "run_cuda_bench: CHECK FAILED: %s %s %g-bit head_dim %d heads %d/%d batch %d context %zu: relative "
                   "error %.3g > %.3g (max abs %.3g)\n",
                   r.op.c_str(), r.method.c_str(), r.bits, r.head_dim, r.num_heads, r.num_kv_heads, r.batch,
                   r.context, r.rel_err, tol, r.max_err);
    }
  }
  /// Encode rows: bytes of the row's block (gathered) against the reference encode of the same inputs.
  void compare_bytes(BenchRow& r, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
    std::size_t diff = got.size() == want.size() ? 0 : std::max(got.size(), want.size());
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) diff += got[i] != want[i];
    r.max_err = static_cast<double>(diff);
    r.rel_err = static_cast<double>(diff) / static_cast<double>(std::max<std::size_t>(1, want.size()));
    r.check_tol = 0;
    if (diff != 0) {
      ++failures;
      std::fprintf(stderr, "run_cuda_bench: CHECK FAILED: %s %s %g-bit head_dim %d batch %d context %zu: %zu of %zu "
                           "bytes differ from the reference encode\n",
                   r.op.c_str(), r.method.c_str(), r.bits, r.head_dim, r.batch, r.context, diff, want.size());
    }
  }
};

// Bounds of the checks: the GPU tests' tolerances of each kernel (tests/cuda: fp32 kernels 2e-5 for
// TurboQuant-MSE, fp8, KIVI and the fp16 baseline, 1e-4 for RVQ, product VQ, PolarQuant and Prod keys;
// the fp16 tensor-core kernels 3e-3).
// KIVI's CUDA-core kernel exceeded kTolF32 at 3 bits, head_dim 256, b64 x 128k (2.98e-5 in run s30-4): the staged
// kernel added each token's value to its running sum while its sum of weights added whole steps, and lost a
// long split's tail; it sums each step first since session 31 (5.3e-7 at that row, run s31-1).
constexpr double kTolF32 = 2e-5, kTolVq = 1e-4, kTolH16 = 3e-3;


}  // namespace

std::vector<BenchRow> run_cuda_bench(const BenchOptions& opt) {
  std::string why;
  if (cuda::device_count(&why) == 0) throw std::runtime_error("run_cuda_bench: no CUDA device: " + why);
  check_arg(opt.head_dim >= 64 && opt.head_dim <= 256 && opt.head_dim % 16 == 0, "run_cuda_bench", "head_dim",
            opt.head_dim, "must be a multiple of 16 in 64..256");
  const bool pow2 = cuda::detail::pow2_head_dim(opt.head_dim);  // others: dense rotation
  check_arg(opt.num_kv_heads > 0 && opt.num_heads % opt.num_kv_heads == 0, "run_cuda_bench", "num_heads",
            opt.num_heads, "must be a multiple of num_kv_heads");
  for (double b : opt.bits) {
    check_arg(b == 1 || b == 2 || b == 3 || b == 4 || b == 1.5 || b == 2.5 || b == 3.5, "run_cuda_bench", "bits", b,
              "must be 1, 2, 3, 4 or 1.5, 2.5, 3.5 on the GPU");
    check_arg(b == std::floor(b) || opt.head_dim >= 128, "run_cuda_bench", "head_dim", opt.head_dim,
              "must be 128 or 256 for fractional widths on the GPU");
  }
  const int reps = std::max(50, opt.repeats);
  const int d = opt.head_dim, nh = opt.num_heads, kvh = opt.num_kv_heads;
  const int page_size = 16;
  // Fresh data each run unless a seed is given; every fill below is keyed by sd.
  const unsigned long long seed =
      opt.seed != 0 ? opt.seed
                    : static_cast<unsigned long long>(std::chrono::system_clock::now().time_since_epoch().count());
  std::fprintf(stderr, "run_cuda_bench: data seed %llu (head_dim %d, heads %d/%d)\n", seed, d, nh, kvh);
  const std::uint64_t sd = seed * 7919ull;
  int failures = 0, checks = 0;
  cudaStream_t s;
  TKV_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cuda::Stream st = reinterpret_cast<cuda::Stream>(s);
  std::size_t free_b = 0, total_b = 0;
  TKV_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const std::string base_name = "fp16-flash-decode (ours)";
  // opt.methods filters the parts (empty = all): "tq-mse" (fp16 tensor-core decode), "3xtf32",
  // "encode", "dequantize", "tq-prod", "qjl", "fp8", "kivi", "rvq", "pvq", "polar"; the fp16 baseline always runs (every row's
  // ratio is against it).
  for (const std::string& m : opt.methods)
    check_arg(m == "tq-mse" || m == "3xtf32" || m == "encode" || m == "tq-prod" || m == "qjl" || m == "dequantize" || m == "fp8" || m == "kivi" ||
                  m == "rvq" || m == "pvq" || m == "polar",
              "run_cuda_bench", "methods", m, "must be tq-mse, 3xtf32, encode, dequantize, tq-prod, qjl, fp8, kivi, rvq, pvq or polar");
  auto want = [&](const char* m) {
    return opt.methods.empty() || std::find(opt.methods.begin(), opt.methods.end(), m) != opt.methods.end();
  };
  std::vector<BenchRow> rows;

  for (int batch : opt.batches)
    for (std::size_t ctx_sz : opt.contexts) {
      const int ctx = static_cast<int>(ctx_sz);
      const std::size_t fp16_bytes = std::size_t(batch) * kvh * ctx * d * 2 * 2;
      // The fp16 cache must fit comfortably next to the rest; when it does not, only the fp16 baseline is
      // skipped (its rows' baseline time and speedup are NaN: compare_sdpa.py compares with SDPA itself).
      const bool fp16_fits = fp16_bytes <= free_b / 3;
      if (!fp16_fits)
        std::fprintf(stderr,
                     "run_cuda_bench: batch %d x %d tokens: fp16 baseline skipped (its cache, %.1f GB, exceeds a third "
                     "of the %.1f GB free); the compressed rows run\n",
                     batch, ctx, fp16_bytes / 1e9, free_b / 1e9);
      BenchRow proto;
      proto.context = ctx_sz;
      proto.head_dim = d, proto.num_heads = nh, proto.num_kv_heads = kvh, proto.batch = batch, proto.threads = 0;
      const std::size_t q_bytes = std::size_t(batch) * nh * d * 4;
      DevMem q(q_bytes), out(q_bytes);
      fill_float<<<fill_grid(), 256, 0, s>>>(q.as<float>(), q_bytes / 4, 7 + sd, 4.0f);
      TKV_CHECK_LAUNCH();
      std::vector<std::int32_t> lens(batch, ctx);
      DevMem dlens(batch * 4);
      TKV_CUDA_CHECK(cudaMemcpy(dlens.p, lens.data(), batch * 4, cudaMemcpyHostToDevice));
      cuda::DecodeArgs a;
      a.batch = batch, a.num_heads = nh, a.num_kv_heads = kvh, a.head_dim = d;
      a.q = q.as<float>(), a.out = out.as<float>(), a.seq_lens = dlens.as<std::int32_t>(), a.max_seq_len = ctx;
      a.softmax_scale = 1.0f / std::sqrt(float(d));
      a.num_splits = opt.num_splits;
      DevMem ws(cuda::decode_workspace_bytes(a));
      a.workspace = ws.p;
      // The checked row (RowCheck) and its queries.
      const int max_pages = (ctx + page_size - 1) / page_size;
      RowCheck rc;
      rc.b = batch - 1, rc.g = kvh - 1, rc.group = nh / kvh, rc.d = d, rc.nh = nh, rc.n = ctx_sz;
      rc.kvh = kvh, rc.max_pages = max_pages, rc.page_size = page_size, rc.s = s;
      rc.p.softmax_scale = a.softmax_scale;
      if (opt.check) {
        TKV_CUDA_CHECK(cudaStreamSynchronize(s));
        rc.q.resize(static_cast<std::size_t>(rc.group) * d);
        TKV_CUDA_CHECK(cudaMemcpy(rc.q.data(), q.as<float>() + (std::size_t(rc.b) * nh + std::size_t(rc.g) * rc.group) * d,
                                  rc.q.size() * 4, cudaMemcpyDeviceToHost));
      }
      // After a row's timing: one more call of the timed function on buffer index 0 (pool pair 0), then
      // its output against ref.
      auto check = [&](BenchRow& r, auto&& timed, const std::vector<double>& ref, double tol) {
        timed(0);
        TKV_CUDA_CHECK(cudaStreamSynchronize(s));
        rc.compare(r, out.as<float>(), ref, tol);
        ++checks;
      };

      // fp16 baseline.
      double base_us = std::numeric_limits<double>::quiet_NaN();
      if (fp16_fits) {
        const int nrot = rotations(fp16_bytes);
        std::vector<std::unique_ptr<DevMem>> bufs;
        for (int i = 0; i < nrot; ++i) {
          bufs.push_back(std::make_unique<DevMem>(fp16_bytes));
          fill_half<<<fill_grid(), 256, 0, s>>>(bufs.back()->as<std::uint16_t>(), fp16_bytes / 2, 100 + i + sd);
          TKV_CHECK_LAUNCH();
        }
        const std::size_t half = fp16_bytes / 2;
        auto run = [&](int i) {
          const auto* k = bufs[i % nrot]->as<std::uint16_t>();
          cuda::fp16_decode(k, k + half / 2, ctx, a, st);
        };
        base_us = median_us(s, reps, run);
        BenchRow r = proto;
        r.op = "decode_attention", r.method = base_name, r.bits = 16;
        r.time_us = base_us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = 1;
        r.gbps = (fp16_bytes + q_bytes) / (base_us * 1e3);
        if (opt.check) {  // attention_exact on the row's fp16 keys and values ([batch][kv_heads][ctx][d])
          const auto* k0 = bufs[0]->as<std::uint16_t>();
          const std::size_t off = (std::size_t(rc.b) * kvh + rc.g) * std::size_t(ctx) * d, cnt = std::size_t(ctx) * d;
          std::vector<std::uint16_t> hk(cnt), hv(cnt);
          TKV_CUDA_CHECK(cudaStreamSynchronize(s));
          TKV_CUDA_CHECK(cudaMemcpy(hk.data(), k0 + off, cnt * 2, cudaMemcpyDeviceToHost));
          TKV_CUDA_CHECK(cudaMemcpy(hv.data(), k0 + half / 2 + off, cnt * 2, cudaMemcpyDeviceToHost));
          std::vector<float> fk(cnt), fv(cnt);
          for (std::size_t i = 0; i < cnt; ++i) fk[i] = half_to_float(hk[i]), fv[i] = half_to_float(hv[i]);
          std::vector<double> ref(static_cast<std::size_t>(rc.group) * d);
          attention_exact(fk.data(), fv.data(), ctx_sz, 1, d, rc.q.data(), rc.group, rc.p, ref.data());
          check(r, run, ref, kTolF32);
        }
        rows.push_back(r);
      }

      std::vector<std::int32_t> table(std::size_t(batch) * max_pages);
      for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(i);
      DevMem dtable(table.size() * 4);
      TKV_CUDA_CHECK(cudaMemcpy(dtable.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
      const cuda::PageTable pt{dtable.as<std::int32_t>(), max_pages, page_size};

      // fp8 e4m3 baseline (fp8_decode: the fp16 tensor-core kernel, kernel 0, at head_dim 64..256 but 144..240, and
      // the CUDA-core one, kernel 1), codes without the NaN pattern.
      if (want("fp8")) {
        const std::size_t stride = cuda::tq_page_stride(page_size, static_cast<std::size_t>(d));
        const std::size_t noff = std::size_t(page_size) * d;
        // 0xBF: the exponent's top bit cleared, so no byte is e4m3's NaN (S.1111.111) and |code| <= 1.875:
        // with the scales in [0.5, 1.5) the values have the other methods' magnitudes (with 0xF7, codes up
        // to 448 gave logits in the thousands and the check's fp16 rounding of q 2.6e-3 relative error).
        const PagePools pools =
            make_pools(s, table.size() * kvh * stride, stride, noff, noff + 2 * page_size, 71 + sd, 0xBFBF);
        CodecConfig fc;
        fc.method = Method::kFp8, fc.bits = 8, fc.head_dim = d;
        const auto fref = make_codec(fc);
        std::vector<double> ref;
        if (opt.check) {
          const BlockFmt f{stride, static_cast<std::size_t>(d), 2, 0, d};
          ref = rc.ref(*fref, rc.gather(pools.k[0]->as<std::uint8_t>(), f),
                       *fref, rc.gather(pools.v[0]->as<std::uint8_t>(), f));
        }
        // 4: kernel 0 with DecodeArgs::block_warps 12 at head_dim 256 ("fp8 (12 warps)", timed next to the
        // default, which keeps 8 warps: 12 measured 0.99-1.00x in run s30-4)
        for (const int kernel : {0, 4, 1}) {
          if (kernel == 0 && !(pow2 || cuda::detail::h16_dense_head_dim(d))) continue;  // kernel 0 = the CUDA-core one
          if (kernel == 4 && d != 256) continue;
          cuda::DecodeArgs fa = a;
          fa.kernel = kernel == 4 ? 0 : kernel;
          if (kernel == 4) fa.block_warps = 12;
          auto run = [&](int i) {
            const int r = i % pools.size();
            cuda::fp8_decode({pools.k[r]->as<std::uint8_t>(), stride}, {pools.v[r]->as<std::uint8_t>(), stride}, pt, fa,
                             st);
          };
          const double us = median_us(s, reps, run);
          BenchRow r = proto;
          r.op = "decode_attention", r.bits = 8;
          r.method = kernel == 0 ? "fp8" : kernel == 4 ? "fp8 (12 warps)" : "fp8 (cuda cores)";
          r.time_us = us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / us;
          r.gbps = (std::size_t(batch) * ctx * kvh * 2 * (d + 2) + q_bytes + table.size() * 4) / (us * 1e3);
          if (opt.check) check(r, run, ref, kernel != 1 ? kTolH16 : kTolF32);
          rows.push_back(r);
        }
      }

      // KIVI (kivi_decode: kernel 0 = the fp16 tensor-core kernel of decode_h16.cuh at 2 / 4 bits where its
      // layout applies (here all but d256 4-bit), else the staged tensor-core kernel; kernel 1 = the CUDA-core
      // one), keys and values at the same integer width,
      // groups of 16 (key groups of 16 tokens fill a page; value groups of 16 channels divide every head_dim).
      for (double bits_d : opt.bits) {
        if (!want("kivi") || bits_d != std::floor(bits_d)) continue;
        CodecConfig kc;
        kc.method = Method::kKivi, kc.bits = bits_d, kc.head_dim = d, kc.group_size = 16, kc.role = Role::kKey;
        CodecConfig vc = kc;
        vc.role = Role::kValue;
        const std::size_t ks = cuda::kivi_page_stride(kc, page_size), vs = cuda::kivi_page_stride(vc, page_size);
        const std::size_t cb = std::size_t(d) * static_cast<int>(bits_d) / 8;
        const std::size_t noff = page_size * cb;
        const PagePools kp = make_pools(s, table.size() * kvh * ks, ks, noff, ks, 81 + sd);
        const PagePools vp = make_pools(s, table.size() * kvh * vs, vs, noff, vs, 91 + sd);
        const auto kref = make_codec(kc), vref = make_codec(vc);
        std::vector<double> ref;
        if (opt.check) {  // key scalars per group of 16 tokens, value scalars 4 d / 16 bytes per token
          const BlockFmt fk{ks, cb, 0, 16, d}, fv{vs, cb, 4 * std::size_t(d) / 16, 0, d};
          ref = rc.ref(*kref, rc.gather(kp.k[0]->as<std::uint8_t>(), fk),
                       *vref, rc.gather(vp.v[0]->as<std::uint8_t>(), fv));
        }
        // 4: kernel 0 with block_warps 12 at head_dim 256 ("kivi (12 warps)"; the default keeps 8: 12 measured
        // 0.96-1.19x in run s30-4, losing at b16 x 32k)
        for (int kernel : {0, 4, 1}) {
          if (kernel == 4 && d != 256) continue;
          cuda::DecodeArgs ka = a;
          ka.kernel = kernel == 4 ? 0 : kernel;
          if (kernel == 4) ka.block_warps = 12;
          auto run = [&](int i) {
            cuda::kivi_decode(kc, vc, {kp.k[i % kp.size()]->as<std::uint8_t>(), ks},
                              {vp.v[i % vp.size()]->as<std::uint8_t>(), vs}, pt, ka, st);
          };
          const double us = median_us(s, reps, run);
          BenchRow r = proto;
          r.op = "decode_attention", r.bits = bits_d;
          r.method = kernel == 0 ? "kivi" : kernel == 4 ? "kivi (12 warps)" : "kivi (cuda cores)";
          r.time_us = us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / us;
          r.gbps = (std::size_t(batch) * kvh * max_pages * (ks + vs) + q_bytes + table.size() * 4) / (us * 1e3);
          if (opt.check) check(r, run, ref, kernel != 1 ? kTolH16 : kTolF32);
          rows.push_back(r);
        }
      }

      // RVQ, product VQ and PolarQuant (rvq_paged_decode, pvq_paged_decode, polar_paged_decode) on the same page
      // table, keys and values at the same integer width; random code bytes, fp16 scalars in [0.5, 1.5). Kernel 0
      // (fp16 tensor cores): decode_h16.cuh for RVQ at 2 + 2 bits (head_dim 64, 80, 96, 112, 128, 256) and at
      // 3 + 3 / 4 + 4 (64, 80, 96, 112, 128), and for product VQ at head_dim 64 / 128 and at 3 bits at 256; the
      // staged kernel of staged.cuh for the other RVQ cases and PolarQuant (dense rotations included); product
      // VQ's other cases run the look-up-table kernel either way, so only kernel 1 is timed there. Kernel 1: CUDA
      // cores.
      // Product VQ's key and value tables come from two reference codecs, each calibrated on its own
      // 1200 Gaussian rows (3 k-means iterations).
      for (double bits_d : opt.bits) {
        const int b = static_cast<int>(bits_d);
        if (bits_d != b) continue;
        for (const char* m : {"rvq", "pvq", "polar"}) {
          const bool polar = m[1] == 'o', pvq = m[0] == 'p' && !polar;
          if (!want(m) || (polar && b < 2)) continue;
          CodecConfig vc;
          vc.method = polar ? Method::kPolar : pvq ? Method::kPvq : Method::kRvq, vc.bits = b, vc.head_dim = d;
          vc.kmeans_iters = 3;
          std::unique_ptr<cuda::RvqTables> rt;
          std::unique_ptr<cuda::PolarTables> qt;
          std::unique_ptr<cuda::PvqTables> kt, vt;
          std::unique_ptr<Codec> kref, vref;  // the reference codecs of the tables (the check)
          std::size_t stride = 0, cb = 0, sb = 0;
          if (polar) {
            qt = std::make_unique<cuda::PolarTables>(vc);
            stride = qt->page_stride(page_size), cb = qt->code_bytes(), sb = 2 * std::size_t(qt->num_radii());
            kref = make_codec(vc);
          } else if (pvq) {
            for (int side = 0; side < 2; ++side) {
              CodecConfig sc = vc;
              sc.seed = vc.seed + side;
              auto ref = make_codec(sc);
              Rng rr(5 + side);
              std::vector<float> cal(std::size_t(1200) * d);
              for (auto& x : cal) x = static_cast<float>(rr.normal());
              ref->calibrate(cal.data(), 1200);
              (side == 0 ? kt : vt) = std::make_unique<cuda::PvqTables>(*ref);
              (side == 0 ? kref : vref) = std::move(ref);
            }
            stride = vt->page_stride(page_size), cb = vt->code_bytes();
          } else {
            rt = std::make_unique<cuda::RvqTables>(vc);
            stride = rt->page_stride(page_size), cb = rt->code_bytes(), sb = 2;
            kref = make_codec(vc);
          }
          const std::size_t noff = page_size * cb, nend = noff + page_size * sb;
          const PagePools pp = make_pools(s, table.size() * kvh * stride, stride, noff, nend, 61 + b + sd);
          std::vector<double> ref;
          if (opt.check) {
            const BlockFmt f{stride, cb, sb, 0, d};
            ref = rc.ref(*kref, rc.gather(pp.k[0]->as<std::uint8_t>(), f),
                         vref ? *vref : *kref,
                         rc.gather(pp.v[0]->as<std::uint8_t>(), f));
          }
          cuda::DecodeArgs va = a;  // product VQ: a workspace with its look-up tables
          std::unique_ptr<DevMem> vws;
          if (pvq) {
            vws = std::make_unique<DevMem>(cuda::pvq_paged_decode_workspace_bytes(a, *kt));
            va.workspace = vws->p;
          }
          // 4: kernel 0 with block_warps 8 ("rvq (8 warps)") where kernel 0 is the fp16 kernel of decode_h16.cuh
          // at head_dim 256 (2 + 2-bit RVQ: 12 warps at large shapes since session 30)
          for (int kernel : {0, 4, 1}) {
            if (pvq && kernel == 0 && !(d == 64 || d == 128 || (d == 256 && b == 3))) continue;  // = kernel 1
            if (kernel == 4 && !(m[0] == 'r' && d == 256 && b == 2)) continue;
            va.kernel = kernel == 4 ? 0 : kernel;
            va.block_warps = kernel == 4 ? 8 : 0;
            auto run = [&](int i) {
              const cuda::PagedPool kp{pp.k[i % pp.size()]->as<std::uint8_t>(), stride},
                  vp{pp.v[i % pp.size()]->as<std::uint8_t>(), stride};
              if (polar) cuda::polar_paged_decode(*qt, *qt, kp, vp, pt, va, st);
              else if (pvq) cuda::pvq_paged_decode(*kt, *vt, kp, vp, pt, va, st);
              else cuda::rvq_paged_decode(*rt, *rt, kp, vp, pt, va, st);
            };
            const double us = median_us(s, reps, run);
            BenchRow r = proto;
            r.op = "decode_attention";
            r.method = kernel == 0 ? std::string(m) : std::string(m) + (kernel == 4 ? " (8 warps)" : " (cuda cores)");
            r.bits = b;
            r.time_us = us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / us;
            r.gbps = (std::size_t(batch) * kvh * max_pages * 2 * stride + q_bytes + table.size() * 4) / (us * 1e3);
            if (opt.check) check(r, run, ref, kernel != 1 ? kTolH16 : kTolVq);
            rows.push_back(r);
          }
          // PolarQuant encode: the whole context appended into key pool 0 (polar_append, fp32 input, inputs rotated
          // past L2), against a d2d copy of the same bytes, as the tq-mse encode rows; the checked row's bytes
          // against the reference encode of its inputs.
          const std::size_t n_in = std::size_t(batch) * ctx * kvh * d, in_bytes = n_in * 4;
          if (polar && in_bytes <= (4ull << 30)) {
            const int nx = rotations(in_bytes);
            std::vector<std::unique_ptr<DevMem>> xs;
            for (int i = 0; i < nx; ++i) {
              xs.push_back(std::make_unique<DevMem>(in_bytes));
              fill_float<<<fill_grid(), 256, 0, s>>>(xs.back()->as<float>(), n_in, 77 + b + i + sd, 8.0f);
              TKV_CHECK_LAUNCH();
            }
            DevMem zero(batch * 4);
            TKV_CUDA_CHECK(cudaMemsetAsync(zero.p, 0, batch * 4, s));
            const cuda::PagedPool kp0{pp.k[0]->as<std::uint8_t>(), stride};
            const double enc_us = median_us(s, reps, [&](int i) {
              cuda::polar_append(*qt, xs[i % nx]->p, batch, ctx, kvh, zero.as<std::int32_t>(), pt, kp0, st);
            });
            const std::size_t moved = in_bytes + std::size_t(batch) * ctx * kvh * (cb + sb);
            const double copy_us = copy_baseline_us(s, reps, moved);
            BenchRow e = proto;
            e.op = "encode", e.method = "polar", e.bits = b;
            e.time_us = enc_us, e.baseline = "d2d-copy (same bytes)", e.baseline_time_us = copy_us;
            e.speedup = copy_us / enc_us, e.gbps = moved / (enc_us * 1e3);
            if (opt.check) {
              cuda::polar_append(*qt, xs[0]->p, batch, ctx, kvh, zero.as<std::int32_t>(), pt, kp0, st);
              std::vector<float> xr(std::size_t(ctx) * d);
              const std::size_t first = (std::size_t(rc.b) * ctx * kvh + rc.g) * d;
              TKV_CUDA_CHECK(cudaStreamSynchronize(s));
              TKV_CUDA_CHECK(cudaMemcpy2D(xr.data(), std::size_t(d) * 4, xs[0]->as<float>() + first,
                                          std::size_t(kvh) * d * 4, std::size_t(d) * 4, ctx, cudaMemcpyDeviceToHost));
              std::vector<std::uint8_t> want_b(kref->encoded_bytes(ctx_sz));
              kref->encode(xr.data(), ctx_sz, want_b.data());
              rc.compare_bytes(e, rc.gather(pp.k[0]->as<std::uint8_t>(), BlockFmt{stride, cb, sb, 0, d}), want_b);
              ++checks;
            }
            rows.push_back(e);
          }
        }
      }

      for (double bits_d : opt.bits) {
        const int bits = static_cast<int>(bits_d);
        CodecConfig cfg;
        cfg.bits = bits_d, cfg.head_dim = d;
        const auto ref = make_codec(cfg);
        if (ref->needs_calibration()) {  // fractional widths: an outlier split from Gaussian rows, every 8th channel x4
          std::vector<float> cal(256 * std::size_t(d));
          Rng rng(17);
          for (std::size_t i = 0; i < cal.size(); ++i)
            cal[i] = static_cast<float>(rng.normal()) * ((i % d) % 8 == 0 ? 4.0f : 1.0f);
          ref->calibrate(cal.data(), 256);
        }
        const cuda::TqMseTables tab(*ref);
        const std::size_t nb = 2 * static_cast<std::size_t>(tab.num_norms());  // norm bytes per token
        const std::size_t stride = tab.page_stride(page_size);
        const std::size_t noff = page_size * tab.code_bytes();
        const PagePools pools = make_pools(s, table.size() * kvh * stride, stride, noff, noff + nb * page_size, 1 + sd);
        const int nrot = pools.size();
        const auto& kb = pools.k;
        const auto& vb = pools.v;
        const BlockFmt tf{stride, tab.code_bytes(), nb, 0, d};  // the tq-mse pages' blocks
        std::vector<std::uint8_t> vrow;                         // the checked row's value block (pair 0)
        std::vector<double> tq_ref;
        if (opt.check) {
          vrow = rc.gather(vb[0]->as<std::uint8_t>(), tf);
          if (want("tq-mse") || (want("3xtf32") && !tab.split() && pow2))
            tq_ref = rc.ref(*ref, rc.gather(kb[0]->as<std::uint8_t>(), tf),
                            *ref, vrow);
        }
        const std::size_t read = std::size_t(batch) * ctx * kvh * 2 * (tab.code_bytes() + nb) + q_bytes +
                                 table.size() * 4;
        // fp16 tensor-core (default) and 3xTF32 tensor-core kernels (the CUDA-core kernel, slower than
        // both, is exercised by the tests only); 3: kernel 0 with DecodeArgs::pair_sequences false at
        // head_dim 64 and 128 ("tq-mse (1 seq/block)": the kernel before sequence pairs, timed next to it; the
        // same kernel where the default is one sequence); 4:
        // kernel 0 with DecodeArgs::block_warps 8 at head_dim 256 ("tq-mse (8 warps)": the block before
        // session 29's 12 warps, timed next to it; the same kernel where the default is 8; fractional
        // widths too); 5 and 6: kernel 0 with pair_sequences 1 at head_dim 128 where pairs apply (2..4-bit
        // integer widths, at most 4 query heads per KV head, batch >= 2), at the warps the default picks
        // ("tq-mse (pairs)") and at 8 warps ("tq-mse (pairs; 8 warps)"): where the default rule
        // (DecodeArgs::pair_sequences) takes one sequence, what pairs would do.
        const bool pairs_apply = opt.head_dim == 128 && bits_d == std::floor(bits_d) && bits_d >= 2 && batch >= 2 &&
                                 nh <= 4 * kvh;
        for (int kernel : {0, 2, 3, 4, 5, 6}) {
          if (!want(kernel == 2 ? "3xtf32" : "tq-mse") || (kernel == 2 && (tab.split() || !pow2)) ||
              (kernel == 3 && opt.head_dim != 64 && opt.head_dim != 128) || (kernel == 4 && opt.head_dim != 256) ||
              (kernel >= 5 && !pairs_apply))
            continue;
          cuda::DecodeArgs ak = a;
          ak.kernel = kernel >= 3 ? 0 : kernel;
          if (kernel == 3) ak.pair_sequences = 0;
          if (kernel == 4 || kernel == 6) ak.block_warps = 8;
          if (kernel >= 5) ak.pair_sequences = 1;
          auto run = [&](int i) {
            cuda::tq_mse_decode(tab, tab, {kb[i % nrot]->as<std::uint8_t>(), stride},
                                {vb[i % nrot]->as<std::uint8_t>(), stride}, pt, ak, st);
          };
          const double us = median_us(s, reps, run);
          BenchRow r = proto;
          r.op = "decode_attention", r.bits = bits_d;
          // kernel 0: the fp16 tensor-core kernel at 64..256 powers of two and 80, 96, 112; the
          // CUDA-core one at the other multiples of 16.
          const bool h16 = pow2 || cuda::detail::h16_dense_head_dim(opt.head_dim);
          r.method = kernel == 2   ? "tq-mse (3xtf32)"
                     : kernel == 3 ? "tq-mse (1 seq/block)"
                     : kernel == 4 ? "tq-mse (8 warps)"
                     : kernel == 5 ? "tq-mse (pairs)"
                     : kernel == 6 ? "tq-mse (pairs; 8 warps)"
                     : h16         ? "tq-mse"
                                   : "tq-mse (cuda cores)";
          r.time_us = us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / us;
          r.gbps = read / (us * 1e3);
          if (opt.check) check(r, run, tq_ref, kernel != 2 && h16 ? kTolH16 : kTolF32);
          rows.push_back(r);
        }

        // Dequantize (tq_mse_dequantize) of the first nt tokens of every sequence's value pages into fp16 (what
        // a prefill attention over the cached prefix would read first), at most 2^21 vectors: compressed
        // bytes in plus fp16 out count as moved. Checked: the row's tokens bit for bit against the fp16
        // rounding of the reference decode of its gathered block. Also into an output 2 bytes off 16-byte
        // alignment ("unaligned": one 2-byte store per element instead of the lanes' vector stores).
        for (int off = 0; off < 2 && want("dequantize"); ++off) {
          const std::size_t per_tok = std::size_t(batch) * kvh;
          const int nt = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(ctx, (1u << 21) / per_tok)));
          const std::size_t nvec = per_tok * nt, out_bytes = nvec * d * 2;
          DevMem dout_mem(out_bytes + 16);
          std::uint8_t* dout16 = dout_mem.as<std::uint8_t>() + 2 * off;
          DevMem dzero(std::size_t(batch) * 4);
          TKV_CUDA_CHECK(cudaMemsetAsync(dzero.p, 0, std::size_t(batch) * 4, s));
          auto run = [&](int i) {
            cuda::tq_mse_dequantize(tab, {vb[i % nrot]->as<std::uint8_t>(), stride}, pt, batch, nt, kvh,
                                    dzero.as<std::int32_t>(), dout16, st, cuda::IoType::kF16);
          };
          const double us = median_us(s, reps, run);
          BenchRow r = proto;
          r.op = "dequantize", r.method = off ? "tq-mse (fp16 out; unaligned)" : "tq-mse (fp16 out)";
          r.bits = bits_d, r.context = std::size_t(nt);
          r.time_us = us;
          r.gbps = (nvec * (tab.code_bytes() + nb) + out_bytes) / (us * 1e3);
          if (opt.check) {
            run(0);
            TKV_CUDA_CHECK(cudaStreamSynchronize(s));
            const std::size_t m = std::min<std::size_t>(std::size_t(nt), rc.n);
            std::vector<float> dec(rc.n * d);
            ref->decode(vrow.data(), rc.n, dec.data());
            std::vector<std::uint8_t> got(m * d * 2), want_b(m * d * 2);
            // The row's m tokens in one strided copy: token j of (rc.b, rc.g) at ((rc.b nt + j) kvh + rc.g) d.
            const std::size_t row_bytes = std::size_t(d) * 2;
            TKV_CUDA_CHECK(cudaMemcpy2D(got.data(), row_bytes,
                                        dout16 + (rc.b * std::size_t(nt) * kvh + rc.g) * row_bytes,
                                        kvh * row_bytes, row_bytes, m, cudaMemcpyDeviceToHost));
            for (std::size_t k = 0; k < m * d; ++k) {
              const std::uint16_t h = float_to_half(dec[k]);
              std::memcpy(want_b.data() + k * 2, &h, 2);
            }
            rc.compare_bytes(r, got, want_b);
            ++checks;
          }
          rows.push_back(r);
        }

        // Encode (prefill append of the whole context into the key pool), vs a d2d copy of the same bytes,
        // from fp32, fp16 and bf16 input (method "tq-mse", "tq-mse (fp16 in)", "tq-mse (bf16 in)"): what
        // an engine feeds is usually 16-bit. Input plus output bytes count as moved.
        for (const cuda::IoType xt : {cuda::IoType::kF32, cuda::IoType::kF16, cuda::IoType::kBf16}) {
          const std::size_t esz = xt == cuda::IoType::kF32 ? 4 : 2;
          const std::size_t n_in = std::size_t(batch) * ctx * kvh * d;
          const std::size_t in_bytes = n_in * esz;
          if (in_bytes > (4ull << 30) || !want("encode")) continue;
          // Inputs rotated past L2 as the pools are (at small shapes one input would stay in L2 across calls).
          const int nx = rotations(in_bytes);
          std::vector<std::unique_ptr<DevMem>> xs;
          for (int i = 0; i < nx; ++i) {
            xs.push_back(std::make_unique<DevMem>(in_bytes));
            if (xt == cuda::IoType::kF32) {
              fill_float<<<fill_grid(), 256, 0, s>>>(xs.back()->as<float>(), n_in, 99 + bits + i + sd, 8.0f);
            } else {
              fill_half16<<<fill_grid(), 256, 0, s>>>(xs.back()->as<std::uint16_t>(), n_in, 99 + bits + i + sd, 8.0f,
                                                      xt == cuda::IoType::kBf16);
            }
            TKV_CHECK_LAUNCH();
          }
          const DevMem& x = *xs[0];  // the checked call's input
          DevMem zero(batch * 4), flag(4);
          TKV_CUDA_CHECK(cudaMemsetAsync(zero.p, 0, batch * 4, s));
          TKV_CUDA_CHECK(cudaMemsetAsync(flag.p, 0, 4, s));
          // Timed with the bad-vector flag on (what a careful caller passes; its cost is one compare per
          // vector): the data is finite with small norms, so it must stay 0 (checked below).
          const double enc_us = median_us(s, reps, [&](int i) {
            cuda::tq_mse_append(tab, xs[i % nx]->p, batch, ctx, kvh, zero.as<std::int32_t>(), pt,
                                {kb[i % nrot]->as<std::uint8_t>(), stride}, st, xt, flag.as<std::int32_t>());
          });
          const std::size_t moved = in_bytes + std::size_t(batch) * ctx * kvh * (tab.code_bytes() + nb);
          const double copy_us = copy_baseline_us(s, reps, moved);  // the same bytes moved
          BenchRow e = proto;
          e.op = "encode", e.bits = bits_d;
          e.method = xt == cuda::IoType::kF32 ? "tq-mse" : xt == cuda::IoType::kF16 ? "tq-mse (fp16 in)" : "tq-mse (bf16 in)";
          e.time_us = enc_us, e.baseline = "d2d-copy (same bytes)", e.baseline_time_us = copy_us;
          e.speedup = copy_us / enc_us, e.gbps = moved / (enc_us * 1e3);
          if (opt.check) {  // the row's bytes (appended into pair 0) against the reference encode of its inputs
            cuda::tq_mse_append(tab, x.p, batch, ctx, kvh, zero.as<std::int32_t>(), pt,
                                {kb[0]->as<std::uint8_t>(), stride}, st, xt);
            TKV_CUDA_CHECK(cudaStreamSynchronize(s));
            // x: [batch][ctx][kv_heads][d]; the row's vectors are d elements every kv_heads * d; 16-bit
            // inputs widened exactly, as the reference codec's 16-bit entry points do
            std::vector<float> xr(std::size_t(ctx) * d);
            const std::size_t first = (std::size_t(rc.b) * ctx * kvh + rc.g) * d;
            if (xt == cuda::IoType::kF32) {
              TKV_CUDA_CHECK(cudaMemcpy2D(xr.data(), std::size_t(d) * 4, x.as<float>() + first,
                                          std::size_t(kvh) * d * 4, std::size_t(d) * 4, ctx, cudaMemcpyDeviceToHost));
            } else {
              std::vector<std::uint16_t> h(std::size_t(ctx) * d);
              TKV_CUDA_CHECK(cudaMemcpy2D(h.data(), std::size_t(d) * 2, x.as<std::uint16_t>() + first,
                                          std::size_t(kvh) * d * 2, std::size_t(d) * 2, ctx, cudaMemcpyDeviceToHost));
              for (std::size_t i = 0; i < h.size(); ++i)
                xr[i] = xt == cuda::IoType::kBf16 ? bf16_to_float(h[i]) : half_to_float(h[i]);
            }
            std::vector<std::uint8_t> want_b(ref->encoded_bytes(ctx_sz));
            ref->encode(xr.data(), ctx_sz, want_b.data());
            rc.compare_bytes(e, rc.gather(kb[0]->as<std::uint8_t>(), tf), want_b);
            std::int32_t flagged = 0;
            TKV_CUDA_CHECK(cudaMemcpy(&flagged, flag.p, 4, cudaMemcpyDeviceToHost));
            if (flagged != 0) {  // finite data of small norm flagged: a failed check
              std::fprintf(stderr, "run_cuda_bench: CHECK FAILED: encode %s %g-bit: the bad-vector flag is set on clean data\n",
                           e.method.c_str(), bits_d);
              e.rel_err = 1, e.check_tol = 0;
              ++rc.failures;
            }
            ++checks;
          }
          rows.push_back(e);
        }

        // QJL keys (1-bit sketch, m = head_dim, fp16 norm) with MSE values at `bits`, paged, through the fp16
        // tensor-core kernel (qjl_paged_decode; at 80, 96, 112 also kernel 1, and at the other head_dims that are
        // not powers of two only its CUDA-core kernel: the rows named "(cuda cores)"). Key pools rotated like the
        // value pools.
        const bool sketch_h16 = pow2 || cuda::detail::h16_dense_head_dim(d);  // sketch keys' fp16 tensor-core instances
        for (int qkernel : {0, 1}) {
          if (!(bits >= 2 && bits == bits_d && want("qjl")) || (qkernel == 1 && (pow2 || !sketch_h16))) continue;
          CodecConfig qc;
          qc.method = Method::kQjl, qc.bits = 1, qc.head_dim = d;
          cuda::QjlTables qtab(qc);
          const std::size_t qstride = qtab.page_stride(page_size), qcb = qtab.code_bytes();
          const std::size_t kpool_bytes = table.size() * kvh * qstride;
          const std::size_t noff = page_size * qcb, nend = noff + 2 * page_size;
          const auto qkp = filled_pools(s, rotations(kpool_bytes), kpool_bytes, qstride, noff, nend, 47 + bits + sd, 1);
          const int nqrot = static_cast<int>(qkp.size());
          cuda::DecodeArgs ak = a;
          ak.kernel = qkernel;
          ak.block_warps = 0;
          auto run = [&](int i) {
            cuda::qjl_paged_decode(qtab, tab, {qkp[i % nqrot]->as<std::uint8_t>(), qstride},
                                   {vb[i % nrot]->as<std::uint8_t>(), stride}, pt, ak, st);
          };
          const double us = median_us(s, reps, run);
          const bool h16 = sketch_h16 && qkernel == 0;
          BenchRow r = proto;
          r.op = "decode_attention", r.method = h16 ? "qjl keys" : "qjl keys (cuda cores)", r.bits = bits;
          r.time_us = us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / us;
          r.gbps = (std::size_t(batch) * ctx * kvh * (qcb + 2 + tab.code_bytes() + 2) + q_bytes) / (us * 1e3);
          if (opt.check) {
            const BlockFmt qf{qstride, qcb, 2, 0, d};
            const auto qref = make_codec(qc);
            check(r, run, rc.ref(*qref, rc.gather(qkp[0]->as<std::uint8_t>(), qf), *ref, vrow), h16 ? kTolH16 : kTolVq);
          }
          rows.push_back(r);
        }

        // TurboQuant-Prod keys (bits - 1 MSE + 1-bit QJL, m = head_dim) with MSE values at `bits`: paged
        // (tq_prod_paged_decode: the fp16 tensor-core kernel at 64, 80, 96, 112, 128, 256, its CUDA-core kernel at
        // the other head_dims and as kernel 1 at 80, 96, 112: "(paged; cuda cores)"), on contiguous blocks
        // (tq_prod_decode; the untuned CUDA-core kernel of cuda_qjl.h), and its encode (dense rotations at head_dims
        // that are not powers of two).
        if (bits >= 2 && bits == bits_d && want("tq-prod")) {
          CodecConfig pc;
          pc.method = Method::kTurboProd, pc.bits = bits, pc.head_dim = d;
          cuda::QjlTables ptab(pc);
          {  // the fast path: paged Prod keys through the fp16 tensor-core kernel
            const std::size_t pstride = cuda::tq_prod_page_stride(page_size, ptab.code_bytes());
            const std::size_t kpool_bytes = table.size() * kvh * pstride;
            const std::size_t noff = page_size * ptab.code_bytes(), nend = noff + 4 * page_size;
            // Key pools rotated like the value pools, so a call reads its keys from DRAM, not L2.
            const auto pkp = filled_pools(s, rotations(kpool_bytes), kpool_bytes, pstride, noff, nend, 41 + bits + sd, 1);
            const int nprot = static_cast<int>(pkp.size());
            // head_dim 256: also DecodeArgs::block_warps 8 ("tq-prod keys (8 warps)", as tq-mse's row); warps -1:
            // kernel 1 at 80, 96, 112 (the CUDA-core kernel next to the fp16 one)
            for (int warps : {0, 8, -1}) {
              if (warps == 8 && d != 256) continue;
              if (warps == -1 && (pow2 || !sketch_h16)) continue;
              const bool h16 = sketch_h16 && warps != -1;
              cuda::DecodeArgs ak = a;
              ak.kernel = h16 ? 0 : 1;
              ak.block_warps = warps == 8 ? 8 : 0;
              auto run = [&](int i) {
                cuda::tq_prod_paged_decode(ptab, tab, {pkp[i % nprot]->as<std::uint8_t>(), pstride},
                                           {vb[i % nrot]->as<std::uint8_t>(), stride}, pt, ak, st);
              };
              const double us = median_us(s, reps, run);
              BenchRow r = proto;
              r.op = "decode_attention", r.bits = bits;
              r.method = !h16 ? "tq-prod keys (paged; cuda cores)" : warps == 8 ? "tq-prod keys (8 warps)" : "tq-prod keys";
              r.time_us = us, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / us;
              r.gbps = (std::size_t(batch) * ctx * kvh * (ptab.code_bytes() + 4 + tab.code_bytes() + 2) + q_bytes) /
                       (us * 1e3);
              if (opt.check) {
                const BlockFmt pf{pstride, ptab.code_bytes(), 4, 0, d};
                const auto pref = make_codec(pc);
                check(r, run, rc.ref(*pref, rc.gather(pkp[0]->as<std::uint8_t>(), pf), *ref, vrow), h16 ? kTolH16 : kTolVq);
              }
              rows.push_back(r);
            }
          }
          const std::size_t kblk = ptab.block_bytes(ctx), vblk = std::size_t(ctx) * (tab.code_bytes() + 2);
          const std::size_t kb_bytes = std::size_t(batch) * kvh * kblk, vb_bytes = std::size_t(batch) * kvh * vblk;
          if (kb_bytes + vb_bytes < free_b / 3) {
            // Key and value blocks rotated past L2 (as the paged rows' pools; a block is a "page" of ctx tokens).
            const int npr = rotations(kb_bytes + vb_bytes);
            const auto pks = filled_pools(s, npr, kb_bytes, kblk, std::size_t(ctx) * ptab.code_bytes(), kblk,
                                          31 + bits + sd, 2);
            const auto pvs = filled_pools(s, npr, vb_bytes, vblk, std::size_t(ctx) * tab.code_bytes(), vblk,
                                          37 + bits + sd, 2);
            const DevMem& pk = *pks[0];  // the checked call's blocks
            const DevMem& pv = *pvs[0];
            cuda::ProdDecodeArgs pa;
            pa.batch = batch, pa.num_heads = nh, pa.num_kv_heads = kvh;
            pa.q = q.as<float>(), pa.out = out.as<float>(), pa.keys = pk.as<std::uint8_t>(), pa.values = pv.as<std::uint8_t>();
            pa.capacity = ctx, pa.seq_lens = dlens.as<std::int32_t>(), pa.max_seq_len = ctx;
            pa.softmax_scale = a.softmax_scale;
            DevMem pws(cuda::tq_prod_decode_workspace_bytes(pa, d));
            pa.workspace = pws.p;
            auto run = [&](int i) {
              cuda::ProdDecodeArgs pi = pa;
              pi.keys = pks[i % npr]->as<std::uint8_t>(), pi.values = pvs[i % npr]->as<std::uint8_t>();
              cuda::tq_prod_decode(ptab, tab, pi, st);
            };
            const double pus = median_us(s, reps, run);
            BenchRow r = proto;
            r.op = "decode_attention", r.method = "tq-prod keys (cuda cores)", r.bits = bits;
            r.time_us = pus, r.baseline = base_name, r.baseline_time_us = base_us, r.speedup = base_us / pus;
            r.gbps = (kb_bytes + vb_bytes + q_bytes) / (pus * 1e3);
            if (opt.check) {  // [batch][kv_heads] blocks in the formats.h layout: the row's are read directly
              TKV_CUDA_CHECK(cudaStreamSynchronize(s));
              const std::size_t row = std::size_t(rc.b) * kvh + rc.g;
              std::vector<std::uint8_t> kr(kblk), vr(vblk);
              TKV_CUDA_CHECK(cudaMemcpy(kr.data(), pk.as<std::uint8_t>() + row * kblk, kblk, cudaMemcpyDeviceToHost));
              TKV_CUDA_CHECK(cudaMemcpy(vr.data(), pv.as<std::uint8_t>() + row * vblk, vblk, cudaMemcpyDeviceToHost));
              const auto pref = make_codec(pc);
              check(r, run, rc.ref(*pref, kr, *ref, vr), kTolVq);
            }
            rows.push_back(r);
          }
          const std::size_t n_enc = std::min<std::size_t>(std::size_t(batch) * ctx * kvh, 1u << 20);
          // Inputs and outputs rotated past L2 (nothing of one call left in L2 for the next).
          const std::size_t pe_bytes = n_enc * d * 4 + ptab.block_bytes(n_enc);
          const int ne = rotations(pe_bytes);
          std::vector<std::unique_ptr<DevMem>> pxs, pes;
          for (int i = 0; i < ne; ++i) {
            pxs.push_back(std::make_unique<DevMem>(n_enc * d * 4));
            pes.push_back(std::make_unique<DevMem>(ptab.block_bytes(n_enc)));
            fill_float<<<fill_grid(), 256, 0, s>>>(pxs.back()->as<float>(), n_enc * d, 55 + bits + i + sd, 8.0f);
            TKV_CHECK_LAUNCH();
          }
          const DevMem& x = *pxs[0];
          const DevMem& enc = *pes[0];
          const double eus = median_us(s, reps, [&](int i) {
            cuda::tq_prod_encode(ptab, pxs[i % ne]->as<float>(), n_enc, pes[i % ne]->as<std::uint8_t>(), st);
          });
          BenchRow e = proto;
          e.op = "encode", e.method = "tq-prod", e.bits = bits, e.context = n_enc, e.batch = 1;
          e.time_us = eus, e.gbps = (n_enc * d * 4 + ptab.block_bytes(n_enc)) / (eus * 1e3);
          if (opt.check) {  // the first m vectors' codes and scalars against the reference encode
            const std::size_t m = std::min<std::size_t>(n_enc, 4096), pcb = ptab.code_bytes();
            TKV_CUDA_CHECK(cudaStreamSynchronize(s));
            std::vector<float> xr(m * d);
            TKV_CUDA_CHECK(cudaMemcpy(xr.data(), x.as<float>(), xr.size() * 4, cudaMemcpyDeviceToHost));
            std::vector<std::uint8_t> got(m * (pcb + 4));
            TKV_CUDA_CHECK(cudaMemcpy(got.data(), enc.as<std::uint8_t>(), m * pcb, cudaMemcpyDeviceToHost));
            TKV_CUDA_CHECK(cudaMemcpy(got.data() + m * pcb, enc.as<std::uint8_t>() + n_enc * pcb, m * 4,
                                      cudaMemcpyDeviceToHost));
            const auto pref = make_codec(pc);
            std::vector<std::uint8_t> want_b(pref->encoded_bytes(m));
            pref->encode(xr.data(), m, want_b.data());
            rc.compare_bytes(e, got, want_b);
            ++checks;
          }
          rows.push_back(e);
        }
      }
      TKV_CUDA_CHECK(cudaStreamSynchronize(s));
      failures += rc.failures;
    }
  TKV_CUDA_CHECK(cudaStreamDestroy(s));
  if (opt.check)
    std::fprintf(stderr, "run_cuda_bench: %d results checked against the reference, %d failed (seed %llu)\n", checks,
                 failures, seed);
  return rows;
}

}  // namespace turbokv
