// Scalar kernels (baseline x86-64): the same algorithms in plain C++, one
// lane wide (the layout of kernels.h with W = 1 is the natural order). The
// encode and decode paths call the reference pieces that fix the bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "turbokv/formats.h"
#include "turbokv/pack.h"

namespace turbokv::cpu::detail {
namespace {

void encode(const TqState& st, const float* x, std::size_t count, std::uint8_t* codes, float* norms) {
  const int d = st.dim;
  std::vector<float> y(static_cast<std::size_t>(d));
  for (std::size_t t = 0; t < count; ++t) {
    const float* xt = x + t * static_cast<std::size_t>(d);
    st.rotation->forward(xt, y.data());
    const float norm = std::sqrt(sumsq_spec(xt, static_cast<std::size_t>(d)));
    const float inv = norm > 0 ? 1.0f / norm : 0.0f;
    std::uint8_t* out = codes + t * st.code_bytes;
    std::memset(out, 0, st.code_bytes);
    for (int i = 0; i < d; ++i)
      put_code(out, static_cast<std::size_t>(i), st.bits, st.codebook->quantize(y[static_cast<std::size_t>(i)] * inv));
    norms[t] = norm;
  }
}

void convert(const std::uint16_t* x, bool bf16, std::size_t count, float* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = bf16 ? bf16_to_float(x[i]) : half_to_float(x[i]);
}

void decode(const TqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
            float* out) {
  const int d = st.dim;
  std::vector<float> y(static_cast<std::size_t>(d)), xr(static_cast<std::size_t>(d));
  for (std::size_t t = 0; t < count; ++t) {
    const std::uint8_t* c = codes + t * st.code_bytes;
    for (int i = 0; i < d; ++i) y[static_cast<std::size_t>(i)] = st.cbx[get_code(c, static_cast<std::size_t>(i), st.bits)];
    st.rotation->inverse(y.data(), xr.data());
    const float norm = load_half(norms16 + 2 * t);
    for (int i = 0; i < d; ++i) out[t * d + i] = norm * xr[static_cast<std::size_t>(i)];
  }
}

float dot_codes(const TqState& st, const std::uint8_t* c, const float* q) {
  float s = 0;
  for (int i = 0; i < st.dim; ++i) s += q[i] * st.cbx[get_code(c, static_cast<std::size_t>(i), st.bits)];
  return s;
}

void scores(const TqState& st, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
            const float* qp, float* out) {
  for (std::size_t t = t0; t < t1; ++t)
    out[t - t0] = dot_codes(st, block + t * st.code_bytes, qp) * load_half(block + n * st.code_bytes + 2 * t);
}

/// Online softmax over tokens, one at a time. score(h, t) and value(t, acc_h, w) supply the data.
template <class Score, class Value>
void online(std::size_t t0, std::size_t t1, int G, int P, float scale, float softcap, float* m, float* l, float* acc,
            Score score, Value value) {
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    l[h] = 0;
  }
  std::fill(acc, acc + static_cast<std::size_t>(G) * P, 0.0f);
  for (std::size_t t = t0; t < t1; ++t)
    for (int h = 0; h < G; ++h) {
      float s = score(h, t) * scale;
      if (softcap > 0) s = softcap * std::tanh(s / softcap);
      float* a = acc + static_cast<std::size_t>(h) * P;
      if (s > m[h]) {
        const float alpha = std::exp(m[h] - s);
        l[h] *= alpha;
        for (int i = 0; i < P; ++i) a[i] *= alpha;
        m[h] = s;
      }
      const float p = std::exp(s - m[h]);
      l[h] += p;
      value(t, a, p);
    }
}

void attend(const AttnJob& j) {
  const TqState& ks = *j.ks;
  const TqState& vs = *j.vs;
  const int P = ks.dim;
  online(
      j.t0, j.t1, j.G, P, j.scale, j.softcap, j.m, j.l, j.acc,
      [&](int h, std::size_t t) {
        return dot_codes(ks, j.kcodes + t * ks.code_bytes, j.qp + static_cast<std::size_t>(h) * P) *
               load_half(j.kcodes + j.n * ks.code_bytes + 2 * t);
      },
      [&](std::size_t t, float* a, float p) {
        const float w = p * load_half(j.vcodes + j.n * vs.code_bytes + 2 * t);
        const std::uint8_t* c = j.vcodes + t * vs.code_bytes;
        for (int i = 0; i < P; ++i) a[i] += w * vs.cbx[get_code(c, static_cast<std::size_t>(i), vs.bits)];
      });
}

void attend_dense_one(const DenseJob& j) {
  const int d = j.dim;
  auto elem = [&](const void* base, std::size_t t, int i) {
    const std::size_t off = t * j.stride + static_cast<std::size_t>(i);
    return j.f16 ? half_to_float(static_cast<const std::uint16_t*>(base)[off]) : static_cast<const float*>(base)[off];
  };
  online(
      j.t0, j.t1, j.G, d, j.scale, j.softcap, j.m, j.l, j.acc,
      [&](int h, std::size_t t) {
        float s = 0;
        for (int i = 0; i < d; ++i) s += j.q[h * d + i] * elem(j.k, t, i);
        return s;
      },
      [&](std::size_t t, float* a, float p) {
        for (int i = 0; i < d; ++i) a[i] += p * elem(j.v, t, i);
      });
}

void attend_dense(const DenseJob& job) {
  const std::size_t esz = job.f16 ? 2 : 4;
  for (int g = 0; g < job.kv_heads; ++g) {
    DenseJob j = job;
    const std::size_t h = static_cast<std::size_t>(g) * job.G, off = static_cast<std::size_t>(g) * job.dim * esz;
    j.kv_heads = 1;
    j.k = static_cast<const std::uint8_t*>(job.k) + off;
    j.v = static_cast<const std::uint8_t*>(job.v) + off;
    j.q = job.q + h * job.dim;
    j.m = job.m + h;
    j.l = job.l + h;
    j.acc = job.acc + h * job.dim;
    attend_dense_one(j);
  }
}

std::uint64_t stream(const std::uint8_t* p, std::size_t bytes) {
  std::uint64_t r = 0;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    r ^= w;
  }
  for (; i < bytes; ++i) r ^= p[i];
  return r;
}

}  // namespace

