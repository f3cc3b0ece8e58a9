// `turbokv bench --device cpu`: fused decode attention on the compressed codes
// of any method (CpuCodec / attention_codec; TurboQuant-MSE by default) against the dense fp16 / fp32 baselines and a stream of the same
// compressed bytes, timed in the same process on the same shapes. fp16 is timed in two layouts: fp16-dense
// ([tokens][kv_heads][dim], attention_dense) and fp16-heads (head-major blocks through the fp16 codec's fused
// kernel); every compressed row's baseline is the faster of the two in that run, re-timed alternately with
// the row (time_pair_us), so load that comes and goes on a shared machine hits both sides of the ratio. TurboQuant-MSE (integer and fractional widths)
// also gets a "tq-mse bf16" row (AttentionPrecision::kBf16) where the CPU has AVX512-BF16, and a "tq-mse int8"
// row (AttentionPrecision::kInt8) at the AVX-512 level (plus "tq-mse int8 amx" or "int8 vnni", the choice
// int8_uses_amx did not make, where the CPU has AMX tiles); TurboQuant-MSE at fractional
// widths (1.5, 2.5, 3.5: the fused split kernel) also gets a "tq-mse generic" row (the generic codec-domain path
// on the same bytes, same run); TurboQuant-Prod at integer widths
// also gets "tq-prod+mse-v" rows (Prod keys, TurboQuant-MSE values: fused, and the generic path in the same run).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "turbokv/bench.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/error.h"
#include "turbokv/half.h"
#include "turbokv/rng.h"
#include "turbokv/simd.h"

