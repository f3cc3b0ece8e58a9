// `turbokv eval` core: see include/turbokv/eval.h.
#include "turbokv/eval.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "turbokv/attention.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/error.h"
#include "turbokv/safetensors.h"

namespace turbokv {
namespace {

struct Layer {
  std::string model;
  int layer, num_heads, num_kv_heads, head_dim;
  std::size_t n, nq, query_start;
  AttentionParams params;
  std::vector<float> k, v, q;  // [n, kvh, d], [n, kvh, d], [nq, H, d]
  // Exact references, computed once per layer (see prepare_exact):
  std::vector<std::vector<double>> dots;     // per query: [H, ctx] exact <q, k_t>
  std::vector<std::vector<double>> weights;  // per query: [H, ctx] exact softmax weights
  std::vector<double> out;                   // [nq, H, d] exact attention outputs
};

std::size_t context_of(const Layer& l, std::size_t qi) { return l.query_start + qi + 1; }

/// Exact fp64 attention and inner products of every query, shared by all methods.
void prepare_exact(Layer& l) {
  const int H = l.num_heads, G = l.num_kv_heads, d = l.head_dim;
  const std::size_t D = static_cast<std::size_t>(d);
  l.dots.resize(l.nq);
  l.weights.resize(l.nq);
  l.out.resize(l.nq * H * D);
  for (std::size_t qi = 0; qi < l.nq; ++qi) {
    const std::size_t ctx = context_of(l, qi);
    const float* q = &l.q[qi * H * D];
    l.weights[qi].resize(H * ctx);
    attention_exact(l.k.data(), l.v.data(), ctx, G, d, q, H, l.params, &l.out[qi * H * D], l.weights[qi].data());
    l.dots[qi].resize(H * ctx);
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / G);
      for (std::size_t t = 0; t < ctx; ++t) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[h * D + i]) * l.k[(t * G + g) * D + i];
        l.dots[qi][h * ctx + t] = dot;
      }
    }
  }
}

int to_int(const SafetensorsFile& f, const std::string& key) {
  const std::string& s = f.meta(key);
  try {
    return std::stoi(s);
  } catch (...) {
    throw std::runtime_error("safetensors: " + f.path() + ": metadata '" + key + "' = '" + s + "' is not an integer");
  }
}
double to_double(const SafetensorsFile& f, const std::string& key) {
  const std::string& s = f.meta(key);
  try {
    return std::stod(s);
  } catch (...) {
    throw std::runtime_error("safetensors: " + f.path() + ": metadata '" + key + "' = '" + s + "' is not a number");
  }
}

void expect_shape(const SafetensorsFile& f, const std::string& name, const std::vector<std::int64_t>& shape) {
  const auto& got = f.info(name).shape;
  if (got != shape) {
    std::string g, e;
    for (auto s : got) g += std::to_string(s) + ",";
    for (auto s : shape) e += std::to_string(s) + ",";
    throw std::runtime_error("safetensors: " + f.path() + ": tensor '" + name + "' has shape [" + g + "], expected [" + e + "]");
  }
}

std::vector<Layer> load_layers(const std::string& path, const std::vector<int>& want) {
  const SafetensorsFile f = SafetensorsFile::read(path);
  const int H = to_int(f, "num_heads"), G = to_int(f, "num_kv_heads"), d = to_int(f, "head_dim");
  std::vector<int> ids;
  std::stringstream ss(f.meta("layers"));
  for (std::string tok; std::getline(ss, tok, ',');) ids.push_back(std::stoi(tok));
  std::vector<Layer> out;
  for (int L : ids) {
    if (!want.empty() && std::find(want.begin(), want.end(), L) == want.end()) continue;
    Layer l;
    l.model = f.meta("model");
    l.layer = L;
    l.num_heads = H;
    l.num_kv_heads = G;
    l.head_dim = d;
    const std::string p = "layers." + std::to_string(L) + ".";
    const auto& ks = f.info(p + "keys").shape;
    if (ks.size() != 3) throw std::runtime_error("safetensors: " + path + ": tensor '" + p + "keys' must be 3-D");
    l.n = static_cast<std::size_t>(ks[0]);
    expect_shape(f, p + "keys", {ks[0], G, d});
    expect_shape(f, p + "values", {ks[0], G, d});
    const auto& qs = f.info(p + "queries").shape;
    if (qs.size() != 3) throw std::runtime_error("safetensors: " + path + ": tensor '" + p + "queries' must be 3-D");
    l.nq = static_cast<std::size_t>(qs[0]);
    expect_shape(f, p + "queries", {qs[0], H, d});
    l.query_start = static_cast<std::size_t>(to_int(f, "query_start"));
    if (l.query_start + l.nq > l.n)
      throw std::runtime_error("safetensors: " + path + ": query_start + num_queries exceeds num_tokens");
    l.params.softmax_scale = to_double(f, "softmax_scale");
    l.params.window = f.metadata().count("sliding_window." + std::to_string(L)) ? to_int(f, "sliding_window." + std::to_string(L)) : 0;
    l.params.softcap = f.metadata().count("attn_logit_softcapping") ? to_double(f, "attn_logit_softcapping") : 0.0;
    l.k = f.load_f32(p + "keys");
    l.v = f.load_f32(p + "values");
    l.q = f.load_f32(p + "queries");
    out.push_back(std::move(l));
  }
  if (!want.empty() && out.empty()) throw std::invalid_argument("run_eval: layers: none of the requested layers is in " + path);
  return out;
}

