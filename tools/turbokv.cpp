// The turbokv command-line tool: `turbokv eval`, `turbokv methods`, `turbokv bench`.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "turbokv/bench.h"
#include "turbokv/codec.h"
#include "turbokv/eval.h"

#ifndef TURBOKV_SOURCE_DIR
#define TURBOKV_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;
using namespace turbokv;

namespace {

std::string methods_text() {
  std::string s = "Methods (nominal bits per coordinate; `turbokv methods` shows all-in bits):\n";
  const char* what[] = {"TurboQuant-MSE: rotation + Lloyd-Max codebook (arXiv 2504.19874 Alg. 1)",
                        "TurboQuant-Prod: MSE at b-1 bits + 1-bit QJL residual, unbiased (Alg. 2)",
                        "QJL: 1-bit JL sign sketch + norm (arXiv 2406.03482)",
                        "RVQ: two-stage residual scalar quantization after rotation",
                        "PVQ: product VQ, smoothing + Hadamard + k-means (VecInfer)",
                        "PolarQuant: recursive polar transform, angle codebooks (arXiv 2502.02617)",
                        "KIVI: int-b groups, keys per channel, values per token (arXiv 2402.02750)",
                        "fp8 e4m3 with a per-token scale",
                        "fp16 passthrough"};
  std::size_t i = 0;
  for (Method m : all_methods()) {
    std::string bits;
    for (double b : supported_bits(m)) bits += (bits.empty() ? "" : ",") + fmt::format("{}", b);
    s += fmt::format("  {:<8} bits {:<22} {}\n", method_name(m), bits, what[i++]);
  }
  return s;
}

std::vector<std::string> default_fixtures() {
  for (const fs::path& dir : {fs::path("data/kv"), fs::path(TURBOKV_SOURCE_DIR) / "data/kv"}) {
    if (!fs::is_directory(dir)) continue;
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (!files.empty()) return files;
  }
  throw std::runtime_error("eval: no --kv given and no bundled fixtures found under data/kv");
}

template <class T>
std::vector<T> split_list(const std::string& s, T (*parse)(const std::string&), const char* what) {
  std::vector<T> out;
  std::stringstream ss(s);
  for (std::string tok; std::getline(ss, tok, ',');) {
    if (tok.empty()) continue;
    try {
      out.push_back(parse(tok));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{} = {}: {}", what, tok, e.what()));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"turbokv: compress LLM KV caches and run attention on the compressed cache"};
  app.footer(methods_text());
  app.require_subcommand(1);

  auto* eval = app.add_subcommand("eval", "compress real KV caches with every method and compare attention with exact fp64");
  std::vector<std::string> kv;
  std::string methods, bits, layers, json_path, plot_path;
  int threads = 0, topk = 32;
  eval->add_option("--kv", kv, "safetensors file(s) with layers.L.{keys,values,queries} (default: bundled data/kv/*)");
  eval->add_option("--methods", methods, "comma-separated methods (default: all)");
  eval->add_option("--bits", bits, "comma-separated nominal widths (default: all each method supports)");
  eval->add_option("--layers", layers, "comma-separated layer indices (default: all in the file)");
  eval->add_option("--json", json_path, "write {\"results\": [...]} to this file");
  eval->add_option("--plot", plot_path, "draw error against bits per element to this PNG (needs python3 + matplotlib)");
  eval->add_option("--threads", threads, "worker threads (default: all cores)");
  eval->add_option("--topk", topk, "k of the top-k attention recall")->capture_default_str();
  bool center_keys = false;
  eval->add_flag("--center-keys", center_keys, "subtract the per-channel key mean before quantizing (methods show as NAME+center)");
  std::string eval_precision;
  eval->add_option("--precision", eval_precision,
                   "also run the CPU fast path's attention on the same bytes at this precision (fp32, bf16, int8: "
                   "AttentionPrecision; bf16 changes only the fused TurboQuant-MSE kernels, int8 those and the fused KIVI "
                   "(1..4 bits) and RVQ (1..3 bits) kernels) and add its "
                   "cosine / rel_err (cpu_cos, cpu_rel)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));

  auto* list = app.add_subcommand("methods", "list methods, their widths and all-in bits per element");
  int list_dim = 128, list_tokens = 4096;
  list->add_option("--head-dim", list_dim, "head_dim")->capture_default_str();
  list->add_option("--tokens", list_tokens, "tokens per head (amortises side data)")->capture_default_str();

  auto* bench = app.add_subcommand("bench", "time decode attention on the compressed cache against dense fp16/fp32 and a byte stream");
  std::string bench_device = "cpu", bench_threads, bench_contexts, bench_bits, bench_methods, bench_json_path,
              bench_batches, bench_configs, bench_csv_path;
  int bench_repeats = 0, bench_head_dim = 128, bench_heads = 32, bench_kv_heads = 8;
  unsigned long long bench_seed = 0;
  bool bench_no_check = false;
  bench->add_option("--device", bench_device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  bench->add_option("--threads", bench_threads, "comma-separated thread counts (CPU; default 1,2)");
  bench->add_option("--contexts", bench_contexts, "comma-separated context lengths (default 1024,4096,16384,32768,131072)");
  bench->add_option("--bits", bench_bits, "comma-separated widths (default 2,3,4)");
  bench->add_option("--methods", bench_methods, "comma-separated methods (CPU: any method, e.g. tq-mse,qjl,kivi,fp8; default every method but fp16; CUDA: the parts tq-mse,3xtf32,encode,dequantize,tq-prod,qjl,fp8,kivi,rvq,pvq,polar; default all)");
  bench->add_option("--repeats", bench_repeats, "timed runs per case (default: chosen by time)");
  bench->add_option("--head-dim", bench_head_dim,
                    "head_dim of every case (CPU: a multiple of 16 in 16..512; CUDA: a multiple of 16 in 64..256)")
      ->capture_default_str();
  bench->add_option("--heads", bench_heads, "query heads (a multiple of --kv-heads)")->capture_default_str();
  bench->add_option("--kv-heads", bench_kv_heads, "KV heads")->capture_default_str();
  bench->add_option("--batches", bench_batches, "CUDA: comma-separated batch sizes (sequences per call; default 1)");
  bench->add_option("--configs", bench_configs,
                    "comma-separated head_dim:heads:kv_heads shapes, each run in turn (e.g. 128:32:8,64:9:3,256:4:1; "
                    "default: --head-dim, --heads, --kv-heads)");
  bench->add_option("--json", bench_json_path, "write {\"results\": [...]} to this file");
  bench->add_option("--csv", bench_csv_path,
                    "write the rows as CSV to this file (each shape's rows as soon as it is done; the columns "
                    "bench/cuda/compare_sdpa.py reads)");
  bench->add_option("--seed", bench_seed, "CUDA: seed of the random caches and queries (default: from the clock)");
  bench->add_flag("--no-check", bench_no_check,
                  "CUDA: skip checking each result against the CPU reference (max_err, rel_err in the JSON)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*bench) {
      BenchOptions bo;
      bo.device = bench_device;
      bo.repeats = bench_repeats;
      bo.head_dim = bench_head_dim;
      bo.num_heads = bench_heads;
      bo.num_kv_heads = bench_kv_heads;
      bo.seed = bench_seed;
      bo.check = !bench_no_check;
      if (!bench_threads.empty()) bo.threads = split_list<int>(bench_threads, [](const std::string& s) { return std::stoi(s); }, "--threads");
      if (!bench_contexts.empty())
        bo.contexts = split_list<std::size_t>(bench_contexts, [](const std::string& s) { return static_cast<std::size_t>(std::stoull(s)); }, "--contexts");
      if (!bench_batches.empty())
        bo.batches = split_list<int>(bench_batches, [](const std::string& s) { return std::stoi(s); }, "--batches");
      if (!bench_bits.empty()) bo.bits = split_list<double>(bench_bits, [](const std::string& s) { return std::stod(s); }, "--bits");
      bo.methods = split_list<std::string>(bench_methods, [](const std::string& s) { return s; }, "--methods");
      const std::vector<BenchShape> shapes =
          bench_configs.empty() ? std::vector<BenchShape>{{bo.head_dim, bo.num_heads, bo.num_kv_heads}}
                                : parse_bench_configs(bench_configs);
      std::ofstream csv;
      if (!bench_csv_path.empty()) {
        csv.open(bench_csv_path);
        if (!csv) throw std::invalid_argument("--csv: cannot write " + bench_csv_path);
        csv << bench_csv_header() << std::flush;
      }
      std::vector<BenchRow> rows;
      for (const BenchShape& sh : shapes) {
        bo.head_dim = sh.head_dim, bo.num_heads = sh.num_heads, bo.num_kv_heads = sh.num_kv_heads;
        const auto part = bench_device == "cuda" ? run_cuda_bench(bo) : run_cpu_bench(bo);
        for (const BenchRow& r : part) csv << bench_csv_line(r);
        csv << std::flush;
        rows.insert(rows.end(), part.begin(), part.end());
      }
      std::cout << bench_table(rows) << std::flush;
      if (!bench_json_path.empty()) {
        std::ofstream(bench_json_path) << bench_json(rows);
        std::cerr << "wrote " << bench_json_path << "\n";
      }
      for (const BenchRow& r : rows)  // CUDA: a checked result out of its bound fails the command
        if (r.check_failed()) return 3;
      return 0;
    }
    if (*list) {
      fmt::print("{:<8} {:>5} {:>14}   (head_dim {}, {} tokens; side data such as codebooks amortised over them)\n", "method", "bits",
                 "bits/element", list_dim, list_tokens);
      for (Method m : all_methods())
        for (double b : supported_bits(m)) {
          CodecConfig cfg;
          cfg.method = m;
          cfg.bits = b;
          cfg.head_dim = list_dim;
          if (m == Method::kPolar && list_dim % 16) continue;
          auto c = make_codec(cfg);
          fmt::print("{:<8} {:>5} {:>14.4f}\n", method_name(m), b, c->bits_per_element(static_cast<std::size_t>(list_tokens)));
        }
      return 0;
    }
    EvalOptions opt;
    opt.files = kv.empty() ? default_fixtures() : kv;
    opt.methods = split_list<Method>(methods, [](const std::string& s) { return parse_method(s); }, "--methods");
    opt.bits = split_list<double>(bits, [](const std::string& s) { return std::stod(s); }, "--bits");
    opt.layers = split_list<int>(layers, [](const std::string& s) { return std::stoi(s); }, "--layers");
    opt.threads = threads;
    opt.topk = topk;
    opt.center_keys = center_keys;
    if (!eval_precision.empty()) {
      opt.cpu_attention = true;
      opt.cpu_precision = eval_precision == "bf16"   ? AttentionPrecision::kBf16
                          : eval_precision == "int8" ? AttentionPrecision::kInt8
                                                     : AttentionPrecision::kFp32;
    }
    const bool tty = isatty(2);
    opt.progress = [tty](const std::string& line) {
      if (tty)
        std::cerr << "\r\033[K" << line << std::flush;
      else
        std::cerr << line << "\n";
    };
    auto results = run_eval(opt);
    if (tty) std::cerr << "\r\033[K";
    std::cout << eval_table(results) << std::flush;
    if (!json_path.empty() || !plot_path.empty()) {
      const std::string jp = !json_path.empty() ? json_path : plot_path + ".json";
      std::ofstream(jp) << eval_json(results);
      if (!json_path.empty()) std::cerr << "wrote " << json_path << "\n";
      if (!plot_path.empty()) {
        const std::string script = (fs::path(TURBOKV_SOURCE_DIR) / "tools/plot_eval.py").string();
        const std::string cmd = fmt::format("python3 '{}' '{}' '{}'", script, jp, plot_path);
        if (std::system(cmd.c_str()) != 0) {
          std::cerr << "eval: --plot failed (needs python3 with matplotlib): " << cmd << "\n";
          return 1;
        }
        std::cerr << "wrote " << plot_path << "\n";
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "\nturbokv: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
