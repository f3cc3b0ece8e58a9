// Shared reference pieces: argument checks, bit packing, the codec base class,
// the rotated scalar quantizer and the QJL sketch.
#include <cmath>
#include <cstring>
#include <string>


#include "internal.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"
#include "turbokv/rng.h"

namespace turbokv {

void check_finite(const char* where, const char* arg, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      throw std::invalid_argument(detail::concat(where, ": ", arg, "[", i, "] = ", x[i], ": must be finite"));
}

void pack_bits(const std::uint8_t* codes, std::size_t n, int bits, std::uint8_t* out) {
  check_arg(bits >= 1 && bits <= 8, "pack_bits", "bits", bits, "must be in 1..8");
  std::memset(out, 0, packed_bytes(n, bits));
  for (std::size_t i = 0; i < n; ++i) {
    check_arg(codes[i] < (1u << bits), "pack_bits", "codes[i]", static_cast<int>(codes[i]),
              "does not fit in `bits` bits");
    put_code(out, i, bits, codes[i]);
  }
}

void unpack_bits(const std::uint8_t* packed, std::size_t n, int bits, std::uint8_t* codes) {
  check_arg(bits >= 1 && bits <= 8, "unpack_bits", "bits", bits, "must be in 1..8");
  for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint8_t>(get_code(packed, i, bits));
}

// ---- Codec base: validation at the boundary, then the method's implementation.

double Codec::bits_per_element(std::size_t n) const {
  check_arg(n > 0, "Codec::bits_per_element", "n", n, "must be positive");
  return 8.0 * static_cast<double>(encoded_bytes(n) + side_bytes()) / (static_cast<double>(n) * head_dim());
}

void Codec::calibrate(const float* x, std::size_t n) {
  check_arg(n > 0, "Codec::calibrate", "n", n, "must be positive");
  check_finite("Codec::calibrate", "x", x, n * static_cast<std::size_t>(head_dim()));
  do_calibrate(x, n);
  calibrated_ = true;
}

void Codec::encode(const float* x, std::size_t n, std::uint8_t* out) const {
  validate(x, n);
  std::memset(out, 0, encoded_bytes(n));
  if (n) do_encode(x, n, out);
}

void Codec::validate(const float* x, std::size_t n) const {
  if (needs_calibration() && !calibrated_)
    throw std::invalid_argument(detail::concat("Codec::encode: method = ", method_name(cfg_.method),
                                               ": calibrate() must be called before encode()"));
  check_finite("Codec::encode", "x", x, n * static_cast<std::size_t>(head_dim()));
  // Norms, radii and scales are held in fp16: reject rows whose norm could overflow it.
  const std::size_t d = static_cast<std::size_t>(head_dim());
  for (std::size_t t = 0; t < n; ++t) {
    double s = 0;
    for (std::size_t i = 0; i < d; ++i) s += double(x[t * d + i]) * x[t * d + i];
    if (std::sqrt(s) >= 32768.0)
      throw std::invalid_argument(detail::concat("Codec::encode: ||x[", t, "]|| = ", std::sqrt(s),
                                                 ": must be below 32768 (norms and scales are stored in fp16)"));
  }
  if (n) do_validate(x, n);
}

void Codec::decode(const std::uint8_t* codes, std::size_t n, float* out) const {
  if (n) do_decode(codes, n, out);
}

void Codec::prepare_query(const float* q, double* state) const {
  check_finite("Codec::prepare_query", "q", q, static_cast<std::size_t>(head_dim()));
  do_prepare_query(q, state);
}

void Codec::do_prepare_query(const float* q, double* state) const {
  for (int i = 0; i < head_dim(); ++i) state[i] = q[i];
}

void Codec::scores(const double* state, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                   double* out) const {
  check_arg(t0 <= t1 && t1 <= n, "Codec::scores", "t1", t1, "token range must satisfy t0 <= t1 <= n");
  if (t1 > t0) do_scores(state, codes, n, t0, t1, out);
}

void Codec::accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const double* w,
                       double* acc) const {
  check_arg(t0 <= t1 && t1 <= n, "Codec::accumulate", "t1", t1, "token range must satisfy t0 <= t1 <= n");
  if (t1 > t0) do_accumulate(codes, n, t0, t1, w, acc);
}

void Codec::finalize(const double* acc, double* out) const { do_finalize(acc, out); }

void Codec::do_finalize(const double* acc, double* out) const {
  for (int i = 0; i < head_dim(); ++i) out[i] = acc[i];
}