double now_ns() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count());
}

/// The name of a precision in the table and JSON.
const char* precision_name(AttentionPrecision p) {
  return p == AttentionPrecision::kBf16 ? "bf16" : p == AttentionPrecision::kInt8 ? "int8" : "fp32";
}

/// Cosine and relative L2 error of one head's output against the exact one, added to cos_sum / rel_sum.
template <class T>
void add_errors(const double* oe, const T* oc, int d, double& cos_sum, double& rel_sum) {
  double dot = 0, ne = 0, nc = 0, diff = 0;
  for (int i = 0; i < d; ++i) {
    const double c = static_cast<double>(oc[i]);
    dot += oe[i] * c, ne += oe[i] * oe[i], nc += c * c, diff += (oe[i] - c) * (oe[i] - c);
  }
  cos_sum += (ne > 0 && nc > 0) ? dot / std::sqrt(ne * nc) : (ne == nc ? 1.0 : 0.0);
  rel_sum += ne > 0 ? std::sqrt(diff / ne) : std::sqrt(diff);
}

EvalResult eval_case(const Layer& l, Method m, double bits, std::uint64_t seed, int topk, bool center_keys,
                     const EvalOptions& opt) {
  const int G = l.num_kv_heads, H = l.num_heads, d = l.head_dim;
  const std::size_t n = l.n, D = static_cast<std::size_t>(d);
  EvalResult r;
  r.model = l.model;
  r.layer = l.layer;
  r.method = std::string(method_name(m)) + (center_keys ? "+center" : "");
  r.bits = bits;
  // Per KV head: contiguous [n, d] copies, codecs, calibration on the tokens before the queries.
  std::vector<std::vector<float>> kh(G), vh(G);
  std::vector<std::unique_ptr<Codec>> kc(G), vc(G);
  std::vector<std::vector<std::uint8_t>> kb(G), vb(G);
  for (int g = 0; g < G; ++g) {
    kh[g].resize(n * D);
    vh[g].resize(n * D);
    for (std::size_t t = 0; t < n; ++t)
      for (int i = 0; i < d; ++i) {
        kh[g][t * D + i] = l.k[(t * G + g) * D + i];
        vh[g][t * D + i] = l.v[(t * G + g) * D + i];
      }
    CodecConfig cfg;
    cfg.method = m;
    cfg.bits = bits;
    cfg.head_dim = d;
    cfg.seed = seed + 7919ull * g;
    cfg.role = Role::kKey;
    cfg.center = center_keys;
    kc[g] = make_codec(cfg);
    cfg.role = Role::kValue;
    cfg.center = false;
    cfg.seed = seed + 7919ull * g + 104729ull;
    vc[g] = make_codec(cfg);
    const std::size_t ncal = std::max<std::size_t>(1, l.query_start);
    kc[g]->calibrate(kh[g].data(), ncal);
    vc[g]->calibrate(vh[g].data(), ncal);
    kb[g].resize(kc[g]->encoded_bytes(n));
    vb[g].resize(vc[g]->encoded_bytes(n));
  }
  double t0 = now_ns();
  for (int g = 0; g < G; ++g) {
    kc[g]->encode(kh[g].data(), n, kb[g].data());
    vc[g]->encode(vh[g].data(), n, vb[g].data());
  }
  r.encode_ns_per_token = (now_ns() - t0) / static_cast<double>(n);
  for (int g = 0; g < G; ++g)
    r.bytes += kb[g].size() + vb[g].size() + kc[g]->side_bytes() + vc[g]->side_bytes();
  const double elems = 2.0 * static_cast<double>(n) * G * d;
  r.bits_per_element = 8.0 * static_cast<double>(r.bytes) / elems;
  r.compression_ratio = 2.0 * elems / static_cast<double>(r.bytes);
  // Reconstruction errors.
  double ke = 0, kn = 0, ve = 0, vn = 0;
  std::vector<float> dec(n * D);
  for (int g = 0; g < G; ++g) {
    kc[g]->decode(kb[g].data(), n, dec.data());
    for (std::size_t i = 0; i < n * D; ++i) ke += double(dec[i] - kh[g][i]) * (dec[i] - kh[g][i]), kn += double(kh[g][i]) * kh[g][i];
    vc[g]->decode(vb[g].data(), n, dec.data());
    for (std::size_t i = 0; i < n * D; ++i) ve += double(dec[i] - vh[g][i]) * (dec[i] - vh[g][i]), vn += double(vh[g][i]) * vh[g][i];
  }
  r.key_nmse = kn > 0 ? ke / kn : 0;
  r.value_nmse = vn > 0 ? ve / vn : 0;
  // Inner products of every query with every key it can see.
  double sum_err = 0, sum_err2 = 0, sum_true2 = 0, cnt = 0;
  std::vector<double> state, est(n);
  for (std::size_t qi = 0; qi < l.nq; ++qi) {
    const std::size_t ctx = l.query_start + qi + 1;
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / G);
      const float* q = &l.q[(qi * H + h) * D];
      state.assign(kc[g]->query_state_size(), 0.0);
      kc[g]->prepare_query(q, state.data());
      kc[g]->scores(state.data(), kb[g].data(), n, 0, ctx, est.data());
      for (std::size_t t = 0; t < ctx; ++t) {
        const double dot = l.dots[qi][h * ctx + t];
        sum_err += est[t] - dot;
        sum_err2 += (est[t] - dot) * (est[t] - dot);
        sum_true2 += dot * dot;
        cnt += 1;
      }
    }
  }
  const double rms = std::sqrt(sum_true2 / cnt);
  r.ip_bias = sum_err / cnt / rms;
  r.ip_rmse = std::sqrt(sum_err2 / cnt) / rms;
  // Attention: compressed (timed) vs exact fp64 on the original tensors.
  std::vector<EncodedHead> keys, values;
  for (int g = 0; g < G; ++g) keys.push_back({kc[g].get(), kb[g].data()}), values.push_back({vc[g].get(), vb[g].data()});
  std::vector<double> out_c(static_cast<std::size_t>(H) * D), w_c(static_cast<std::size_t>(H) * n);
  double att_ns = 0, ctx_total = 0, cos_sum = 0, rel_sum = 0, rec_sum = 0, kl_sum = 0, pairs = 0;
  std::vector<std::size_t> idx_e(n), idx_c(n);
  for (std::size_t qi = 0; qi < l.nq; ++qi) {
    const std::size_t ctx = context_of(l, qi);
    const float* q = &l.q[qi * H * D];
    t0 = now_ns();
    attention_compressed(keys, values, n, q, H, l.params, out_c.data(), w_c.data(), ctx);
    att_ns += now_ns() - t0;
    ctx_total += static_cast<double>(ctx);
    for (int h = 0; h < H; ++h) {
      add_errors(&l.out[(qi * H + h) * D], &out_c[h * D], d, cos_sum, rel_sum);
      const double* we = &l.weights[qi][h * ctx];
      const double* wc = &w_c[h * ctx];
      double kl = 0;
      for (std::size_t t = 0; t < ctx; ++t)
        if (we[t] > 0) kl += we[t] * (std::log(we[t]) - std::log(std::max(wc[t], 1e-300)));
      kl_sum += kl;
      const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(topk), ctx);
      std::iota(idx_e.begin(), idx_e.begin() + ctx, 0);
      std::iota(idx_c.begin(), idx_c.begin() + ctx, 0);
      auto by = [](const double* w) { return [w](std::size_t a, std::size_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); }; };
      std::partial_sort(idx_e.begin(), idx_e.begin() + k, idx_e.begin() + ctx, by(we));
      std::partial_sort(idx_c.begin(), idx_c.begin() + k, idx_c.begin() + ctx, by(wc));
      std::sort(idx_e.begin(), idx_e.begin() + k);
      std::sort(idx_c.begin(), idx_c.begin() + k);
      std::vector<std::size_t> both;
      std::set_intersection(idx_e.begin(), idx_e.begin() + k, idx_c.begin(), idx_c.begin() + k, std::back_inserter(both));
      rec_sum += static_cast<double>(both.size()) / k;
      pairs += 1;
    }
  }
  r.attn_cosine = cos_sum / pairs;
  r.attn_rel_err = rel_sum / pairs;
  r.topk_recall = rec_sum / pairs;
  r.attn_kl = kl_sum / pairs;
  r.attend_ns_per_token = att_ns / ctx_total;
  if (opt.cpu_attention) {
    // The CPU fast path on the same bytes, at the requested precision.
    std::vector<std::unique_ptr<cpu::CpuCodec>> cc;
    std::vector<cpu::CodecHead> ck, cv;
    for (int g = 0; g < G; ++g) {
      cc.push_back(cpu::make_cpu_codec(*kc[g]));
      ck.push_back({cc.back().get(), kb[g].data()});
      cc.push_back(cpu::make_cpu_codec(*vc[g]));
      cv.push_back({cc.back().get(), vb[g].data()});
    }
    AttentionParams p = l.params;
    p.precision = opt.cpu_precision;
    std::vector<float> out_f(static_cast<std::size_t>(H) * D);
    double ccos = 0, crel = 0;
    for (std::size_t qi = 0; qi < l.nq; ++qi) {
      cpu::attention_codec(ck, cv, n, &l.q[qi * H * D], H, p, out_f.data(), context_of(l, qi), 1);
      for (int h = 0; h < H; ++h) add_errors(&l.out[(qi * H + h) * D], &out_f[h * D], d, ccos, crel);
    }
    r.cpu_precision = precision_name(opt.cpu_precision);
    r.cpu_cosine = ccos / pairs;
    r.cpu_rel_err = crel / pairs;
  }
  return r;
}

}  // namespace

