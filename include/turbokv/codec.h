// turbokv — the quantizers ("codecs") for one KV head's vectors.
//
// A Codec compresses a sequence of n vectors x[n, head_dim] (one KV head's keys
// or values, fp32 row-major) into an opaque byte buffer of encoded_bytes(n)
// bytes whose layout is defined in turbokv/formats.h, and computes on those
// bytes directly:
//   - scores():     <q, k_hat_t> for every token t, without decoding k_hat;
//   - accumulate(): sum_t w_t * v_hat_t into a codec-domain accumulator (e.g.
//                   the rotated domain), turned into head_dim outputs once by
//                   finalize() — so decode attention never materialises decoded
//                   keys or values.
// decode() exists for tests and metrics. Everything here is the scalar
// reference (src/ref/): the specification that fast paths are tested against.
//
// Methods and sources (docs/METHODS.md has the equations and all-in bits):
//   tq-mse    TurboQuant-MSE, Zandieh et al. arXiv 2504.19874, Algorithm 1
//   tq-prod   TurboQuant-Prod, ibid., Algorithm 2 (unbiased inner products)
//   qjl       QJL 1-bit sketch, Zandieh et al. arXiv 2406.03482
//   rvq       two-stage residual scalar quantization after rotation
//   pvq       product VQ with smoothing + Hadamard (VecInfer)
//   polar     PolarQuant, Han et al. arXiv 2502.02617
//   kivi      KIVI asymmetric int-b groups, Liu et al. arXiv 2402.02750
//   fp8       fp8 e4m3 with a per-token scale
//   fp16      fp16 passthrough
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "turbokv/codebook.h"
#include "turbokv/rotation.h"

namespace turbokv {

enum class Method { kTurboMse, kTurboProd, kQjl, kRvq, kPvq, kPolar, kKivi, kFp8, kFp16 };

/// Whether the vectors are keys or values (KIVI groups keys per channel, values per token).
enum class Role { kKey, kValue };

/// CLI name of a method ("tq-mse", "tq-prod", "qjl", "rvq", "pvq", "polar", "kivi", "fp8", "fp16").
const char* method_name(Method m);
/// Inverse of method_name; throws std::invalid_argument naming the value.
Method parse_method(const std::string& name);
/// Every method, in the order tables list them.
const std::vector<Method>& all_methods();
/// The nominal bit widths a method supports (e.g. tq-mse: 1, 2, 2.5, 3, 3.5, 4).
std::vector<double> supported_bits(Method m);

struct CodecConfig {
  Method method = Method::kTurboMse;
  Role role = Role::kKey;
  double bits = 4;   ///< nominal bits per coordinate; see supported_bits()
  int head_dim = 128;  ///< multiple of 8, 8..1024
  std::uint64_t seed = 0x7b5eedull;  ///< seeds rotations, sketches and k-means
  RotationKind rotation = RotationKind::kHadamard;
  CodebookKind codebook = CodebookKind::kBeta;
  int qjl_rows = 0;             ///< QJL / TurboQuant-Prod sketch rows m; 0 means head_dim; multiple of 8
  bool qjl_orthogonal = false;  ///< orthogonalised sketch rows instead of i.i.d. Gaussian
  int group_size = 32;          ///< KIVI group: tokens per key group, channels per value group
  int kmeans_iters = 12;        ///< product VQ k-means iterations
  /// Subtract the per-channel mean mu (fp16, fitted at calibration) before
  /// quantizing, and add it back in decode, scores (+ <q, mu>) and value
  /// accumulation (+ sum_t w_t * mu). For keys this removes large constant
  /// channel offsets (e.g. Gemma 3 layer 5, docs/RESULTS.md) that every
  /// norm-scaled quantizer otherwise pays for; <q, mu> is the same for every
  /// token, so softmax weights would be unchanged even without adding it back.
  /// Costs 2*head_dim bytes of side data per head. Works with every method.
  bool center = false;
};

/**
 * One KV head's quantizer. Not copyable; const methods are thread-safe.
 * Arrays: x, out: [n, head_dim] fp32 row-major; codes: encoded_bytes(n) bytes;
 * q: [head_dim]; query state: [query_state_size()];
 * accumulator: [accumulator_size()].
 */
class Codec {
 public:
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  const CodecConfig& config() const { return cfg_; }
  int head_dim() const { return cfg_.head_dim; }