namespace ref {

void check_bits(const CodecConfig& cfg, const std::vector<double>& allowed) {
  for (double b : allowed)
    if (b == cfg.bits) return;
  std::string list;
  for (double b : allowed) list += (list.empty() ? "" : ", ") + detail::concat(b);
  throw std::invalid_argument(detail::concat("make_codec: bits = ", cfg.bits, ": method ", method_name(cfg.method),
                                             " supports ", list));
}

int int_bits(const CodecConfig& cfg) { return static_cast<int>(cfg.bits); }

RotatedScalar::RotatedScalar(int d, int b, RotationKind rot, CodebookKind cbk, std::uint64_t seed)
    : dim(d), bits(b), rotation(d, rot, seed), codebook(b > 0 ? &lloyd_max_codebook(d, b, cbk) : nullptr) {}

float RotatedScalar::encode(const float* x, std::uint8_t* packed, float* unit) const {
  std::vector<float> y(static_cast<std::size_t>(dim));
  rotation.forward(x, y.data());
  const float norm = std::sqrt(sumsq_spec(x, static_cast<std::size_t>(dim)));
  const float inv = norm > 0 ? 1.0f / norm : 0.0f;
  for (int i = 0; i < dim; ++i) {
    const float t = y[static_cast<std::size_t>(i)] * inv;
    if (bits > 0) put_code(packed, static_cast<std::size_t>(i), bits, codebook->quantize(t));
    if (unit) unit[i] = t;
  }
  return norm;
}

void RotatedScalar::centroids(const std::uint8_t* packed, float* y) const {
  for (int i = 0; i < dim; ++i)
    y[i] = bits > 0 ? codebook->centroids[get_code(packed, static_cast<std::size_t>(i), bits)] : 0.0f;
}

Sketch::Sketch(int rows, int d, bool orth, std::uint64_t seed)
    : m(rows), dim(d), orthogonal(orth), s(static_cast<std::size_t>(rows) * d) {
  Rng rng(seed);
  if (!orth) {
    for (auto& v : s) v = static_cast<float>(rng.normal());
    kappa = std::sqrt(M_PI / 2) / m;
    transpose();
    return;
  }
  // Blocks of up to dim rows from Haar orthogonal matrices: each row is uniform
  // on the unit sphere, so E[sign(<u, r>) <u, q>] = E|u_1| <q, r/||r||> with
  // E|u_1| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)).
  for (int r0 = 0; r0 < m; r0 += d) {
    const std::vector<float> q = haar_orthogonal(d, rng);
    for (int i = 0; i < d && r0 + i < m; ++i)
      for (int j = 0; j < d; ++j) s[static_cast<std::size_t>(r0 + i) * d + j] = q[static_cast<std::size_t>(i) * d + j];
  }
  const double e_abs = std::exp(std::lgamma(d / 2.0) - std::lgamma((d + 1) / 2.0)) / std::sqrt(M_PI);
  kappa = 1.0 / (m * e_abs);
  transpose();
}

void Sketch::transpose() {
  st.resize(s.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < dim; ++j) st[static_cast<std::size_t>(j) * m + i] = s[static_cast<std::size_t>(i) * dim + j];
}

void Sketch::signs(const float* r, std::uint8_t* out) const {
  // Row i: acc_i = sum_j S[i][j] r[j] in ascending j (the format's order); the
  // loops run j outside so that the independent rows vectorise.
  std::vector<float> acc(static_cast<std::size_t>(m), 0.0f);
  for (int j = 0; j < dim; ++j) {
    const float* col = &st[static_cast<std::size_t>(j) * m];
    const float rj = r[j];
    for (int i = 0; i < m; ++i) acc[static_cast<std::size_t>(i)] += col[i] * rj;
  }
  for (int i = 0; i < m; ++i)
    if (acc[static_cast<std::size_t>(i)] >= 0) put_code(out, static_cast<std::size_t>(i), 1, 1);
}

void Sketch::project(const double* q, double* out) const {
  for (int i = 0; i < m; ++i) {
    const float* row = &s[static_cast<std::size_t>(i) * dim];
    double acc = 0;
    for (int j = 0; j < dim; ++j) acc += static_cast<double>(row[j]) * q[j];
    out[i] = acc;
  }
}

void Sketch::transpose_signs(const std::uint8_t* bits, double scale, double* out) const {
  for (int i = 0; i < m; ++i) {
    const double sg = get_code(bits, static_cast<std::size_t>(i), 1) ? scale : -scale;
    const float* row = &s[static_cast<std::size_t>(i) * dim];
    for (int j = 0; j < dim; ++j) out[j] += sg * row[j];
  }
}

double Sketch::signed_sum(const double* sq, const std::uint8_t* bits, int m) {
  double acc = 0;
  for (int i = 0; i < m; ++i) acc += get_code(bits, static_cast<std::size_t>(i), 1) ? sq[i] : -sq[i];
  return acc;
}

}  // namespace ref
}  // namespace turbokv
