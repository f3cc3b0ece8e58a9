// turbokv_cuda_bench: times the CUDA kernels (run_cuda_bench) over the shapes of
// issue 5 and prints one table (and a CSV with the BenchRow keys for
// compare_sdpa.py).
//
//   turbokv_cuda_bench [--csv FILE] [--configs 128:32:8,64:9:3,256:4:1]
//                      [--batches 1,8,16,64] [--contexts 4096,32768,65536,131072]
//                      [--bits 2,3,4] [--repeats 50]
//                      [--methods tq-mse,3xtf32,encode,dequantize,tq-prod,qjl,fp8,kivi,rvq,pvq,polar]
//                      [--seed N] [--no-check] [--splits N]
//   Every result is checked against the CPU reference on one (sequence, KV head) row (columns max_err,
//   rel_err, tol; encode rows: differing bytes); exit status 3 if any exceeds its bound. --csv: each shape's
//   rows are written as soon as the shape is done (a run cut short keeps what it measured). --seed: the data
//   seed (default: from the clock, printed to stderr); --no-check: timings only; --splits: the split-K
//   count of every paged decode (default 0: the planner's).
//   --methods: the parts to run (default all): tq-mse = the fp16 tensor-core decode ("tq-mse" rows),
//   3xtf32 ("tq-mse (3xtf32)" rows), encode (the tq-mse encode rows), dequantize (tq_mse_dequantize of the
//   value pages into fp16), tq-prod (every "tq-prod" row, decode and encode), qjl ("qjl keys": QJL keys with
//   tq-mse values, qjl_paged_decode), fp8 (the "fp8" rows: fp8_decode's fp16 tensor-core
//   kernel on e4m3 pages, head_dim 64, 80, 96, 112, 128, 256; "fp8 (cuda cores)": its CUDA-core kernel),
//   kivi, rvq, pvq and polar (kivi_decode with groups of 16, rvq_paged_decode, pvq_paged_decode,
//   polar_paged_decode on pages of 16 tokens, keys and values at the same width: the "kivi" / "rvq" /
//   "pvq" / "polar" rows are kernel 0, the "... (cuda cores)" rows kernel 1; head_dim 64/128/256);
//   the fp16 baseline always runs.
//   --configs head_dim:heads:kv_heads; head_dim any multiple of 16 in 64..256 (80, 96, 112: the
//   fp16 tensor-core "tq-mse" rows; other non-powers of two: "tq-mse (cuda cores)"; no 3xtf32,
//   tq-prod, rvq, pvq or polar at those sizes).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include <type_traits>

#include "turbokv/bench.h"

namespace {

template <class T>
std::vector<T> parse_list(const std::string& s) {
  std::vector<T> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if constexpr (std::is_same_v<T, std::string>)
      v.push_back(item);
    else
      v.push_back(static_cast<T>(std::stod(item)));
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv, configs = "128:32:8,64:9:3,256:4:1";
  turbokv::BenchOptions opt;
  opt.device = "cuda";
  opt.batches = {1, 8, 16, 64};
  opt.contexts = {4096, 32768, 65536, 131072};
  opt.bits = {2, 3, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--csv") csv = v, ++i;
    else if (a == "--configs") configs = v, ++i;
    else if (a == "--batches") opt.batches = parse_list<int>(v), ++i;
    else if (a == "--contexts") opt.contexts = parse_list<std::size_t>(v), ++i;
    else if (a == "--bits") opt.bits = parse_list<double>(v), ++i;
    else if (a == "--repeats") opt.repeats = std::atoi(v.c_str()), ++i;
    else if (a == "--methods") opt.methods = parse_list<std::string>(v), ++i;
    else if (a == "--seed") opt.seed = std::strtoull(v.c_str(), nullptr, 10), ++i;
    else if (a == "--no-check") opt.check = false;
    else if (a == "--splits") opt.num_splits = std::atoi(v.c_str()), ++i;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  // The CSV gets each shape's rows as soon as that shape is done (one run_cuda_bench call per config, batch
  // and context), so a run cut short (a `timeout`, a lost device) keeps the rows it measured.
  std::FILE* f = nullptr;
  if (!csv.empty()) {
    f = std::fopen(csv.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", csv.c_str());
      return 1;
    }
    std::fputs(turbokv::bench_csv_header().c_str(), f);
    std::fflush(f);
  }
  std::vector<turbokv::BenchRow> rows;
  int rc = 0;
  std::vector<turbokv::BenchShape> shapes;
  try {
    shapes = turbokv::parse_bench_configs(configs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  for (const turbokv::BenchShape& sh : shapes) {
    const std::string c = std::to_string(sh.head_dim) + ":" + std::to_string(sh.num_heads) + ":" +
                          std::to_string(sh.num_kv_heads);
    opt.head_dim = sh.head_dim, opt.num_heads = sh.num_heads, opt.num_kv_heads = sh.num_kv_heads;
    const std::vector<int> batches = opt.batches;
    const std::vector<std::size_t> contexts = opt.contexts;
    for (int batch : batches)
      for (std::size_t ctx : contexts) {
        turbokv::BenchOptions one = opt;
        one.batches = {batch}, one.contexts = {ctx};
        try {  // one failing configuration does not lose the others
          const auto r = turbokv::run_cuda_bench(one);
          rows.insert(rows.end(), r.begin(), r.end());
          for (const auto& x : r)
            if (f) std::fputs(turbokv::bench_csv_line(x).c_str(), f);
          if (f) std::fflush(f);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "turbokv_cuda_bench: config %s batch %d context %zu: %s\n", c.c_str(), batch, ctx,
                       e.what());
          rc = 1;
        }
      }
  }
  if (f) std::fclose(f);
  std::printf("%-16s %-26s %4s %5s %6s %6s %5s %10s %10s %8s %9s %9s %9s %7s\n", "op", "method", "bits", "d", "heads",
              "batch", "ctx", "time_us", "base_us", "speedup", "GB/s", "max_err", "rel_err", "tol");
  for (const auto& r : rows) {
    std::printf("%-16s %-26s %4g %5d %3d/%-2d %6d %5zuk %10.1f %10.1f %8.2f %9.0f %9.2g %9.2g %7.0e%s\n", r.op.c_str(),
                r.method.c_str(), r.bits, r.head_dim, r.num_heads, r.num_kv_heads, r.batch, r.context / 1024, r.time_us,
                r.baseline_time_us, r.speedup, r.gbps, r.max_err, r.rel_err, r.check_tol,
                r.check_failed() ? "  FAILED" : "");
    if (r.check_failed()) rc = 3;
  }
  int checked = 0, failed = 0;
  for (const auto& r : rows) checked += r.check_tol >= 0 ? 1 : 0, failed += r.check_failed() ? 1 : 0;
  if (checked) std::printf("turbokv_cuda_bench: %d results checked against the reference, %d failed\n", checked, failed);
  return rc;
}
