// Internal interface between the QJL and TurboQuant-Prod fast paths (baseline
// x86-64: src/cpu/qjl.cpp, src/cpu/tq_prod.cpp) and their per-ISA kernels
// (src/cpu/qjl_avx2.cpp, qjl_avx512.cpp, tq_prod_avx2.cpp, tq_prod_avx512.cpp).
// Not public API.
//
// QJL (Zandieh, Daliri, Han, arXiv 2406.03482, Sec. 3, Lemma 3.2): a token k
// is stored as sign(S k) (m bits, formats.h) and ||k|| (fp16); <q, k> is
// estimated by kappa * ||k|| * <S q, sign(S k)>. The kernels keep the
// reference's (src/ref/common.cpp, Sketch) float operation order wherever the
// bytes or decoded floats depend on it:
//   - encode: (S r)_i = sum_j S[i][j] r[j], fp32 multiply then fp32 add, in
//     ascending j from +0.0f; bit i = (S r)_i >= 0; ||x|| = sqrtf(sumsq_spec(x));
//   - decode: y_j = sum_i (+-scale) * double(S[i][j]) in fp64, ascending i from
//     +0.0, then rounded to fp32 (scale = kappa * ||k||, kappa in fp64).
// Scores and value accumulation run in fp32 (the reference: fp64); the query
// projection S q and the final S^T acc run in fp64.
//
// Padding: the query state and the value accumulator hold mp = m rounded up to
// 16 floats; rows m..mp-1 of the state are zero and of the accumulator unused.
// Codec domain (CpuCodec::decode_domain): y_t[mp] = kappa * ||k_t|| * (+-1 signs),
// rows m..mp-1 zero, so <sq, y_t> is the score and sum_t w_t y_t the accumulator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace turbokv {
struct CodecConfig;
}

namespace turbokv::cpu::detail {

constexpr int kQjlMaxRows = 4096;  ///< largest sketch the fast path takes (m)
constexpr int kQjlMaxDim = 1024;   ///< largest head_dim it takes (d)

/// One QJL sketch S (m x d), prepared once for the kernels.
struct SketchState {
  int m = 0;           ///< rows, multiple of 8
  int d = 0;           ///< columns (head_dim), multiple of 8
  int mp = 0;          ///< m rounded up to a multiple of 16
  std::size_t sign_bytes = 0;  ///< packed_bytes(m, 1)
  double kappa = 0;    ///< the estimator's constant (ref::Sketch::kappa)
  float kappa_f = 0;   ///< float(kappa), for the fp32 scores / accumulation
  std::vector<float> s;   ///< S row-major, m x d (the reference's fp32 entries)
  std::vector<float> st;  ///< S transposed, zero-padded: st[j * mp + i] = S[i][j] (i < m), d x mp
};

/// The kernels of one ISA. Pointers: x rows [count, d] fp32; codes token-major
/// with sign_bytes per token; norms16: count little-endian fp16.
struct QjlKernels {
  const char* isa;
  /// x: [count, d] -> codes (sign_bytes per token, every byte written) and fp32 norms[count].
  void (*encode)(const SketchState& sk, const float* x, std::size_t count, std::uint8_t* codes, float* norms);
  /// codes + norms16 of count tokens -> out: [count, d], identical to the reference decode.
  void (*decode)(const SketchState& sk, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                 float* out);
  /// sq[mp] = float(S q), q: [d] fp64 (S q in fp64); rows >= m are 0.
  void (*project)(const SketchState& sk, const double* q, float* sq);
  /// out[t - t0] = kappa * ||k_t|| * <sq, signs_t> for t in [t0, t1) of a block of n tokens.
  void (*scores)(const SketchState& sk, const float* sq, const std::uint8_t* block, std::size_t n, std::size_t t0,
                 std::size_t t1, float* out);
  /// acc[i] += sum_t w[t - t0] * kappa * ||k_t|| * (bit_i ? 1 : -1) for i < m (acc: [mp]).
  void (*accumulate)(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0,
                     std::size_t t1, const float* w, float* acc);
  /// y[j] += sum_i coef[i] * double(a[i * lda + j]) for j < cols, ascending i < rows (fp64
  /// multiply then add); cols a multiple of 8.
  void (*rowcomb)(const float* a, std::size_t lda, int rows, int cols, const double* coef, double* y);
  /// Packs sign(S r) (bit i = (S r)_i >= 0, fp32 in the format's order) into out[sign_bytes].
  void (*signs)(const SketchState& sk, const float* r, std::uint8_t* out);
  /// The format's sum of squares (formats.h, sumsq_spec); d a multiple of 8.
  float (*sumsq)(const float* x, int d);
  /// out[i] = sum_j at[j * ldt + i] * x[j] for i < rows (fp32 multiply then add, ascending j
  /// from +0.0f: the reference's Sketch::signs and Rotation::forward order); rows a multiple of 16.
  void (*colacc)(const float* at, std::size_t ldt, int rows, const float* x, int nj, float* out);
  /// out[t] = sum_{i < m} (bit_i ? sq_i : -sq_i) for count tokens whose sign bits start at
  /// bits + t * stride; sq: [mp] (zero beyond m).
  void (*sign_sums)(const SketchState& sk, const float* sq, const std::uint8_t* bits, std::size_t stride,
                    std::size_t count, float* out);
  /// acc[i] += sum_t wg[t] * (bit_{t,i} ? 1 : -1) for i < m (acc: [mp], rows >= m untouched);
  /// token t's sign bits at bits + t * stride.
  void (*sign_accumulate)(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                          const float* wg, float* acc);
  /// The codec domain's signed sketch: y[t * ystride + i] = sc[t] * (bit_{t,i} ? 1 : -1) for i < m and
  /// 0 for m <= i < mp, for count tokens whose sign bits start at bits + t * stride.
  void (*sign_expand)(const SketchState& sk, const std::uint8_t* bits, std::size_t stride, std::size_t count,
                      const float* sc, float* y, std::size_t ystride);
  /// QJL's codec domain: y[(t - t0) * mp + i] = kappa * ||k_t|| * (bit_{t,i} ? 1 : -1) (i < m), 0 (i >= m),
  /// for t in [t0, t1) of a block of n tokens; the values scores / accumulate use (kappa_f * fp16 norm).
  void (*decode_domain)(const SketchState& sk, const std::uint8_t* block, std::size_t n, std::size_t t0,
                        std::size_t t1, float* y);
};

const QjlKernels& qjl_avx2_kernels();
const QjlKernels& qjl_avx512_kernels();
/// The kernels of simd_level(), or nullptr at kScalar (src/cpu/qjl.cpp).
const QjlKernels* qjl_kernels_for_level();
/// The sketch of a QJL / TurboQuant-Prod config exactly as the reference draws it
/// (ref::Sketch(m, head_dim, qjl_orthogonal, seed ^ 0x51)) (src/cpu/qjl.cpp).
SketchState make_sketch_state(const CodecConfig& cfg);

}  // namespace turbokv::cpu::detail
