// Test fixture data shared by the CPU attention tests: num_kv_heads TurboQuant-MSE
// heads of keys and values, encoded once by the reference codecs, with the fast
// codecs (cpu::TqMse) viewing the same bytes.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "test_util.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"
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

}  // namespace turbokv::test
