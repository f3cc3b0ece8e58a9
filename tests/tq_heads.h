// Test fixture data shared by the CPU attention tests: num_kv_heads TurboQuant-MSE
// heads of keys and values, encoded once by the reference codecs, with the fast
// codecs (cpu::TqMse) viewing the same bytes.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
#include "turbokv/cpu_codec.h"
#include "turbokv/formats.h"
#include "turbokv/half.h"

namespace turbokv::test {

/// kvh heads of d-dim keys (kbits) and values (vbits), n tokens each, GQA ratio `ratio` query heads per
/// KV head. fill < 0: Gaussian data with an outlier channel (dim 1 x 6); fill = 0x00 / 0xff: every code
/// 0 / max with norms 0.5 .. 2. keys/values: reference views; fkeys/fvalues: fast-codec views.
struct TqMseHeads {
  int d, kvh, ratio, kbits, vbits;
  std::size_t n;
  std::uint64_t seed;
  std::vector<std::unique_ptr<Codec>> rk, rv;
  std::vector<std::unique_ptr<cpu::TqMse>> fk, fv;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<EncodedHead> keys, values;
  std::vector<cpu::TqHead> fkeys, fvalues;

  TqMseHeads(int d_, int kvh_, int ratio_, std::size_t n_, int kbits_, int vbits_, std::uint64_t seed_, int fill = -1)
      : d(d_), kvh(kvh_), ratio(ratio_), kbits(kbits_), vbits(vbits_), n(n_), seed(seed_) {
    for (int g = 0; g < kvh; ++g) {
      CodecConfig cfg;
      cfg.head_dim = d;
      cfg.seed = seed + g;
      cfg.bits = kbits;
      rk.push_back(make_codec(cfg));
      fk.push_back(std::make_unique<cpu::TqMse>(cfg));
      cfg.bits = vbits;
      cfg.role = Role::kValue;
      rv.push_back(make_codec(cfg));
      fv.push_back(std::make_unique<cpu::TqMse>(cfg));
      kb.emplace_back(rk[g]->encoded_bytes(n));
      vb.emplace_back(rv[g]->encoded_bytes(n));
      if (fill < 0) {
        auto k = gaussian(n * d, seed * 31 + g), v = gaussian(n * d, seed * 37 + g);
        for (std::size_t t = 0; t < n; ++t) k[t * d + 1] *= 6;  // an outlier channel
        rk[g]->encode(k.data(), n, kb[g].data());
        rv[g]->encode(v.data(), n, vb[g].data());
      } else {  // every code 0 or every code max; norms 0.5 .. 2
        std::memset(kb[g].data(), fill, n * fk[g]->code_bytes());
        std::memset(vb[g].data(), fill, n * fv[g]->code_bytes());
        for (std::size_t t = 0; t < n; ++t) {
          store_half(kb[g].data() + n * fk[g]->code_bytes() + 2 * t, 0.5f + (t % 7) * 0.25f);
          store_half(vb[g].data() + n * fv[g]->code_bytes() + 2 * t, 2.0f - (t % 5) * 0.25f);
        }
      }
    }
    for (int g = 0; g < kvh; ++g) {
      keys.push_back({rk[g].get(), kb[g].data()});
      values.push_back({rv[g].get(), vb[g].data()});
      fkeys.push_back({fk[g].get(), kb[g].data()});
      fvalues.push_back({fv[g].get(), vb[g].data()});
    }
  }
  int heads() const { return kvh * ratio; }
};

/// Heads of any reference codecs with the fast codecs (cpu::make_cpu_codec) viewing the same bytes:
/// the common part of the fused-path fixtures (test_cpu_prod_fused, test_cpu_split_fused), whose
/// constructors fill rk, rv, kb, vb, keys and values and then call remake().
struct CodecHeads {
  int d, kvh, ratio;
  std::size_t n;
  std::vector<std::unique_ptr<Codec>> rk, rv;
  std::vector<std::unique_ptr<cpu::CpuCodec>> fk, fv;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<EncodedHead> keys, values;
  std::vector<cpu::CodecHead> fkeys, fvalues;

  CodecHeads(int d_, int kvh_, int ratio_, std::size_t n_) : d(d_), kvh(kvh_), ratio(ratio_), n(n_) {}
  /// (Re)makes the fast codecs at the current simd_level().
  void remake() {
    fk.clear(), fv.clear(), fkeys.clear(), fvalues.clear();
    for (int g = 0; g < kvh; ++g) {
      fk.push_back(cpu::make_cpu_codec(*rk[g]));
      fv.push_back(cpu::make_cpu_codec(*rv[g]));
      fkeys.push_back({fk[g].get(), kb[g].data()});
      fvalues.push_back({fv[g].get(), vb[g].data()});
    }
  }
  int heads() const { return kvh * ratio; }
};

/// The fp64 reference attention (attention_compressed) of h's reference codecs: [heads][d].
inline std::vector<double> reference(const CodecHeads& h, const float* q, const AttentionParams& p,
                                     std::size_t ctx = 0) {
  std::vector<double> want(static_cast<std::size_t>(h.heads()) * h.d);
  attention_compressed(h.keys, h.values, h.n, q, h.heads(), p, want.data(), nullptr, ctx);
  return want;
}

/// Largest per-head relative error of got against want ([heads][d]).
inline double max_err(const std::vector<float>& got, const std::vector<double>& want, int heads, int d) {
  double e = 0;
  for (int h = 0; h < heads; ++h) e = std::max(e, rel_err(got.data() + h * d, want.data() + h * d, d));
  return e;
}

}  // namespace turbokv::test
