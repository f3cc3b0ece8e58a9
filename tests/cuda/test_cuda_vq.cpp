// GPU RVQ, product-VQ and PolarQuant kernels (src/cuda/rvq.cu, pvq.cu, polar.cu)
// vs the scalar reference codecs: encoded blocks byte-identical to make_codec(cfg)->encode;
// pvq_dequantize floats identical to the reference decode; fused decode
// attention (fp32) within a named tolerance of attention_compressed (fp64);
// controls that break one code and must leave the tolerance; bad arguments
// throw. Fresh random data each run (TURBOKV_TEST_SEED reproduces one; every
// failure prints it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

#include "cuda_test_util.h"
#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cuda_polar.h"
#include "turbokv/cuda_vq.h"
#include "turbokv/formats.h"

namespace turbokv::test {
namespace {

/// Fused decode (rvq_decode / pvq_decode: fp32 query rotation or fp32-stored
/// LUT, fp32 scores, exp2f online softmax, fp32 value accumulation and inverse
/// rotation) vs attention_compressed (fp64): ||out - ref|| / ||ref|| per
/// sequence. Expected error is ~1e-6 (a few hundred fp32 ulps of accumulated
/// rounding over <= 2000 tokens and 256 coordinates); the control below shows
/// that one changed value code of the heaviest token moves the output by
/// orders of magnitude more.
constexpr double kVqDecodeRelTol = 1e-4;
/// The fp16 tensor-core staged kernel (VqDecodeArgs::kernel 0, RVQ and PolarQuant): the staged elements,
/// the scaled query and the softmax weights rounded to fp16 (2^-11 relative each), fp32 accumulation: as
/// the fp16 TurboQuant kernel's kTqDecodeH16RelTol (test_cuda_attention.cpp).
constexpr double kVqDecodeH16RelTol = 3e-3;
/// k-means iterations of the test codecs' calibration (the default 12 is slow in the scalar reference).
constexpr int kKmeansIters = 3;

const std::vector<std::size_t> kNs = {1, 2, 31, 64, 65, 1000, 4097};
/// TURBOKV_CUDA_TEST_SMALL=1 (compute-sanitizer runs): the PolarQuant tests cap lengths at 130 tokens.
const bool kSmall = std::getenv("TURBOKV_CUDA_TEST_SMALL") != nullptr;

std::string seed_note(std::uint64_t seed) {
  std::ostringstream os;
  os << "seed=" << seed << " (TURBOKV_TEST_SEED=" << fresh_seed() << ")";
  return os.str();
}

CodecConfig rvq_config(int d, int bits, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = Method::kRvq;
  cfg.head_dim = d;
  cfg.bits = bits;
  cfg.seed = seed;
  return cfg;
}

CodecConfig polar_config(int d, int bits, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = Method::kPolar;
  cfg.head_dim = d;
  cfg.bits = bits;
  cfg.seed = seed;
  return cfg;
}

CodecConfig pvq_config(int d, int bits, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = Method::kPvq;
  cfg.head_dim = d;
  cfg.bits = bits;
  cfg.seed = seed;
  cfg.kmeans_iters = kKmeansIters;
  return cfg;
}

/// Compares two blocks byte by byte; reports the count and the first mismatch, named by `where`.
void expect_same_bytes(const std::vector<std::uint8_t>& want, const std::vector<std::uint8_t>& got,
                       const std::function<std::string(std::size_t)>& where, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  if (bad)
    ADD_FAILURE() << what << ": " << bad << " of " << want.size() << " bytes differ; first at byte " << first << " = "
                  << where(first) << ": expected 0x" << std::hex << int(want[first]) << " got 0x" << int(got[first])
                  << std::dec;
}

// ---------------------------------------------------------------- RVQ encode

void check_rvq_bytes(int d, int bits, std::uint64_t seed) {
  const std::string note = "rvq head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " " + seed_note(seed);
  SCOPED_TRACE(note);
  const CodecConfig cfg = rvq_config(d, bits, seed ^ 0x5151);
  const auto ref = make_codec(cfg);
  cuda::RvqTables tab(cfg);
  const std::size_t nmax = kNs.back();
  ASSERT_EQ(tab.block_bytes(nmax), ref->encoded_bytes(nmax));
  Rng r(seed);
  const auto x = awkward_rows(nmax, d, r);
  DevBuf<float> dx(x);
  for (std::size_t n : kNs) {
    std::vector<std::uint8_t> want(ref->encoded_bytes(n));
    ref->encode(x.data(), n, want.data());
    DevBuf<std::uint8_t> dout(want.size());
    dout.fill_byte(0xA5);  // every byte must be written
    cuda::rvq_encode(tab, dx.p, n, dout.p, nullptr);
    const std::size_t cb = tab.code_bytes(), sb = tab.stage_bytes();
    auto where = [&](std::size_t i) {
      std::ostringstream os;
      if (i < n * cb) {
        const std::size_t k = i % cb, kk = k % sb;
        os << "token " << i / cb << " stage " << (k < sb ? 1 : 2) << " byte " << kk << " (coordinates "
           << kk * 8 / bits << "..)";
      } else {
        os << "token " << (i - n * cb) / 2 << " fp16 norm byte " << (i - n * cb) % 2;
      }
      return os.str();
    };
    expect_same_bytes(want, dout.download(), where, "n=" + std::to_string(n));
  }
}

/// Every head_dim the GPU takes: the powers of two (FWHT) and multiples of 16 whose reference rotation is
/// the dense Haar matrix.
const std::vector<int> kDims = {64, 80, 96, 112, 128, 144, 160, 192, 240, 256};

TEST(CudaRvq, EncodeBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : kDims)
    for (int bits = 1; bits <= 4; ++bits) check_rvq_bytes(d, bits, seed + d * 13 + bits);
}

// ---------------------------------------------------------------- PolarQuant encode

void check_polar_bytes(int d, int bits, std::uint64_t seed) {
  const std::string note = "polar head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " " + seed_note(seed);
  SCOPED_TRACE(note);
  const CodecConfig cfg = polar_config(d, bits, seed ^ 0x6161);
  const auto ref = make_codec(cfg);
  cuda::PolarTables tab(cfg);
  const std::size_t nmax = kNs.back();
  ASSERT_EQ(tab.block_bytes(nmax), ref->encoded_bytes(nmax));
  Rng r(seed);
  auto x = awkward_rows(nmax, d, r);
  // Angles exactly on cell boundaries: one-hot rows (awkward_rows) rotate to pairs of equal
  // magnitude (diagonals: every level-1 angle on a boundary at 3 and 4 bits, pi/4 at the higher
  // levels), zero rows to signed zeros; two-hot rows (every 5th from token 3) of 1 and +-1 (every
  // third of them) to pairs of 0 and +-2 scale (axes and diagonals mixed), of 1 and +-3 to
  // pairs of +-2 and +-4 scale (exact, off the boundaries).
  for (std::size_t t = 3; t < nmax; t += 5) {
    std::fill_n(&x[t * d], d, 0.0f);
    x[t * d + (t % d)] = 1.0f;
    x[t * d + ((t * 7 + 1) % d == t % d ? (t + 1) % d : (t * 7 + 1) % d)] = (t % 2) ? -3.0f : 3.0f;
    if (t % 3 == 0) x[t * d + ((t * 7 + 1) % d == t % d ? (t + 1) % d : (t * 7 + 1) % d)] = (t % 2) ? -1.0f : 1.0f;
  }
  DevBuf<float> dx(x);
  for (std::size_t n : kNs) {
    if (kSmall && n > 130) continue;
    std::vector<std::uint8_t> want(ref->encoded_bytes(n));
    ref->encode(x.data(), n, want.data());
    DevBuf<std::uint8_t> dout(want.size());
    dout.fill_byte(0xA5);  // every byte must be written
    cuda::polar_encode(tab, dx.p, n, dout.p, nullptr);
    const std::size_t cb = tab.code_bytes(), l1 = tab.level1_bytes();
    auto where = [&](std::size_t i) {
      std::ostringstream os;
      if (i < n * cb) {
        const std::size_t k = i % cb;
        os << "token " << i / cb << (k < l1 ? " level-1 angle byte " : " level 2..4 angle byte ")
           << (k < l1 ? k : k - l1);
      } else {
        const std::size_t j = (i - n * cb) / 2;
        os << "token " << j / tab.num_radii() << " fp16 radius " << j % tab.num_radii() << " byte " << (i - n * cb) % 2;
      }
      return os.str();
    };
    expect_same_bytes(want, dout.download(), where, "n=" + std::to_string(n));
  }
}

TEST(CudaPolar, EncodeBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : kDims)
    for (int bits = 2; bits <= 4; ++bits) check_polar_bytes(d, bits, seed + d * 19 + bits);
}

