// `turbokv bench` output (JSON and table) shared by the CPU and CUDA benches,
// and the run_cuda_bench stub for builds without CUDA.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "turbokv/bench.h"

namespace turbokv {

std::string bench_json(const std::vector<BenchRow>& rows) {
  nlohmann::json res = nlohmann::json::array();
  for (const BenchRow& r : rows)
    res.push_back({{"op", r.op},
                   {"method", r.method},
                   {"bits", r.bits},
                   {"context", r.context},
                   {"head_dim", r.head_dim},
                   {"num_heads", r.num_heads},
                   {"num_kv_heads", r.num_kv_heads},
                   {"batch", r.batch},
                   {"threads", r.threads},
                   {"time_us", r.time_us},
                   {"baseline", r.baseline},
                   {"baseline_time_us", r.baseline_time_us},
                   {"speedup", r.speedup},
                   {"gbps", r.gbps},
                   {"tokens_per_s", r.tokens_per_s},
                   {"bits_per_element", r.bits_per_element},
                   {"stream_time_us", r.stream_time_us},
                   {"peak_time_us", r.peak_time_us},
                   {"simd", r.simd},
                   {"max_err", r.max_err},
                   {"rel_err", r.rel_err},
                   {"check_tol", r.check_tol}});
  return nlohmann::json{{"results", res}}.dump(2) + "\n";
}

std::vector<BenchShape> parse_bench_configs(const std::string& s) {
  std::vector<BenchShape> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t end = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, end - pos);
    BenchShape b;
    char tail = 0;
    const bool ok = std::sscanf(item.c_str(), "%d:%d:%d%c", &b.head_dim, &b.num_heads, &b.num_kv_heads, &tail) == 3 &&
                    b.head_dim > 0 && b.num_heads > 0 && b.num_kv_heads > 0 && b.num_heads % b.num_kv_heads == 0;
    if (!ok)
      throw std::invalid_argument("--configs: item '" + item +
                                  "': must be head_dim:heads:kv_heads, positive, heads a multiple of kv_heads");
    out.push_back(b);
    pos = end + 1;
  }
  return out;
}

std::string bench_csv_header() {
  return "op,method,bits,context,head_dim,num_heads,num_kv_heads,batch,threads,time_us,baseline,baseline_time_us,"
         "speedup,gbps,max_err,rel_err,check_tol\n";
}

namespace {
/// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
}  // namespace

std::string bench_csv_line(const BenchRow& x) {
  return fmt::format("{},{},{},{},{},{},{},{},{},{:.3f},{},{:.3f},{:.4f},{:.2f},{:.3g},{:.3g},{:.3g}\n", csv_field(x.op),
                     csv_field(x.method), x.bits, x.context, x.head_dim, x.num_heads, x.num_kv_heads, x.batch, x.threads,
                     x.time_us, csv_field(x.baseline), x.baseline_time_us, x.speedup, x.gbps, x.max_err, x.rel_err,
                     x.check_tol);
}

std::string bench_table(const std::vector<BenchRow>& rows) {
  std::string s = fmt::format("{:<17} {:<11} {:>5} {:>7} {:>4} {:>6} {:>5} {:>3} {:>11} {:>12} {:>8} {:<11} {:>11} {:>8} {:>9} {:>7}\n",
                              "op", "method", "bits", "context", "d", "heads", "batch", "thr", "time_us", "tokens/s",
                              "GB/s", "baseline", "base_us", "speedup", "x_stream", "x_peak");
  for (const BenchRow& r : rows) {
    const std::string xs = r.stream_time_us > 0 ? fmt::format("{:.2f}", r.time_us / r.stream_time_us) : "-";
    const std::string xp = r.peak_time_us > 0 ? fmt::format("{:.2f}", r.time_us / r.peak_time_us) : "-";
    s += fmt::format("{:<17} {:<11} {:>5} {:>7} {:>4} {:>6} {:>5} {:>3} {:>11.1f} {:>12.4g} {:>8.2f} {:<11} {:>11.1f} {:>8.2f} {:>9} {:>7}\n",
                     r.op, r.method, r.bits, r.context, r.head_dim, fmt::format("{}/{}", r.num_heads, r.num_kv_heads),
                     r.batch, r.threads, r.time_us, r.tokens_per_s, r.gbps, r.baseline, r.baseline_time_us, r.speedup,
                     xs, xp);
  }
  return s;
}

#if !defined(TURBOKV_HAVE_CUDA)
std::vector<BenchRow> run_cuda_bench(const BenchOptions&) {
  throw std::runtime_error("turbokv was built without CUDA");
}
#endif

}  // namespace turbokv