  /// True if calibrate() must be called before encode() (product VQ,
  /// fractional TurboQuant). Others accept and ignore calibration data.
  virtual bool needs_calibration() const { return false; }
  bool calibrated() const { return calibrated_; }
  /// Fits data-dependent parameters (smoothing, k-means codebooks, outlier
  /// channels) on x[n, head_dim]. Throws on n == 0 or non-finite input.
  void calibrate(const float* x, std::size_t n);

  /// Bytes that n encoded vectors occupy (the codes and per-token scalars).
  virtual std::size_t encoded_bytes(std::size_t n) const = 0;
  /// Bytes held once per head besides the tokens: codebooks, smoothing
  /// factors, outlier masks (0 for data-independent codebooks, which are
  /// derived from (head_dim, bits) and not stored).
  virtual std::size_t side_bytes() const { return 0; }
  /// All-in bits per element for n tokens: 8 * (encoded_bytes(n) + side_bytes()) / (n * head_dim).
  double bits_per_element(std::size_t n) const;

  /// Encodes x[n, head_dim] into out[encoded_bytes(n)]. Throws
  /// std::invalid_argument, before writing anything, on NaN/Inf (naming the
  /// element), on a row whose norm is 32768 or more (norms and scales are
  /// fp16), or if calibration is required and missing. A zero vector decodes
  /// to zero, except under KIVI key groups shared with non-zero tokens (within
  /// half a step) and with `center` (mu + the coded -mu).
  void encode(const float* x, std::size_t n, std::uint8_t* out) const;
  /// The checks encode() runs before writing (calibration, NaN/Inf, fp16 norm
  /// range, method-specific), without encoding; throws as encode() would.
  void validate(const float* x, std::size_t n) const;
  /// Decodes codes of n vectors into out[n, head_dim].
  void decode(const std::uint8_t* codes, std::size_t n, float* out) const;

  /// Size of the prepared query (e.g. the rotated query and its sketch).
  virtual std::size_t query_state_size() const { return static_cast<std::size_t>(head_dim()); }
  /// Prepares q[head_dim] for scoring (rotate once per query).
  void prepare_query(const float* q, double* state) const;
  /// out[t - t0] = estimate of <q, x_t> for tokens t in [t0, t1) of a block
  /// of n encoded tokens, from the codes alone. out: size t1 - t0.
  void scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              double* out) const;

  /// Size of the value accumulator (codec domain).
  virtual std::size_t accumulator_size() const { return static_cast<std::size_t>(head_dim()); }
  /// acc += sum_{t in [t0, t1)} w[t - t0] * x_hat_t in the codec domain, for a
  /// block of n encoded tokens (acc zeroed by the caller). w: size t1 - t0.
  void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                  double* acc) const;
  /// out[head_dim] = the original-domain vector the accumulator represents.
  void finalize(const double* acc, double* out) const;

 protected:
  explicit Codec(const CodecConfig& cfg) : cfg_(cfg) {}
  virtual void do_calibrate(const float* /*x*/, std::size_t /*n*/) {}
  /// Method-specific input checks, run by encode() before anything is written.
  virtual void do_validate(const float* /*x*/, std::size_t /*n*/) const {}
  virtual void do_encode(const float* x, std::size_t n, std::uint8_t* out) const = 0;
  virtual void do_decode(const std::uint8_t* codes, std::size_t n, float* out) const = 0;
  virtual void do_prepare_query(const float* q, double* state) const;
  virtual void do_scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0,
                         std::size_t t1, double* out) const = 0;
  virtual void do_accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                             const double* w, double* acc) const = 0;
  virtual void do_finalize(const double* acc, double* out) const;

  CodecConfig cfg_;
  bool calibrated_ = false;
};

/**
 * Builds the reference codec for cfg. Throws std::invalid_argument naming the
 * field and value: head_dim not a positive multiple of 8 (or > 1024), bits
 * not supported by the method, qjl_rows not a multiple of 8, group_size not a
 * positive divisor of head_dim for KIVI values, head_dim not a multiple of 16 for PolarQuant.
 */
std::unique_ptr<Codec> make_codec(const CodecConfig& cfg);

}  // namespace turbokv