// ---------------------------------------------------------------- PVQ encode / dequantize

/// A calibrated reference pvq codec: calibration rows gaussian with outlier
/// channels, or (few_distinct) 40 distinct rows repeated, so that k-means
/// leaves duplicate centroids and encode meets exact distance ties.
std::unique_ptr<Codec> calibrated_pvq(int d, int bits, std::uint64_t seed, bool few_distinct) {
  auto codec = make_codec(pvq_config(d, bits, seed ^ 0x7777));
  Rng r(seed ^ 0xabc);
  const std::size_t n = 1200;
  auto cal = awkward_rows(n, d, r);
  if (few_distinct)
    for (std::size_t t = 40; t < n; ++t) std::copy_n(&cal[(t % 40) * d], d, &cal[t * d]);
  codec->calibrate(cal.data(), n);
  return codec;
}

void check_pvq_bytes(int d, int bits, std::uint64_t seed, bool few_distinct) {
  const std::string note = "pvq head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) +
                           " few_distinct=" + std::to_string(few_distinct) + " " + seed_note(seed);
  SCOPED_TRACE(note);
  const auto ref = calibrated_pvq(d, bits, seed, few_distinct);
  cuda::PvqTables tab(*ref);
  const std::size_t nmax = few_distinct ? 300 : kNs.back();
  ASSERT_EQ(tab.block_bytes(nmax), ref->encoded_bytes(nmax));
  Rng r(seed);
  auto x = awkward_rows(nmax, d, r);
  if (few_distinct) {  // the calibration rows themselves (ties between duplicate centroids), then fresh rows
    Rng rc(seed ^ 0xabc);
    const auto cal = awkward_rows(40, d, rc);
    std::copy(cal.begin(), cal.end(), x.begin());
  }
  DevBuf<float> dx(x);
  const std::vector<std::size_t> ns = few_distinct ? std::vector<std::size_t>{1, 40, 300} : kNs;
  for (std::size_t n : ns) {
    std::vector<std::uint8_t> want(ref->encoded_bytes(n));
    ref->encode(x.data(), n, want.data());
    DevBuf<std::uint8_t> dout(want.size());
    dout.fill_byte(0xA5);
    cuda::pvq_encode(tab, dx.p, n, dout.p, nullptr);
    const std::size_t cb = tab.code_bytes();
    auto where = [&](std::size_t i) {
      std::ostringstream os;
      os << "token " << i / cb << " code byte " << i % cb << " (sub-vector " << (i % cb) * 8 / tab.code_bits()
         << "..)";
      return os.str();
    };
    expect_same_bytes(want, dout.download(), where, "n=" + std::to_string(n));
    if (n != ns.back()) continue;
    // Dequantize the reference bytes: floats identical to the reference decode.
    std::vector<float> dec(n * d);
    ref->decode(want.data(), n, dec.data());
    DevBuf<std::uint8_t> dblk(want);
    DevBuf<float> dy(n * d);
    dy.fill_byte(0xFF);  // NaN poison
    cuda::pvq_dequantize(tab, dblk.p, n, dy.p, nullptr);
    const auto got = dy.download();
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < dec.size(); ++i)
      if (std::memcmp(&got[i], &dec[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << "dequantize n=" << n << ": " << bad << " floats differ; first token " << first / d << " dim "
                       << first % d << ": expected " << dec[first] << " got " << got[first];
  }
}

TEST(CudaPvq, EncodeAndDequantizeMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : kDims)
    for (int bits = 1; bits <= 4; ++bits) check_pvq_bytes(d, bits, seed + d * 17 + bits, false);
  for (int bits = 1; bits <= 4; ++bits) check_pvq_bytes(128, bits, seed + 7 * bits, true);
  for (int bits = 1; bits <= 4; ++bits) check_pvq_bytes(96, bits, seed + 11 * bits, true);
}

// ---------------------------------------------------------------- decode attention

struct DecodeCase {
  Method method;
  int head_dim, key_bits, value_bits, num_heads, num_kv_heads, num_splits;
  std::vector<int> lens;
  int kernel = 1;  ///< VqDecodeArgs::kernel (0: fp16 tensor cores for RVQ and PolarQuant)
};

/// The tolerance of case c: the fp16 tensor-core kernel's where it runs (kernel 0 for RVQ and PolarQuant at
/// every head_dim, dense rotations included).
double tol_of(const DecodeCase& c) {
  return c.kernel == 0 && c.method != Method::kPvq ? kVqDecodeH16RelTol : kVqDecodeRelTol;
}

struct DecodeSetup {
  std::unique_ptr<Codec> kref, vref;
  std::vector<std::uint8_t> kall, vall;
  std::size_t kbytes = 0, vbytes = 0;
  std::vector<float> q;
  int cap = 0;
};

DecodeSetup make_setup(const DecodeCase& c, std::uint64_t seed) {
  DecodeSetup s;
  const int d = c.head_dim, kvh = c.num_kv_heads, batch = static_cast<int>(c.lens.size());
  s.cap = *std::max_element(c.lens.begin(), c.lens.end()) + 3;
  Rng r(seed);
  const std::size_t rows = static_cast<std::size_t>(batch) * kvh * s.cap;
  std::vector<float> k(rows * d), v(rows * d);
  for (auto& x : k) x = static_cast<float>(r.normal()) * 1.5f;
  for (auto& x : v) x = static_cast<float>(r.normal());
  for (std::size_t t = 0; t < rows; ++t) k[t * d + 3] += 6.0f;  // an outlier key channel (smoothing matters)
  if (c.method == Method::kRvq || c.method == Method::kPolar) {
    auto config = c.method == Method::kRvq ? rvq_config : polar_config;
    CodecConfig kcfg = config(d, c.key_bits, seed ^ 0x1234), vcfg = config(d, c.value_bits, seed ^ 0x9876);
    vcfg.role = Role::kValue;
    s.kref = make_codec(kcfg);
    s.vref = make_codec(vcfg);
  } else {
    CodecConfig kcfg = pvq_config(d, c.key_bits, seed ^ 0x1234), vcfg = pvq_config(d, c.value_bits, seed ^ 0x9876);
    vcfg.role = Role::kValue;
    s.kref = make_codec(kcfg);
    s.vref = make_codec(vcfg);
    const std::size_t ncal = std::min<std::size_t>(rows, 1500);
    s.kref->calibrate(k.data(), ncal);
    s.vref->calibrate(v.data(), ncal);
  }
  s.kbytes = s.kref->encoded_bytes(s.cap);
  s.vbytes = s.vref->encoded_bytes(s.cap);
  s.kall.resize(s.kbytes * batch * kvh);
  s.vall.resize(s.vbytes * batch * kvh);
  for (int i = 0; i < batch * kvh; ++i) {
    s.kref->encode(&k[static_cast<std::size_t>(i) * s.cap * d], s.cap, &s.kall[i * s.kbytes]);
    s.vref->encode(&v[static_cast<std::size_t>(i) * s.cap * d], s.cap, &s.vall[i * s.vbytes]);
  }
  s.q.resize(static_cast<std::size_t>(batch) * c.num_heads * d);
  for (auto& x : s.q) x = static_cast<float>(r.normal()) * 2.0f;
  return s;
}

/// The GPU decode of (keys, values) for case c: out [batch][num_heads][head_dim].
std::vector<float> gpu_decode(const DecodeCase& c, const DecodeSetup& s, const std::vector<std::uint8_t>& kall,
                              const std::vector<std::uint8_t>& vall) {
  DevBuf<std::uint8_t> dk(kall), dv(vall);
  DevBuf<float> dq(s.q), dout(s.q.size());
  DevBuf<std::int32_t> dlens(std::vector<std::int32_t>(c.lens.begin(), c.lens.end()));
  cuda::VqDecodeArgs a;
  a.batch = static_cast<int>(c.lens.size()), a.num_heads = c.num_heads, a.num_kv_heads = c.num_kv_heads;
  a.q = dq.p, a.out = dout.p, a.keys = dk.p, a.values = dv.p, a.capacity = s.cap, a.seq_lens = dlens.p;
  a.max_seq_len = s.cap;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
  a.num_splits = c.num_splits;
  a.kernel = c.kernel;
  dout.fill_byte(0xFF);  // NaN poison
  if (c.method == Method::kRvq) {
    cuda::RvqTables kt(s.kref->config()), vt(s.vref->config());
    DevBuf<std::uint8_t> ws(cuda::rvq_decode_workspace_bytes(a, c.head_dim));
    a.workspace = ws.p;
    cuda::rvq_decode(kt, vt, a, nullptr);
    return dout.download();
  }
  if (c.method == Method::kPolar) {
    cuda::PolarTables kt(s.kref->config()), vt(s.vref->config());
    DevBuf<std::uint8_t> ws(cuda::polar_decode_workspace_bytes(a, c.head_dim));
    a.workspace = ws.p;
    cuda::polar_decode(kt, vt, a, nullptr);
    return dout.download();
  }
  cuda::PvqTables kt(*s.kref), vt(*s.vref);
  DevBuf<std::uint8_t> ws(cuda::pvq_decode_workspace_bytes(a, kt));
  a.workspace = ws.p;
  cuda::pvq_decode(kt, vt, a, nullptr);
  return dout.download();
}

/// attention_compressed for sequence b: out [num_heads][head_dim]; weights [num_heads][len].
std::vector<double> ref_decode(const DecodeCase& c, const DecodeSetup& s, int b, std::vector<double>* weights) {
  const int d = c.head_dim, nh = c.num_heads, kvh = c.num_kv_heads;
  std::vector<EncodedHead> keys, values;
  for (int g = 0; g < kvh; ++g) {
    keys.push_back({s.kref.get(), &s.kall[(static_cast<std::size_t>(b) * kvh + g) * s.kbytes]});
    values.push_back({s.vref.get(), &s.vall[(static_cast<std::size_t>(b) * kvh + g) * s.vbytes]});
  }
  AttentionParams p;
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  std::vector<double> ref(static_cast<std::size_t>(nh) * d);
  if (weights) weights->assign(static_cast<std::size_t>(nh) * c.lens[b], 0.0);
  attention_compressed(keys, values, s.cap, &s.q[static_cast<std::size_t>(b) * nh * d], nh, p, ref.data(),
                       weights ? weights->data() : nullptr, c.lens[b]);
  return ref;
}

std::string describe(const DecodeCase& c, std::uint64_t seed) {
  std::ostringstream os;
  os << method_name(c.method) << " decode d=" << c.head_dim << " kb=" << c.key_bits << " vb=" << c.value_bits
     << " heads=" << c.num_heads << "/" << c.num_kv_heads << " splits=" << c.num_splits << " kernel=" << c.kernel
     << " lens=";
  for (int l : c.lens) os << l << ",";
  os << " " << seed_note(seed);
  return os.str();
}

/// Runs case c; returns the worst relative error over its sequences.
double run_decode_case(DecodeCase c, std::uint64_t seed) {
  if (kSmall && c.method == Method::kPolar)
    for (int& l : c.lens) l = std::min(l, 130);
  SCOPED_TRACE(describe(c, seed));
  const DecodeSetup s = make_setup(c, seed);
  const auto out = gpu_decode(c, s, s.kall, s.vall);
  const int d = c.head_dim, nh = c.num_heads;
  double worst = 0;
  for (int b = 0; b < static_cast<int>(c.lens.size()); ++b) {
    const auto ref = ref_decode(c, s, b, nullptr);
    const float* o = &out[static_cast<std::size_t>(b) * nh * d];
    for (std::size_t i = 0; i < ref.size(); ++i)
      if (!std::isfinite(o[i])) {
        ADD_FAILURE() << "sequence " << b << " head " << i / d << " dim " << i % d << " = " << o[i];
        return worst;
      }
    const double err = rel_err(o, ref.data(), ref.size());
    worst = std::max(worst, err);
    if (!(err <= tol_of(c))) {
      std::size_t imax = 0;
      for (std::size_t i = 1; i < ref.size(); ++i)
        if (std::abs(o[i] - ref[i]) > std::abs(o[imax] - ref[imax])) imax = i;
      ADD_FAILURE() << "sequence " << b << " (len " << c.lens[b] << "): relative L2 error " << err << " > "
                    << tol_of(c) << "; worst element head " << imax / d << " dim " << imax % d
                    << ": expected " << ref[imax] << " got " << o[imax];
    }
  }
  return worst;
}

/// Control: change one value code of the heaviest token of sequence 0 / head 0
/// (len 5, so its weight is large); the GPU output on the changed block must
/// leave the tolerance around the reference on the unchanged block.
void run_control(Method method, int d, int kb, int vb, std::uint64_t seed, int kernel = 1) {
  const DecodeCase c{method, d, kb, vb, 4, 2, 0, {5}, kernel};
  const double tol = tol_of(c);
  SCOPED_TRACE("control: " + describe(c, seed));
  const DecodeSetup s = make_setup(c, seed);
  std::vector<double> w;
  const auto ref = ref_decode(c, s, 0, &w);
  const int tstar = static_cast<int>(std::max_element(w.begin(), w.begin() + c.lens[0]) - w.begin());
  auto vbroken = s.vall;  // KV head 0 of sequence 0 is the first block
  if (method == Method::kRvq) {
    vbroken[static_cast<std::size_t>(tstar) * (s.vbytes / s.cap - 2)] ^= 1;  // stage-1 code of coordinate 0: one step
  } else if (method == Method::kPolar) {
    // Level-1 angle of coordinates 0, 1 of the token: the top bit of its b-bit code (half a turn).
    const std::size_t cbt = s.vbytes / s.cap - 2 * static_cast<std::size_t>(d / 16);
    vbroken[static_cast<std::size_t>(tstar) * cbt] ^= static_cast<std::uint8_t>(1u << (vb - 1));
  } else {
    const int cbits = vb == 3 ? 6 : 8, kk = 1 << cbits;
    std::uint8_t* tc = &vbroken[static_cast<std::size_t>(tstar) * (s.vbytes / s.cap)];
    const std::uint32_t code = get_code(tc, 0, cbits);
    // Sub-vector 0 -> another centroid that the reference decodes differently (k-means on few
    // distinct rows can leave duplicate centroids, which no check could tell apart).
    const std::size_t dd = static_cast<std::size_t>(d);
    std::vector<float> before(static_cast<std::size_t>(s.cap) * dd), after(before.size());
    s.vref->decode(s.vall.data(), s.cap, before.data());
    for (int step = 1; step < kk; ++step) {
      tc[0] = static_cast<std::uint8_t>(tc[0] & ~((1u << cbits) - 1u));
      put_code(tc, 0, cbits, (code + static_cast<std::uint32_t>(step) * 37u) % kk);
      s.vref->decode(vbroken.data(), s.cap, after.data());
      if (rel_err(after.data() + tstar * dd, before.data() + tstar * dd, dd) > 0.05) break;
    }
  }
  const auto out_ok = gpu_decode(c, s, s.kall, s.vall);
  const auto out_bad = gpu_decode(c, s, s.kall, vbroken);
  const double err_ok = rel_err(out_ok.data(), ref.data(), ref.size());
  const double err_bad = rel_err(out_bad.data(), ref.data(), ref.size());
  EXPECT_LE(err_ok, tol);
  EXPECT_GT(err_bad, tol) << "one changed value code (token " << tstar << ", weight " << w[tstar]
                          << ") stays within the tolerance: the check could not fail";
  std::printf("[ control  ] %s kernel %d: changed code -> rel err %.3g (unchanged %.3g, tolerance %.0e)\n",
              method_name(method), kernel, err_bad, err_ok, tol);
}

/// Runs every case with both kernels (0: fp16 tensor cores, 1: CUDA cores; fresh seeds) and prints the
/// worst errors.
void run_both_kernels(const char* name, const std::vector<DecodeCase>& cases, std::uint64_t seed) {
  double worst[2] = {0, 0};
  for (int kernel : {0, 1})
    for (std::size_t i = 0; i < cases.size(); ++i) {
      DecodeCase c = cases[i];
      c.kernel = kernel;
      worst[kernel] = std::max(worst[kernel], run_decode_case(c, seed + 1 + i + kernel * cases.size()));
    }
  std::printf("[ measured ] %s decode worst relative L2 error: kernel 0 (fp16 tensor cores) %.3g (tolerance %.0e), "
              "kernel 1 (CUDA cores) %.3g (tolerance %.0e)\n",
              name, worst[0], kVqDecodeH16RelTol, worst[1], kVqDecodeRelTol);
}

TEST(CudaRvq, DecodeMatchesReference) {
  const std::uint64_t seed = fresh_seed();
  std::vector<DecodeCase> cases;
  for (int d : {64, 128, 256})
    for (int kb = 1; kb <= 4; ++kb) {
      const int vb = 1 + (kb + d / 64) % 4;
      cases.push_back({Method::kRvq, d, kb, vb, 8, 2, 0, {1, 130, 1000}});
      cases.push_back({Method::kRvq, d, kb, vb, 6, 1, 7, {257, 5, 64}});
    }
  cases.push_back({Method::kRvq, 128, 3, 4, 4, 4, 1, {2000, 1, 129}});
  cases.push_back({Method::kRvq, 128, 2, 3, 12, 3, 256, {300, 77}});
  // Equal widths 2 or 4: kernel 0's compile-time-width instances (RvqFmt<B>).
  cases.push_back({Method::kRvq, 64, 2, 2, 6, 1, 7, {257, 5}});
  cases.push_back({Method::kRvq, 128, 4, 4, 8, 2, 0, {1000, 1}});
  cases.push_back({Method::kRvq, 256, 4, 4, 4, 1, 0, {130, 64}});
  cases.push_back({Method::kRvq, 256, 2, 2, 16, 2, 0, {301}});
  // Dense rotations (head_dim not a power of two): kernel 0 the staged fp16 kernel (run-time widths).
  cases.push_back({Method::kRvq, 80, 2, 3, 8, 2, 0, {1, 130, 1000}});
  cases.push_back({Method::kRvq, 96, 4, 1, 6, 1, 7, {257, 5, 64}});
  cases.push_back({Method::kRvq, 112, 3, 3, 12, 3, 0, {2000, 1}});
  cases.push_back({Method::kRvq, 240, 1, 2, 4, 4, 1, {300, 77}});
  run_both_kernels("rvq", cases, seed);
  run_control(Method::kRvq, 128, 2, 2, seed + 1000);
  run_control(Method::kRvq, 128, 2, 2, seed + 1002, 0);
  run_control(Method::kRvq, 64, 4, 1, seed + 1001);
  run_control(Method::kRvq, 256, 4, 1, seed + 1003, 0);
  run_control(Method::kRvq, 96, 2, 2, seed + 1004);
  run_control(Method::kRvq, 96, 3, 2, seed + 1005, 0);  // dense rotations on the fp16 kernel
}

TEST(CudaPolar, DecodeMatchesReference) {
  const std::uint64_t seed = fresh_seed();
  std::vector<DecodeCase> cases;
  for (int d : {64, 128, 256})
    for (int kb = 2; kb <= 4; ++kb) {
      const int vb = 2 + (kb + d / 64) % 3;
      cases.push_back({Method::kPolar, d, kb, vb, 8, 2, 0, {1, 130, 1000}});
      cases.push_back({Method::kPolar, d, kb, vb, 6, 1, 7, {257, 5, 64}});
    }
  cases.push_back({Method::kPolar, 128, 3, 4, 4, 4, 1, {2000, 1, 129}});
  cases.push_back({Method::kPolar, 128, 2, 3, 12, 3, 256, {300, 77}});
  cases.push_back({Method::kPolar, 256, 4, 2, 16, 1, 0, {4097}});
  cases.push_back({Method::kPolar, 80, 3, 4, 8, 2, 0, {1, 130, 1000}});  // dense rotations
  cases.push_back({Method::kPolar, 112, 2, 2, 6, 1, 7, {257, 5, 64}});
  cases.push_back({Method::kPolar, 192, 4, 3, 12, 3, 0, {2000, 1}});
  // Equal widths (those at 64 / 256 above too): kernel 0's compile-time-width instances (PolarFmt<B>; one
  // 16-element radius group per lane at every head_dim); kernel 1 (PolarFmt<0>) stages runs of 2 quads above
  // head_dim 128 (160, 192, 240), single quads at 96 / 128.
  cases.push_back({Method::kPolar, 128, 2, 2, 8, 2, 0, {1, 130, 1000}});
  cases.push_back({Method::kPolar, 128, 3, 3, 6, 1, 7, {257, 5, 64}});
  cases.push_back({Method::kPolar, 128, 4, 4, 12, 3, 0, {2000, 1}});
  cases.push_back({Method::kPolar, 160, 4, 4, 4, 4, 1, {300, 77}});
  cases.push_back({Method::kPolar, 240, 3, 3, 8, 2, 0, {129, 2}});
  cases.push_back({Method::kPolar, 96, 3, 3, 6, 2, 3, {65, 1000}});
  cases.push_back({Method::kPolar, 192, 2, 2, 7, 1, 0, {513}});
  run_both_kernels("polar", cases, seed);
  run_control(Method::kPolar, 128, 3, 3, seed + 3000);
  run_control(Method::kPolar, 128, 3, 3, seed + 3002, 0);
  run_control(Method::kPolar, 64, 4, 2, seed + 3001);
  run_control(Method::kPolar, 64, 4, 2, seed + 3003, 0);
  run_control(Method::kPolar, 112, 3, 3, seed + 3004);
  run_control(Method::kPolar, 80, 4, 2, seed + 3005, 0);
}

TEST(CudaPvq, DecodeMatchesReference) {
  const std::uint64_t seed = fresh_seed();
  int i = 0;
  double worst = 0;
  for (int d : {64, 128, 256})
    for (int kb = 1; kb <= 4; ++kb) {
      const int vb = 1 + (kb + d / 64) % 4;
      worst = std::max(worst, run_decode_case({Method::kPvq, d, kb, vb, 8, 2, 0, {1, 130, 1000}}, seed + ++i));
      worst = std::max(worst, run_decode_case({Method::kPvq, d, kb, vb, 6, 1, 7, {257, 5, 64}}, seed + ++i));
    }
  worst = std::max(worst, run_decode_case({Method::kPvq, 128, 3, 4, 4, 4, 1, {2000, 1, 129}}, seed + ++i));
  worst = std::max(worst, run_decode_case({Method::kPvq, 256, 4, 2, 12, 3, 256, {300, 77}}, seed + ++i));
  for (int d : {80, 96, 112, 160})  // dense rotations
    worst = std::max(worst, run_decode_case({Method::kPvq, d, 1 + d % 4, 1 + (d / 16) % 4, 8, 2, 0, {1, 130, 1000}},
                                            seed + ++i));
  std::printf("[ measured ] pvq decode worst relative L2 error %.3g (tolerance %.0e)\n", worst, kVqDecodeRelTol);
  run_control(Method::kPvq, 128, 4, 3, seed + 2000);
  run_control(Method::kPvq, 256, 1, 4, seed + 2001);
  run_control(Method::kPvq, 96, 2, 4, seed + 2002);
}

// ---------------------------------------------------------------- argument checks

TEST(CudaVq, RejectsBadArguments) {
  CodecConfig cfg = rvq_config(128, 3, 1);
  cfg.method = Method::kTurboMse;
  EXPECT_THROW(cuda::RvqTables t(cfg), std::invalid_argument);  // not rvq
  cfg.method = Method::kRvq;
  cfg.bits = 2.5;
  EXPECT_THROW(cuda::RvqTables t(cfg), std::invalid_argument);
  cfg.bits = 3;
  for (int bad_d : {48, 72, 272}) {  // head_dim: below 64, not a multiple of 16, above 256
    cfg.head_dim = bad_d;
    EXPECT_THROW(cuda::RvqTables t(cfg), std::invalid_argument);
  }
  cfg.head_dim = 128;
  cfg.rotation = RotationKind::kHaar;
  EXPECT_THROW(cuda::RvqTables t(cfg), std::invalid_argument);
  cfg.rotation = RotationKind::kHadamard;
  cfg.center = true;
  EXPECT_THROW(cuda::RvqTables t(cfg), std::invalid_argument);
  cfg.center = false;
  cuda::RvqTables rvq(cfg), rvq64(rvq_config(64, 2, 1));

  // PVQ: an uncalibrated codec, another method's codec.
  auto unc = make_codec(pvq_config(128, 2, 1));
  EXPECT_THROW(cuda::PvqTables t(*unc), std::invalid_argument);
  auto not_pvq = make_codec(rvq_config(128, 2, 1));
  EXPECT_THROW(cuda::PvqTables t(*not_pvq), std::invalid_argument);
  try {
    cuda::PvqTables t(*unc);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("codec.calibrated = 0"), std::string::npos) << e.what();
  }
  const auto pcodec = calibrated_pvq(128, 2, 1, false);
  cuda::PvqTables pvq(*pcodec);

  // PVQ at a head_dim the GPU does not take (the reference codec takes 72: sub-vectors of 8).
  {
    auto c72 = make_codec(pvq_config(72, 1, 1));
    Rng rr(5);
    const auto cal = awkward_rows(64, 72, rr);
    c72->calibrate(cal.data(), 64);
    expect_invalid([&] { cuda::PvqTables t(*c72); }, "head_dim");
  }

  // PolarQuant: bits 1 and fractional, head_dim 272, another method; the error names the field.
  CodecConfig pcfg = polar_config(128, 3, 1);
  for (double bad_bits : {1.0, 2.5}) {
    pcfg.bits = bad_bits;
    expect_invalid([&] { cuda::PolarTables t(pcfg); }, "bits");
  }
  pcfg.bits = 3;
  pcfg.head_dim = 272;
  expect_invalid([&] { cuda::PolarTables t(pcfg); }, "head_dim");
  pcfg.head_dim = 128;
  pcfg.method = Method::kRvq;
  expect_invalid([&] { cuda::PolarTables t(pcfg); }, "method");
  pcfg.method = Method::kPolar;
  cuda::PolarTables polar(pcfg), polar64(polar_config(64, 3, 1));

  DevBuf<float> buf(1 << 16);
  auto* bytes = reinterpret_cast<std::uint8_t*>(buf.p);
  EXPECT_THROW(cuda::rvq_encode(rvq, nullptr, 4, bytes, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::rvq_encode(rvq, buf.p, 4, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::pvq_encode(pvq, nullptr, 4, bytes, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::pvq_dequantize(pvq, bytes, 4, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::rvq_encode(rvq, buf.p, (std::size_t{1} << 36) + 1, bytes, nullptr), std::invalid_argument);
  EXPECT_NO_THROW(cuda::rvq_encode(rvq, nullptr, 0, nullptr, nullptr));  // empty work is a no-op
  expect_invalid([&] { cuda::polar_encode(polar, nullptr, 4, bytes, nullptr); }, "x");
  expect_invalid([&] { cuda::polar_encode(polar, buf.p, 4, nullptr, nullptr); }, "out");
  expect_invalid([&] { cuda::polar_encode(polar, buf.p, (std::size_t{1} << 36) + 1, bytes, nullptr); }, "n");
  EXPECT_NO_THROW(cuda::polar_encode(polar, nullptr, 0, nullptr, nullptr));
  EXPECT_NO_THROW(cuda::pvq_dequantize(pvq, nullptr, 0, nullptr, nullptr));

  cuda::VqDecodeArgs a;
  a.batch = 1, a.num_heads = 6, a.num_kv_heads = 4;  // 6 % 4 != 0
  a.q = buf.p, a.out = buf.p, a.keys = bytes, a.values = bytes, a.capacity = 4;
  a.seq_lens = reinterpret_cast<const std::int32_t*>(buf.p), a.max_seq_len = 4, a.softmax_scale = 0.1f;
  a.workspace = buf.p;
  EXPECT_THROW(cuda::rvq_decode(rvq, rvq, a, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::pvq_decode(pvq, pvq, a, nullptr), std::invalid_argument);
  a.num_heads = 8;
  EXPECT_THROW(cuda::rvq_decode(rvq, rvq64, a, nullptr), std::invalid_argument);  // head_dim mismatch
  expect_invalid([&] { cuda::polar_decode(polar, polar64, a, nullptr); }, "head_dim");
  a.num_heads = 6;
  expect_invalid([&] { cuda::polar_decode(polar, polar, a, nullptr); }, "num_heads");
  a.num_heads = 8;
  a.capacity = 3;
  EXPECT_THROW(cuda::rvq_decode(rvq, rvq, a, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::pvq_decode(pvq, pvq, a, nullptr), std::invalid_argument);
  a.capacity = 4;
  a.softmax_scale = 0;
  EXPECT_THROW(cuda::rvq_decode(rvq, rvq, a, nullptr), std::invalid_argument);
  a.softmax_scale = NAN;
  EXPECT_THROW(cuda::pvq_decode(pvq, pvq, a, nullptr), std::invalid_argument);
  a.softmax_scale = 0.1f;
  a.num_splits = 300;
  EXPECT_THROW(cuda::rvq_decode(rvq, rvq, a, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::rvq_decode_workspace_bytes(a, 128), std::invalid_argument);
  EXPECT_THROW(cuda::pvq_decode_workspace_bytes(a, pvq), std::invalid_argument);
  a.num_splits = 0;
  a.workspace = bytes + 4;  // misaligned
  EXPECT_THROW(cuda::rvq_decode(rvq, rvq, a, nullptr), std::invalid_argument);
  a.workspace = nullptr;
  EXPECT_THROW(cuda::pvq_decode(pvq, pvq, a, nullptr), std::invalid_argument);
  a.workspace = buf.p;
  a.keys = nullptr;
  try {
    cuda::rvq_decode(rvq, rvq, a, nullptr);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("keys"), std::string::npos) << e.what();
  }
  a.batch = 0;  // nothing to do: no throw even with a null pointer
  EXPECT_NO_THROW(cuda::pvq_decode(pvq, pvq, a, nullptr));
  TKV_TEST_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace turbokv::test

int main(int argc, char** argv) { return turbokv::test::cuda_test_main(argc, argv, "test_cuda_vq"); }