std::vector<EvalResult> run_eval(const EvalOptions& opt) {
  check_arg(!opt.files.empty(), "run_eval", "files", "[]", "need at least one safetensors file");
  check_arg(opt.topk > 0, "run_eval", "topk", opt.topk, "must be positive");
  const std::vector<Method> methods = opt.methods.empty() ? all_methods() : opt.methods;
  for (double b : opt.bits) {
    bool any = false;
    for (Method m : methods) {
      const auto s = supported_bits(m);
      any |= std::find(s.begin(), s.end(), b) != s.end();
    }
    check_arg(any, "run_eval", "bits", b, "is supported by none of the selected methods");
  }
  std::vector<Layer> layers;
  for (const auto& f : opt.files) {
    auto ls = load_layers(f, opt.layers);
    for (auto& l : ls) layers.push_back(std::move(l));
  }
  {
    // Exact references: one task per layer, on the same number of threads.
    std::vector<std::thread> pool;
    std::atomic<std::size_t> next{0};
    const int nt = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
    std::exception_ptr err;
    std::mutex emu;
    for (int t = 0; t < nt; ++t)
      pool.emplace_back([&] {
        for (std::size_t i; (i = next++) < layers.size();) try {
            prepare_exact(layers[i]);
          } catch (...) {
            std::lock_guard<std::mutex> lock(emu);
            if (!err) err = std::current_exception();
          }
      });
    for (auto& t : pool) t.join();
    if (err) std::rethrow_exception(err);
  }
  struct Case { std::size_t layer; Method m; double bits; };
  std::vector<Case> cases;
  for (std::size_t li = 0; li < layers.size(); ++li)
    for (Method m : methods)
      for (double b : supported_bits(m)) {
        if (!opt.bits.empty() && std::find(opt.bits.begin(), opt.bits.end(), b) == opt.bits.end()) continue;
        if (m == Method::kPolar && layers[li].head_dim % 16) continue;
        cases.push_back({li, m, b});
      }
  std::vector<EvalResult> results(cases.size());
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex mu;
  std::exception_ptr error;
  const int nt = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  auto worker = [&] {
    for (std::size_t i; (i = next++) < cases.size();) {
      try {
        const Case& c = cases[i];
        results[i] = eval_case(layers[c.layer], c.m, c.bits, opt.seed, opt.topk, opt.center_keys, opt);
        const std::size_t k = ++done;
        if (opt.progress) {
          std::lock_guard<std::mutex> lock(mu);
          opt.progress(fmt::format("[{}/{}] {} layer {} {} {} bits", k, cases.size(), results[i].model, results[i].layer,
                                   results[i].method, results[i].bits));
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = cases.size();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < nt; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return results;
}

std::string eval_json(const std::vector<EvalResult>& results) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : results)
    arr.push_back({{"model", r.model}, {"layer", r.layer}, {"method", r.method}, {"bits", r.bits},
                   {"bits_per_element", r.bits_per_element}, {"bytes", r.bytes},
                   {"compression_ratio", r.compression_ratio}, {"key_nmse", r.key_nmse},
                   {"value_nmse", r.value_nmse}, {"ip_bias", r.ip_bias}, {"ip_rmse", r.ip_rmse},
                   {"attn_cosine", r.attn_cosine}, {"attn_rel_err", r.attn_rel_err}, {"topk_recall", r.topk_recall},
                   {"attn_kl", r.attn_kl}, {"encode_ns_per_token", r.encode_ns_per_token},
                   {"attend_ns_per_token", r.attend_ns_per_token}, {"cpu_precision", r.cpu_precision},
                   {"cpu_cosine", r.cpu_cosine}, {"cpu_rel_err", r.cpu_rel_err}});
  return nlohmann::json{{"results", arr}}.dump(1);
}

std::string eval_table(const std::vector<EvalResult>& results) {
  std::map<std::string, std::vector<const EvalResult*>> by_model;
  std::vector<std::string> order;
  for (const auto& r : results) {
    if (!by_model.count(r.model)) order.push_back(r.model);
    by_model[r.model].push_back(&r);
  }
  std::string out;
  for (const auto& model : order) {
    const auto& rows = by_model[model];
    std::vector<int> layers;
    for (auto* r : rows)
      if (std::find(layers.begin(), layers.end(), r->layer) == layers.end()) layers.push_back(r->layer);
    std::string ls;
    for (int l : layers) {  // (not `"," + std::to_string(l)`: GCC 12 warns a false -Wrestrict there)
      if (!ls.empty()) ls += ',';
      ls += std::to_string(l);
    }
    out += fmt::format("\n{} — layers {} (mean over layers; bytes summed)\n", model, ls);
    // The CPU fast path's columns when EvalOptions::cpu_attention ran (cpu_cos / cpu_rel, at the precision
    // named in the header).
    std::string cpu_prec;
    for (auto* r : rows)
      if (!r->cpu_precision.empty()) cpu_prec = r->cpu_precision;
    if (!cpu_prec.empty())
      out += fmt::format("(cpu_cos, cpu_rel: the CPU fast path's attention on the same bytes, precision {})\n", cpu_prec);
    out += fmt::format("{:<14} {:>5} {:>6} {:>10} {:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8}",
                       "method", "bits", "b/elem", "bytes", "ratio", "key_nmse", "val_nmse", "ip_bias", "ip_rmse",
                       "cosine", "rel_err", "top32", "KL", "enc_ns", "att_ns");
    out += cpu_prec.empty() ? "\n" : fmt::format(" {:>8} {:>8}\n", "cpu_cos", "cpu_rel");
    // Group rows by (method, bits) in first-seen order.
    std::vector<std::pair<std::string, double>> keys;
    for (auto* r : rows)
      if (std::find(keys.begin(), keys.end(), std::make_pair(r->method, r->bits)) == keys.end())
        keys.emplace_back(r->method, r->bits);
    for (const auto& [m, b] : keys) {
      EvalResult a;
      double c = 0;
      for (auto* r : rows) {
        if (r->method != m || r->bits != b) continue;
        a.bits_per_element += r->bits_per_element;
        a.bytes += r->bytes;
        a.compression_ratio += r->compression_ratio;
        a.key_nmse += r->key_nmse;
        a.value_nmse += r->value_nmse;
        a.ip_bias += r->ip_bias;
        a.ip_rmse += r->ip_rmse;
        a.attn_cosine += r->attn_cosine;
        a.attn_rel_err += r->attn_rel_err;
        a.topk_recall += r->topk_recall;
        a.attn_kl += r->attn_kl;
        a.encode_ns_per_token += r->encode_ns_per_token;
        a.attend_ns_per_token += r->attend_ns_per_token;
        a.cpu_cosine += r->cpu_cosine;
        a.cpu_rel_err += r->cpu_rel_err;
        c += 1;
      }
      out += fmt::format("{:<14} {:>5} {:>6.3f} {:>10} {:>6.2f} {:>9.5f} {:>9.5f} {:>+8.4f} {:>8.4f} {:>8.5f} {:>8.4f} {:>6.3f} {:>8.5f} {:>8.0f} {:>8.1f}",
                         m, b, a.bits_per_element / c, a.bytes, a.compression_ratio / c, a.key_nmse / c, a.value_nmse / c,
                         a.ip_bias / c, a.ip_rmse / c, a.attn_cosine / c, a.attn_rel_err / c, a.topk_recall / c,
                         a.attn_kl / c, a.encode_ns_per_token / c, a.attend_ns_per_token / c);
      out += cpu_prec.empty() ? "\n" : fmt::format(" {:>8.5f} {:>8.4f}\n", a.cpu_cosine / c, a.cpu_rel_err / c);
    }
  }
  return out;
}

}  // namespace turbokv
