// turbokv — `turbokv bench`: decode-attention and encode timings with the
// baselines users have, measured in the same run.
//
// Each row compares one turbokv kernel with a baseline timed in the same
// process on the same shapes (CPU: our dense fp16/fp32 decode attention and a
// memcpy-style stream of the compressed bytes; CUDA: our fp16 flash-decoding
// kernel). Field names are the JSON keys of `turbokv bench --json`.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace turbokv {

struct BenchRow {
  std::string op;        ///< "decode_attention", "encode", "stream", ...
  std::string method;    ///< e.g. "tq-mse", "fp16-dense" ([tokens][kv_heads][dim]), "fp16-heads" (CPU: fp16 in
                         ///< head-major blocks), "tq-mse bf16" (AttentionPrecision::kBf16, CPU with AVX512-BF16),
                         ///< "tq-mse int8" (AttentionPrecision::kInt8, CPU at the AVX-512 level)
  double bits = 0;       ///< nominal bits (16 for fp16)
  std::size_t context = 0;  ///< tokens per sequence
  int head_dim = 0, num_heads = 0, num_kv_heads = 0, batch = 1, threads = 1;
  double time_us = 0;           ///< median time of one call, microseconds
  std::string baseline;         ///< name of the baseline timed in the same run (CPU compressed rows: the
                                ///< faster of fp16-dense and fp16-heads)
  double baseline_time_us = 0;  ///< its median time, microseconds
  double speedup = 0;           ///< baseline_time_us / time_us
  double gbps = 0;              ///< bytes actually read (compressed cache + queries) / time, GB/s (1e9 B/s)
  // Added by the CPU bench (JSON keys of the same names):
  double tokens_per_s = 0;      ///< context * batch / time (decode attention), tokens encoded / s (encode)
  double bits_per_element = 0;  ///< all-in bits per cached element (codes + per-token norms)
  double stream_time_us = 0;    ///< time to merely stream the same compressed bytes once (0 if not measured)
  /// CPU decode rows: time of cpu::fma_peak for the call's multiply-adds (2 * context * num_heads * head_dim) on
  /// the same threads: the run's multiply-add bound (0 if not measured; time_us / peak_time_us = "x_peak")
  double peak_time_us = 0;
  std::string simd;             ///< SIMD level the CPU kernels ran at ("avx512", "avx2", "scalar"; "avx512-bf16" for bf16 rows,
                                ///< "avx512-vnni" for int8 rows)
  // Added by the CUDA bench when it checks a row (BenchOptions::check; -1 = not checked):
  /// Decode rows: max |out - ref| and ||out - ref|| / ||ref|| over the checked (sequence, KV head) row's query
  /// heads, ref = the reference attention on the same cache (attention_compressed, fp64; fp16: attention_exact
  /// on the fp16 values). Encode rows: the number and the fraction of code / scalar bytes that differ from the
  /// reference encode of the checked row (must be 0).
  double max_err = -1, rel_err = -1;
  double check_tol = -1;  ///< the bound rel_err is held to (the GPU tests' tolerance of that kernel)
  /// A checked row whose rel_err exceeds its bound (or is NaN).
  bool check_failed() const { return check_tol >= 0 && !(rel_err <= check_tol); }
};

struct BenchOptions {
  std::string device = "cpu";                                   ///< "cpu" or "cuda"
  std::vector<std::size_t> contexts = {1024, 4096, 16384, 32768, 131072};
  std::vector<int> threads = {1, 2};                            ///< CPU only
  std::vector<int> batches = {1};                               ///< CUDA: sequences per call (CPU: unused)
  std::vector<double> bits = {2, 3, 4};
  /// Empty = every method with a fast path. CPU: method names (default: every method but the fp16
  /// passthrough, each at the requested widths it supports, qjl and fp8 at their one width). CUDA: parts to run,
  /// any of "tq-mse" (fp16 tensor-core decode), "3xtf32", "encode", "dequantize", "tq-prod", "qjl", "fp8", "kivi", "rvq", "pvq",
  /// "polar" (the fp16 baseline always runs).
  std::vector<std::string> methods;
  int head_dim = 128, num_heads = 32, num_kv_heads = 8;  ///< the shape of every case (CPU and CUDA)
  int repeats = 0;                                              ///< 0 = choose by time
  /// CUDA: seed of the random caches, queries and encode inputs (0 = from the clock: fresh data each run;
  /// run_cuda_bench prints the seed it used to stderr).
  unsigned long long seed = 0;
  /// CUDA: check every timed result against the CPU reference on one (sequence, KV head) row
  /// (BenchRow::max_err, rel_err, check_tol); failures are printed to stderr.
  bool check = true;
  /// CUDA: split-K splits of every paged decode (DecodeArgs::num_splits; 0 = the planner's choice).
  int num_splits = 0;
};

/// CPU benchmark (src/cpu). Throws std::invalid_argument on bad options.
std::vector<BenchRow> run_cpu_bench(const BenchOptions& opt);
/// CUDA benchmark (src/cuda); throws std::runtime_error if built without CUDA or no GPU is present.
std::vector<BenchRow> run_cuda_bench(const BenchOptions& opt);

/// One attention shape of a bench run.
struct BenchShape {
  int head_dim = 128, num_heads = 32, num_kv_heads = 8;
};
/// Parses `--configs`: comma-separated head_dim:heads:kv_heads items (e.g. "128:32:8,64:9:3,256:4:1").
/// Throws std::invalid_argument naming --configs and the item unless each has three positive integers
/// with heads a multiple of kv_heads, and unless there is at least one.
std::vector<BenchShape> parse_bench_configs(const std::string& s);

/// {"results": [...]} with the BenchRow keys.
std::string bench_json(const std::vector<BenchRow>& rows);
/// CSV of the rows, the header line first (op, method, bits, context, head_dim, num_heads, num_kv_heads,
/// batch, threads, time_us, baseline, baseline_time_us, speedup, gbps, max_err, rel_err, check_tol: the
/// columns bench/cuda/compare_sdpa.py reads). bench_csv_line is one row's line (with its newline).
std::string bench_csv_header();
std::string bench_csv_line(const BenchRow& r);
/// A fixed-width table.
std::string bench_table(const std::vector<BenchRow>& rows);

}  // namespace turbokv