namespace turbokv {
namespace {

/// Median wall time of fn in microseconds: `repeats` runs, or (repeats == 0)
/// as many as fit in ~budget_s, at least 3 and at most 25, after one warm-up.
double time_us(const std::function<void()>& fn, int repeats, double budget_s) {
  using clk = std::chrono::steady_clock;
  fn();
  std::vector<double> t;
  const auto start = clk::now();
  for (int i = 0;; ++i) {
    const auto a = clk::now();
    fn();
    t.push_back(std::chrono::duration<double, std::micro>(clk::now() - a).count());
    if (repeats > 0) {
      if (i + 1 >= repeats) break;
    } else {
      const double spent = std::chrono::duration<double>(clk::now() - start).count();
      if (i + 1 >= 25 || (i + 1 >= 3 && spent > budget_s)) break;
    }
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

/// Medians of fn and of base in microseconds, timed alternately (fn, base, fn, base, ...; counts as
/// time_us, the budget shared): the ratio of the two stays fair when other load on the machine comes
/// and goes during a run.
std::pair<double, double> time_pair_us(const std::function<void()>& fn, const std::function<void()>& base,
                                       int repeats, double budget_s) {
  using clk = std::chrono::steady_clock;
  fn();
  base();
  std::vector<double> a, b;
  const auto start = clk::now();
  for (int i = 0;; ++i) {
    for (int k = 0; k < 2; ++k) {
      const auto t0 = clk::now();
      (k == 0 ? fn : base)();
      (k == 0 ? a : b).push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
    if (repeats > 0) {
      if (i + 1 >= repeats) break;
    } else {
      const double spent = std::chrono::duration<double>(clk::now() - start).count();
      if (i + 1 >= 25 || (i + 1 >= 3 && spent > 2 * budget_s)) break;
    }
  }
  std::nth_element(a.begin(), a.begin() + a.size() / 2, a.end());
  std::nth_element(b.begin(), b.begin() + b.size() / 2, b.end());
  return {a[a.size() / 2], b[b.size() / 2]};
}

/// Fast deterministic pseudo-Gaussian (sum of 4 uniforms, unit variance) for bulk data.
void fill_normalish(float* x, std::size_t n, std::uint64_t seed) {
  Rng r(seed);
  for (std::size_t i = 0; i < n; i += 2) {
    const std::uint64_t u = r.next();
    for (std::size_t j = 0; j < 2 && i + j < n; ++j) {
      const std::uint32_t w = static_cast<std::uint32_t>(u >> (32 * j));
      const float s = static_cast<float>((w & 0xff) + ((w >> 8) & 0xff) + ((w >> 16) & 0xff) + (w >> 24)) - 510.0f;
      x[i + j] = s * (1.0f / 147.2f);
    }
  }
}

/// Forwards every attention call to a fast codec but hides its type from attention_codec, which then
/// takes its generic codec-domain path: the in-run "generic" comparison for the fused paths.
class OpaqueCodec final : public cpu::CpuCodec {
 public:
  explicit OpaqueCodec(const cpu::CpuCodec& c) : CpuCodec(c.reference()), c_(&c) {}
  const char* isa() const override { return c_->isa(); }
  std::size_t query_state_size() const override { return c_->query_state_size(); }
  void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const override {
    c_->scores(state, codes, n, t0, t1, out);
  }
  std::size_t accumulator_size() const override { return c_->accumulator_size(); }
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                  float* acc) const override {
    c_->accumulate(codes, n, t0, t1, w, acc);
  }
  void finalize(const float* acc, double scale, float* out) const override { c_->finalize(acc, scale, out); }
  std::size_t domain_size() const override { return c_->domain_size(); }
  void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                     float* y) const override {
    c_->decode_domain(codes, n, t0, t1, y);
  }

 protected:
  void do_encode(const float*, std::size_t, std::size_t, std::size_t, std::uint8_t*) const override {
    throw std::logic_error("OpaqueCodec: attention only");
  }
  void do_decode(const std::uint8_t*, std::size_t, std::size_t, std::size_t, float*) const override {
    throw std::logic_error("OpaqueCodec: attention only");
  }
  void do_prepare_query(const float* q, float* state) const override { c_->prepare_query(q, state); }

 private:
  const cpu::CpuCodec* c_;
};

}  // namespace

std::vector<BenchRow> run_cpu_bench(const BenchOptions& opt) {
  const char* where = "run_cpu_bench";
  check_arg(opt.device == "cpu", where, "device", opt.device, "must be cpu");
  check_arg(opt.num_kv_heads > 0 && opt.num_heads % opt.num_kv_heads == 0 && opt.num_heads > 0, where, "num_heads",
            opt.num_heads, "must be a positive multiple of num_kv_heads");
  check_arg(opt.head_dim % 16 == 0 && opt.head_dim >= 16 && opt.head_dim <= 512, where, "head_dim", opt.head_dim,
            "must be a multiple of 16 in 16..512");
  // (method, bits) cases: every requested width the method supports. Without --methods: every method but the
  // fp16 passthrough (the fp16 baselines are timed anyway), each at the requested widths it supports, or at its
  // only width (qjl 1 bit, fp8 8 bits) when it has one and none was requested.
  std::vector<std::pair<Method, double>> cases;
  std::vector<std::string> methods = opt.methods;
  if (methods.empty())
    for (Method m : all_methods())
      if (m != Method::kFp16) methods.push_back(method_name(m));
  for (const auto& name : methods) {
    const Method m = parse_method(name);
    const auto sb = supported_bits(m);
    bool any = false;
    for (double b : opt.bits)
      if (std::find(sb.begin(), sb.end(), b) != sb.end()) cases.push_back({m, b}), any = true;
    if (!any && (m == Method::kFp16 || m == Method::kFp8 || (opt.methods.empty() && sb.size() == 1)))
      cases.push_back({m, sb.front()}), any = true;
    if (!any && opt.methods.empty()) continue;  // a default method without the requested widths
    check_arg(any, where, "bits", opt.bits.empty() ? 0.0 : opt.bits.front(),
              detail::concat("none of the requested widths is supported by ", name).c_str());
  }
  for (int t : opt.threads) check_arg(t >= 1, where, "threads", t, "must be >= 1");
  for (std::size_t c : opt.contexts) check_arg(c >= 1, where, "contexts", c, "must be >= 1");
  for (int b : opt.batches) check_arg(b == 1, where, "batches", b, "the CPU bench runs batch 1");

  const int d = opt.head_dim, kvh = opt.num_kv_heads, H = opt.num_heads;
  const std::size_t du = static_cast<std::size_t>(d);
  std::vector<BenchRow> rows;
  const std::string simd = simd_level_name(simd_level());
  AttentionParams p;
  p.softmax_scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> q(static_cast<std::size_t>(H) * d), out(q.size());
  fill_normalish(q.data(), q.size(), 1);

  for (std::size_t n : opt.contexts) {
    // Dense K, V [n, kvh, d] in fp32 and fp16; per-head rows for the encoder.
    const std::size_t elems = n * kvh * du;
    std::vector<float> k32(elems), v32(elems);
    fill_normalish(k32.data(), elems, 11 + n);
    fill_normalish(v32.data(), elems, 13 + n);
    std::vector<std::uint16_t> k16(elems), v16(elems);
    for (std::size_t i = 0; i < elems; ++i) {
      k16[i] = float_to_half(k32[i]);
      v16[i] = float_to_half(v32[i]);
    }
    const double budget = n >= 65536 ? 0.3 : 0.5;
    const int reps = opt.repeats > 0 ? opt.repeats : 0;

    for (int thr : opt.threads) {
      BenchRow base;
      base.op = "decode_attention";
      base.context = n;
      base.head_dim = d;
      base.num_heads = H;
      base.num_kv_heads = kvh;
      base.threads = thr;
      base.simd = simd;
      const double qbytes = static_cast<double>(q.size()) * 4;
      const double t16 = time_us([&] { cpu::attention_dense(k16.data(), v16.data(), cpu::DType::kF16, n, kvh, d, q.data(), H, p, out.data(), thr); }, reps, budget);
      const double t32 = time_us([&] { cpu::attention_dense(k32.data(), v32.data(), cpu::DType::kF32, n, kvh, d, q.data(), H, p, out.data(), thr); }, reps, budget);
      const double b16 = static_cast<double>(elems) * 2 * 2, b32 = static_cast<double>(elems) * 4 * 2;
      const double s16 = time_us([&] { cpu::stream_bytes(reinterpret_cast<const std::uint8_t*>(k16.data()), elems * 2, thr); cpu::stream_bytes(reinterpret_cast<const std::uint8_t*>(v16.data()), elems * 2, thr); }, reps, budget);
      // The call's multiply-adds (scores and values: 2 * n * H * d) as register-only FMA chains on the same
      // threads: the multiply-add bound of this run (x_peak = time / this).
      const std::uint64_t macs = 2ull * n * static_cast<std::uint64_t>(H) * du;
      const double tpk = time_us([&] { cpu::fma_peak(macs, thr); }, reps, budget);
      base.peak_time_us = tpk;
      BenchRow r16 = base;
      r16.method = "fp16-dense";
      r16.bits = 16;
      r16.time_us = t16;
      r16.baseline = "fp32-dense";
      r16.baseline_time_us = t32;
      r16.speedup = t32 / t16;
      r16.gbps = (b16 + qbytes) / (t16 * 1e3);
      r16.tokens_per_s = n / (t16 * 1e-6);
      r16.bits_per_element = 16;
      r16.stream_time_us = s16;
      BenchRow r32 = base;
      r32.method = "fp32-dense";
      r32.bits = 32;
      r32.time_us = t32;
      r32.baseline = "fp16-dense";
      r32.baseline_time_us = t16;
      r32.speedup = t16 / t32;
      r32.gbps = (b32 + qbytes) / (t32 * 1e3);
      r32.tokens_per_s = n / (t32 * 1e-6);
      r32.bits_per_element = 32;
      rows.push_back(r32);
      rows.push_back(r16);
      // fp16 in head-major blocks ([kv_heads][tokens][dim], e.g. Hugging Face's cache) through the fp16 codec
      // and its fused kernel (CodecAttentionPath::kFp8Fp16Fused): the same arithmetic as fp16-dense, read
      // per head in order. The compressed rows' baseline is the faster of the two fp16 layouts.
      std::vector<std::unique_ptr<Codec>> hrefs;
      std::vector<std::unique_ptr<cpu::CpuCodec>> hcodecs;
      std::vector<std::vector<std::uint8_t>> hbuf(2 * static_cast<std::size_t>(kvh));
      std::vector<cpu::CodecHead> hkeys, hvalues;
      {
        std::vector<float> rows32(n * du);
        CodecConfig hc;
        hc.method = Method::kFp16;
        hc.bits = 16;
        hc.head_dim = d;
        for (int g = 0; g < kvh; ++g)
          for (int kv = 0; kv < 2; ++kv) {
            const std::vector<float>& src = kv == 0 ? k32 : v32;
            for (std::size_t t = 0; t < n; ++t) std::memcpy(&rows32[t * du], &src[(t * kvh + g) * du], du * 4);
            hrefs.push_back(make_codec(hc));
            hcodecs.push_back(cpu::make_cpu_codec(*hrefs.back()));
            auto& buf = hbuf[static_cast<std::size_t>(2 * g + kv)];
            buf.resize(hcodecs.back()->encoded_bytes(n));
            hcodecs.back()->encode(rows32.data(), n, buf.data(), thr);
            (kv == 0 ? hkeys : hvalues).push_back({hcodecs.back().get(), buf.data()});
          }
      }
      // Only where the fused kernel runs (head_dim a multiple of 16 at AVX2 / AVX-512); else no such row.
      const bool heads_fused = cpu::attention_codec_path(hkeys, hvalues) == cpu::CodecAttentionPath::kFp8Fp16Fused;
      const double th16 =
          heads_fused ? time_us([&] { cpu::attention_codec(hkeys, hvalues, n, q.data(), H, p, out.data(), 0, thr); }, reps, budget)
                      : INFINITY;
      BenchRow rh = r16;
      rh.method = "fp16-heads";
      rh.simd = hcodecs.front()->isa();
      rh.time_us = th16;
      rh.baseline = "fp16-dense";
      rh.baseline_time_us = t16;
      rh.speedup = t16 / th16;
      rh.gbps = (b16 + qbytes) / (th16 * 1e3);
      rh.tokens_per_s = n / (th16 * 1e-6);
      if (heads_fused) rows.push_back(rh);
      const bool heads_faster = th16 < t16;
      const std::string best_name = heads_faster ? "fp16-heads" : "fp16-dense";
      // The baseline call, re-timed alternately with each compressed row (time_pair_us).
      const std::function<void()> best_fn = [&, heads_faster] {
        if (heads_faster)
          cpu::attention_codec(hkeys, hvalues, n, q.data(), H, p, out.data(), 0, thr);
        else
          cpu::attention_dense(k16.data(), v16.data(), cpu::DType::kF16, n, kvh, d, q.data(), H, p, out.data(), thr);
      };

      for (const auto& [method, bits] : cases) {
        CodecConfig cfg;
        cfg.method = method;
        cfg.bits = bits;
        cfg.head_dim = d;
        std::vector<std::unique_ptr<Codec>> refs;
        std::vector<std::unique_ptr<cpu::CpuCodec>> codecs;
        std::vector<std::vector<std::uint8_t>> kb(static_cast<std::size_t>(kvh)), vb(static_cast<std::size_t>(kvh));
        std::vector<cpu::CodecHead> keys, values;
        std::vector<float> rowbuf(n * du);
        double encode_us = 0;
        for (int g = 0; g < kvh; ++g) {
          cfg.seed = 0x7b5eedull + static_cast<std::uint64_t>(g);
          for (Role role : {Role::kKey, Role::kValue}) {
            cfg.role = role;
            const std::vector<float>& src = role == Role::kKey ? k32 : v32;
            for (std::size_t t = 0; t < n; ++t) std::memcpy(&rowbuf[t * du], &src[(t * kvh + g) * du], du * 4);
            refs.push_back(make_codec(cfg));
            if (refs.back()->needs_calibration()) refs.back()->calibrate(rowbuf.data(), std::min<std::size_t>(n, 4096));
            codecs.push_back(cpu::make_cpu_codec(*refs.back()));
            const cpu::CpuCodec& c = *codecs.back();
            auto& buf = role == Role::kKey ? kb[g] : vb[g];
            buf.resize(c.encoded_bytes(n));
            const auto a = std::chrono::steady_clock::now();
            c.encode(rowbuf.data(), n, buf.data(), thr);
            if (role == Role::kKey)
              encode_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
            (role == Role::kKey ? keys : values).push_back({&c, buf.data()});
          }
        }
        // The compressed cache as one contiguous buffer, for the stream baseline.
        std::vector<std::uint8_t> all;
        for (int g = 0; g < kvh; ++g) {
          all.insert(all.end(), kb[g].begin(), kb[g].end());
          all.insert(all.end(), vb[g].begin(), vb[g].end());
        }
        const double cbytes = static_cast<double>(all.size());
        const double ts = time_us([&] { cpu::stream_bytes(all.data(), all.size(), thr); }, reps, budget);
        const auto [tq, best16] =
            time_pair_us([&] { cpu::attention_codec(keys, values, n, q.data(), H, p, out.data(), 0, thr); }, best_fn, reps, budget);
        const std::string mname = method_name(method);
        BenchRow r = base;
        r.method = mname;
        r.simd = codecs.front()->isa();
        r.bits = bits;
        r.time_us = tq;
        r.baseline = best_name;
        r.baseline_time_us = best16;
        r.speedup = best16 / tq;
        r.gbps = (cbytes + qbytes) / (tq * 1e3);
        r.tokens_per_s = n / (tq * 1e-6);
        r.bits_per_element = 8.0 * cbytes / static_cast<double>(2 * elems);
        r.stream_time_us = ts;
        rows.push_back(r);
        // TurboQuant-MSE with AttentionPrecision::kBf16 (the fused bf16 kernels: integer widths, and fractional
        // widths through the split kernel), where the CPU has it, and kInt8 the same way at the AVX-512 level.
        auto lowp_row = [&](AttentionPrecision prec, const char* suffix, const char* simd) {
          AttentionParams pb = p;
          pb.precision = prec;
          const auto [tb, bb] =
              time_pair_us([&] { cpu::attention_codec(keys, values, n, q.data(), H, pb, out.data(), 0, thr); }, best_fn, reps, budget);
          BenchRow rb = r;
          rb.baseline_time_us = bb;
          rb.method = mname + suffix;
          rb.simd = simd;
          rb.time_us = tb;
          rb.speedup = bb / tb;
          rb.gbps = (cbytes + qbytes) / (tb * 1e3);
          rb.tokens_per_s = n / (tb * 1e-6);
          rows.push_back(rb);
        };
        if (method == Method::kTurboMse && simd_level() == SimdLevel::kAvx512 && cpu_has_avx512_bf16())
          lowp_row(AttentionPrecision::kBf16, " bf16", "avx512-bf16");
        // KIVI and RVQ with AttentionPrecision::kInt8 (their int8 kernels: KIVI at 1..4 bits, the bench's value
        // groups being 32 channels, a multiple of 32; RVQ at 1..3 bits).
        if (((method == Method::kKivi && bits <= 4) || (method == Method::kRvq && bits <= 3)) &&
            simd_level() == SimdLevel::kAvx512)
          lowp_row(AttentionPrecision::kInt8, " int8", "avx512-vnni");
        if (method == Method::kTurboMse && simd_level() == SimdLevel::kAvx512) {
          // kInt8 as the library chooses (AMX tiles or vpdpbusd: int8_uses_amx per job of at most 16 query
          // heads), then, at integer widths where the CPU has AMX, the other choice forced through TURBOKV_AMX
          // on the same bytes ("tq-mse int8 amx" / "int8 vnni"). Fractional widths at head_dim <= 128 run the
          // kBf16 kernel (packed heads): their row keeps the "avx512-vnni" label.
          const int G = H / kvh, rest = G % 16;
          const bool integer = bits == std::floor(bits);
          const bool amx = integer && int8_uses_amx(std::min(G, 16), d);
          const bool mixed = integer && G > 16 && rest != 0 && int8_uses_amx(rest, d) != amx;
          lowp_row(AttentionPrecision::kInt8, " int8", mixed ? "avx512-amx+vnni" : amx ? "avx512-amx" : "avx512-vnni");
          if (integer && cpu_has_amx_int8()) {
            const char* old = std::getenv("TURBOKV_AMX");
            const std::string saved = old ? old : "";
            setenv("TURBOKV_AMX", amx ? "0" : "1", 1);
            lowp_row(AttentionPrecision::kInt8, amx ? " int8 vnni" : " int8 amx", amx ? "avx512-vnni" : "avx512-amx");
            if (old)
              setenv("TURBOKV_AMX", saved.c_str(), 1);
            else
              unsetenv("TURBOKV_AMX");
          }
        }
        // Fractional TurboQuant-MSE (outlier split): the row above is the fused split kernel
        // (CodecAttentionPath::kTqMseSplitFused); "tq-mse generic" times the generic codec-domain path on
        // the same bytes in the same run.
        if (method == Method::kTurboMse && bits != std::floor(bits)) {
          std::vector<std::unique_ptr<cpu::CpuCodec>> opaque;
          std::vector<cpu::CodecHead> okeys, ovalues;
          for (int g = 0; g < kvh; ++g) {
            opaque.push_back(std::make_unique<OpaqueCodec>(*keys[g].codec));
            okeys.push_back({opaque.back().get(), keys[g].codes});
            opaque.push_back(std::make_unique<OpaqueCodec>(*values[g].codec));
            ovalues.push_back({opaque.back().get(), values[g].codes});
          }
          const auto [tg, bg] =
              time_pair_us([&] { cpu::attention_codec(okeys, ovalues, n, q.data(), H, p, out.data(), 0, thr); }, best_fn, reps, budget);
          BenchRow rg = r;
          rg.baseline_time_us = bg;
          rg.method = mname + " generic";
          rg.time_us = tg;
          rg.speedup = bg / tg;
          rg.gbps = (cbytes + qbytes) / (tg * 1e3);
          rg.tokens_per_s = n / (tg * 1e-6);
          rows.push_back(rg);
        }
        // TurboQuant-Prod keys with TurboQuant-MSE values at the same width (the paper's pairing: Prod for
        // inner products, MSE for values): the fused kernel ("tq-prod+mse-v") and, in the same run, the
        // generic codec-domain path on the same bytes ("tq-prod+mse-v generic").
        if (method == Method::kTurboProd && bits == std::floor(bits)) {
          CodecConfig vc = cfg;
          vc.method = Method::kTurboMse;
          vc.role = Role::kValue;
          std::vector<std::unique_ptr<Codec>> mrefs;
          std::vector<std::unique_ptr<cpu::CpuCodec>> mcodecs, opaque;
          std::vector<std::vector<std::uint8_t>> mvb(static_cast<std::size_t>(kvh));
          std::vector<cpu::CodecHead> mvalues, okeys;
          double mbytes = 0;
          for (int g = 0; g < kvh; ++g) {
            vc.seed = 0x7b5eedull + static_cast<std::uint64_t>(g);
            for (std::size_t t = 0; t < n; ++t) std::memcpy(&rowbuf[t * du], &v32[(t * kvh + g) * du], du * 4);
            mrefs.push_back(make_codec(vc));
            mcodecs.push_back(cpu::make_cpu_codec(*mrefs.back()));
            mvb[g].resize(mcodecs.back()->encoded_bytes(n));
            mcodecs.back()->encode(rowbuf.data(), n, mvb[g].data(), thr);
            mvalues.push_back({mcodecs.back().get(), mvb[g].data()});
            opaque.push_back(std::make_unique<OpaqueCodec>(*keys[g].codec));
            okeys.push_back({opaque.back().get(), keys[g].codes});
            mbytes += static_cast<double>(kb[g].size() + mvb[g].size());
          }
          std::vector<std::uint8_t> mall;
          for (int g = 0; g < kvh; ++g) {
            mall.insert(mall.end(), kb[g].begin(), kb[g].end());
            mall.insert(mall.end(), mvb[g].begin(), mvb[g].end());
          }
          const double tms = time_us([&] { cpu::stream_bytes(mall.data(), mall.size(), thr); }, reps, budget);
          for (int generic = 0; generic < 2; ++generic) {
            const auto& kk = generic ? okeys : keys;
            const auto [tm, bm] =
                time_pair_us([&] { cpu::attention_codec(kk, mvalues, n, q.data(), H, p, out.data(), 0, thr); }, best_fn, reps, budget);
            BenchRow rm = r;
            rm.baseline_time_us = bm;
            rm.method = mname + "+mse-v" + (generic ? " generic" : "");
            rm.time_us = tm;
            rm.speedup = bm / tm;
            rm.gbps = (mbytes + qbytes) / (tm * 1e3);
            rm.tokens_per_s = n / (tm * 1e-6);
            rm.bits_per_element = 8.0 * mbytes / static_cast<double>(2 * elems);
            rm.stream_time_us = tms;
            rows.push_back(rm);
          }
        }
        BenchRow rs = base;
        rs.op = "stream";
        rs.peak_time_us = 0;  // a decode-row field
        rs.method = mname;
        rs.bits = bits;
        rs.time_us = ts;
        rs.baseline = "fp16-stream";
        rs.baseline_time_us = s16;
        rs.speedup = s16 / ts;
        rs.gbps = cbytes / (ts * 1e3);
        rs.tokens_per_s = n / (ts * 1e-6);
        rs.bits_per_element = r.bits_per_element;
        rows.push_back(rs);
        if (n == opt.contexts.front()) {
          BenchRow re = base;
          re.op = "encode";
          re.peak_time_us = 0;
          re.method = mname;
          re.bits = bits;
          re.time_us = encode_us / kvh;  // one head's keys: n tokens
          re.gbps = static_cast<double>(n * du * 4) / (re.time_us * 1e3);
          re.tokens_per_s = n / (re.time_us * 1e-6);
          re.bits_per_element = r.bits_per_element;
          rows.push_back(re);
        }
      }
    }
  }
  return rows;
}

}  // namespace turbokv