void dots(const float* q, std::size_t qstride, int G, const float* y, int cnt, int dim, float* out) {
  for (int h = 0; h < G; ++h)
    for (int t = 0; t < cnt; ++t) {
      float s = 0;
      for (int i = 0; i < dim; ++i) s += q[h * qstride + i] * y[static_cast<std::size_t>(t) * dim + i];
      out[static_cast<std::size_t>(h) * cnt + t] = s;
    }
}

void gemm_acc(const float* w, int G, const float* y, int cnt, int dim, float* acc, std::size_t astride) {
  for (int h = 0; h < G; ++h)
    for (int t = 0; t < cnt; ++t) {
      const float wt = w[static_cast<std::size_t>(h) * cnt + t];
      for (int i = 0; i < dim; ++i) acc[h * astride + i] += wt * y[static_cast<std::size_t>(t) * dim + i];
    }
}

void softmax_block(float* s, int G, int cnt, float scale, float* m, float* l, float* acc, std::size_t accn,
                   std::size_t astride) {
  for (int h = 0; h < G; ++h) {
    float* sh = s + static_cast<std::size_t>(h) * cnt;
    float mx = m[h];
    for (int i = 0; i < cnt; ++i) mx = std::max(mx, sh[i] = sh[i] * scale);
    if (mx != m[h]) {
      const float f = m[h] == -INFINITY ? 0.0f : std::exp(m[h] - mx);
      l[h] *= f;
      float* a = acc + static_cast<std::size_t>(h) * astride;
      for (std::size_t i = 0; i < accn; ++i) a[i] *= f;
      m[h] = mx;
    }
    for (int i = 0; i < cnt; ++i) l[h] += (sh[i] = std::exp(sh[i] - mx));
  }
}

double fma_chains(std::uint64_t iters, float x, float y) {
  float a[kFmaChains] = {};
  for (std::uint64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kFmaChains; ++j) a[j] = a[j] * x + y;  // (-ffp-contract=off: a multiply and an add)
  double sum = 0;
  for (float v : a) sum += v;
  return sum;
}

const Kernels& scalar_kernels() {
  static const Kernels k = {1, encode, convert, decode, scores, attend, attend_dense, stream, dots, gemm_acc, softmax_block, nullptr, nullptr, nullptr, nullptr, nullptr, fma_chains};
  return k;
}

const Kernels& kernels() {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return avx512_kernels();
    case SimdLevel::kAvx2: return avx2_kernels();
    default: return scalar_kernels();
  }
}

}  // namespace turbokv::cpu::detail
