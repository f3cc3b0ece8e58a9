// GPU QJL and TurboQuant-Prod keys (src/cuda/qjl.cu, tq_prod.cu) vs the scalar
// reference codecs: encoded blocks byte-identical to make_codec(cfg)->encode;
// prepared queries and scores (fp32 on the GPU) within named tolerances of the
// reference's fp64 prepare_query / scores; bad arguments throw. Fresh random
// data each run (TURBOKV_TEST_SEED reproduces one; every failure prints it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "cuda_test_util.h"
#include "turbokv/codebook.h"
#include "turbokv/codec.h"
#include "turbokv/cuda_qjl.h"
#include "turbokv/formats.h"
#include "turbokv/attention.h"
#include "test_util.h"

namespace turbokv::test {
namespace {

/// Scores: |gpu - ref| <= kScoreRelTol * scale_t, where scale_t is the sum of the
/// magnitudes of the score's terms (fp32 accumulation on the GPU vs fp64 in the
/// reference; the tolerance is ~170 fp32 ulps of the term scale):
///   qjl:     kappa * ||k_t|| * sum_i |(S q)_i|
///   tq-prod: ||x_t|| * (sum_i |(Pi q)_i c[code_ti]| + kappa * gamma_t * sum_i |(S Pi q)_i|)
/// One flipped sign bit moves a score by >= 2 / m of the sketch part of the
/// scale, far above this tolerance (checked by the sensitivity control below).
constexpr double kScoreRelTol = 1e-5;
/// Fused decode (tq_prod_decode, fp32 throughout: query rotation/projection,
/// scores, online softmax, value accumulation) vs attention_compressed (fp64):
/// ||out - ref|| / ||ref|| per sequence.
constexpr double kProdDecodeRelTol = 1e-4;
/// Prepared query (fp64 on the GPU, stored fp32): |gpu - ref| <= kStateRelTol * max|ref| of that query.
constexpr double kStateRelTol = 1e-6;

const std::vector<std::size_t> kNs = {1, 2, 31, 64, 65, 1000, 4097};

struct Case {
  Method method;
  int head_dim, bits, rows;
  bool orthogonal;
};

std::string describe(const Case& c, std::uint64_t seed) {
  std::ostringstream os;
  os << method_name(c.method) << " head_dim=" << c.head_dim << " bits=" << c.bits << " qjl_rows=" << c.rows
     << " orthogonal=" << c.orthogonal << " seed=" << seed << " (TURBOKV_TEST_SEED=" << fresh_seed() << ")";
  return os.str();
}

CodecConfig config_of(const Case& c, std::uint64_t seed) {
  CodecConfig cfg;
  cfg.method = c.method;
  cfg.head_dim = c.head_dim;
  cfg.bits = c.bits;
  cfg.qjl_rows = c.rows;
  cfg.qjl_orthogonal = c.orthogonal;
  cfg.seed = seed ^ 0x5151;
  return cfg;
}

void gpu_encode(const cuda::QjlTables& tab, const float* x, std::size_t n, std::uint8_t* out) {
  if (tab.method() == Method::kQjl)
    cuda::qjl_encode(tab, x, n, out, nullptr);
  else
    cuda::tq_prod_encode(tab, x, n, out, nullptr);
}

/// Names the field of block byte `i` (token, section) for failure messages.
std::string where_in_block(const cuda::QjlTables& tab, std::size_t n, std::size_t i) {
  std::ostringstream os;
  const std::size_t cb = tab.code_bytes();
  if (i < n * cb) {
    const std::size_t t = i / cb, k = i % cb;
    os << "token " << t << " code byte " << k;
    if (k < tab.mse_bytes())
      os << " (MSE codes, coordinates " << k * 8 / std::max(1, tab.mse_bits()) << "..)";
    else
      os << " (sign bits of sketch rows " << (k - tab.mse_bytes()) * 8 << ".."
         << (k - tab.mse_bytes()) * 8 + 7 << ")";
  } else {
    const std::size_t s = (i - n * cb) / 2;
    const std::size_t t = s / tab.num_scalars();
    os << "token " << t << " fp16 scalar " << s % tab.num_scalars() << (s % tab.num_scalars() ? " (gamma)" : " (norm)")
       << " byte " << (i - n * cb) % 2;
  }
  return os.str();
}

void check_bytes(const Case& c, std::uint64_t seed, const std::vector<std::size_t>& ns) {
  SCOPED_TRACE(describe(c, seed));
  const CodecConfig cfg = config_of(c, seed);
  const auto ref = make_codec(cfg);
  cuda::QjlTables tab(cfg);
  const std::size_t nmax = *std::max_element(ns.begin(), ns.end());
  ASSERT_EQ(tab.block_bytes(nmax), ref->encoded_bytes(nmax));
  Rng r(seed);
  const auto x = awkward_rows(nmax, c.head_dim, r);
  DevBuf<float> dx(x);
  for (std::size_t n : ns) {
    std::vector<std::uint8_t> want(ref->encoded_bytes(n));
    ref->encode(x.data(), n, want.data());
    DevBuf<std::uint8_t> dout(want.size());
    dout.fill_byte(0xA5);  // every byte must be written
    gpu_encode(tab, dx.p, n, dout.p);
    const auto got = dout.download();
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && bad++ == 0) first = i;
    if (bad)
      ADD_FAILURE() << "n=" << n << ": " << bad << " of " << want.size() << " bytes differ; first at byte " << first
                    << " = " << where_in_block(tab, n, first) << ": expected 0x" << std::hex
                    << int(want[first]) << " got 0x" << int(got[first]) << std::dec;
  }
}

TEST(CudaQjl, EncodeBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {64, 128, 256})
    for (int rows : {d, 2 * d})
      for (bool orth : {false, true}) check_bytes({Method::kQjl, d, 1, rows, orth}, seed + d * 7 + rows + orth, kNs);
  // Other head_dims and sketch sizes: partial column chunks (72), partial ballot words (m % 32 != 0), d = 1024.
  for (auto [d, rows] : {std::pair{8, 8}, {8, 16}, {72, 72}, {72, 40}, {96, 200}, {1024, 1024}, {1024, 520}})
    for (bool orth : {false, true})
      check_bytes({Method::kQjl, d, 1, rows, orth}, seed + d * 11 + rows + orth, {1, 33, 65, 300});
}

TEST(CudaTqProd, EncodeBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {64, 128, 256})
    for (int bits = 1; bits <= 4; ++bits)
      for (int rows : {d, 2 * d})
        for (bool orth : {false, true})
          check_bytes({Method::kTurboProd, d, bits, rows, orth}, seed + d * 13 + bits * 5 + rows + orth, kNs);
  for (int bits = 1; bits <= 4; ++bits)  // sketch rows not a multiple of 32 / 128
    check_bytes({Method::kTurboProd, 128, bits, 72, false}, seed + bits, {1, 65, 300});
  // head_dims that are not powers of two: the dense Haar rotation (tq_prod_encode_dense_kernel).
  int i = 0;
  for (int d : {80, 96, 112, 160, 240})
    for (int bits = 1; bits <= 4; ++bits) {
      ++i;
      check_bytes({Method::kTurboProd, d, bits, i % 3 == 0 ? 2 * d : d, i % 2 == 0}, seed + 500 + i,
                  {1, 2, 31, 33, 65, 1000});
    }
}

// ---------------------------------------------------------------- append into pages

/// tq_prod_append / qjl_append (by c.method) over three calls (a prefill chunk of 21 tokens, then two
/// decode steps) of 3 sequences x 2 KV heads at different start positions, into a shuffled page table:
/// every new token's bytes (codes and [||x||, gamma], or qjl's ||x||) equal the reference's encode of the
/// widened vector at its page slot, and no other pool byte changes (the pool starts as 0xA5).
void check_append(const Case& c, int page_size, cuda::IoType io, std::uint64_t seed) {
  SCOPED_TRACE(describe(c, seed) + " page_size=" + std::to_string(page_size) + " io=" +
               (io == cuda::IoType::kF32 ? "f32" : io == cuda::IoType::kF16 ? "f16" : "bf16"));
  const CodecConfig cfg = config_of(c, seed);
  const auto ref = make_codec(cfg);
  cuda::QjlTables tab(cfg);
  const int d = c.head_dim, batch = 3, kvh = 2;
  const std::vector<int> start = {0, 5, 33};
  const int nn[3] = {21, 1, 1};
  const int capacity = start.back() + nn[0] + nn[1] + nn[2], max_pages = (capacity + page_size - 1) / page_size;
  const bool qjl = c.method == Method::kQjl;
  const std::size_t cb = tab.code_bytes(), sb = qjl ? 2 : 4, stride = tab.page_stride(page_size);
  ASSERT_EQ(cb + sb, ref->encoded_bytes(1));
  ASSERT_EQ(stride, qjl ? cuda::tq_page_stride(page_size, cb) : cuda::tq_prod_page_stride(page_size, cb));
  const auto table = permutation(static_cast<std::size_t>(batch) * max_pages, seed + 1);
  DevBuf<std::int32_t> dtable(table);
  DevBuf<std::uint8_t> pool(static_cast<std::size_t>(batch) * max_pages * kvh * stride);
  pool.fill_byte(0xA5);
  const cuda::PageTable pt{dtable.p, max_pages, page_size};
  Rng r(seed);
  std::vector<float> xs[3];
  int pos0 = 0;
  for (int part = 0; part < 3; ++part) {
    xs[part] = awkward_rows(static_cast<std::size_t>(batch) * nn[part] * kvh, d, r);
    const std::vector<std::uint16_t> h = round_to_io(xs[part], io);  // xs now holds what the kernel widens
    DevBuf<float> dx(xs[part]);
    DevBuf<std::uint16_t> dh(h);
    std::vector<std::int32_t> st(start.begin(), start.end());
    for (auto& v : st) v += pos0;
    DevBuf<std::int32_t> ds(st);
    const void* x = io == cuda::IoType::kF32 ? static_cast<const void*>(dx.p) : dh.p;
    if (qjl)
      cuda::qjl_append(tab, x, batch, nn[part], kvh, ds.p, pt, {pool.p, stride}, nullptr, io);
    else
      cuda::tq_prod_append(tab, x, batch, nn[part], kvh, ds.p, pt, {pool.p, stride}, nullptr, io);
    pos0 += nn[part];
  }
  expect_appended_pool(pool.download(), *ref, xs, nn, start, table, max_pages, page_size, kvh, d, stride, cb, sb);
}

TEST(CudaTqProd, AppendBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  const cuda::IoType ios[3] = {cuda::IoType::kF32, cuda::IoType::kF16, cuda::IoType::kBf16};
  const int pages[3] = {16, 1, 64};
  int i = 0;
  for (int d : {64, 128, 256})
    for (int bits = 1; bits <= 4; ++bits) {
      ++i;
      check_append({Method::kTurboProd, d, bits, d, (bits % 2) == 0}, pages[(i / 3) % 3], ios[i % 3], seed + i);
    }
  // Every input type at one shape; sketch rows 2 d and 72 (a partial ballot word).
  for (cuda::IoType io : ios) check_append({Method::kTurboProd, 128, 3, 128, false}, 16, io, seed + 100 + int(io));
  check_append({Method::kTurboProd, 128, 2, 256, true}, 8, cuda::IoType::kF16, seed + 200);
  check_append({Method::kTurboProd, 64, 4, 72, false}, 32, cuda::IoType::kBf16, seed + 201);
  // Dense rotations (head_dim not a power of two), every width and input type.
  for (int d : {80, 96, 112, 192})
    for (int bits = 1; bits <= 4; ++bits) {
      ++i;
      check_append({Method::kTurboProd, d, bits, d, (bits % 2) == 1}, pages[(i / 3) % 3], ios[i % 3], seed + 300 + i);
    }
}

// qjl_append: every head_dim the reference's qjl takes (non-powers of two included), sketch rows d, 2 d and 72,
// every input type and page sizes 1..64.
TEST(CudaQjl, AppendBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  const cuda::IoType ios[3] = {cuda::IoType::kF32, cuda::IoType::kF16, cuda::IoType::kBf16};
  const int pages[4] = {16, 1, 64, 8};
  int i = 0;
  for (int d : {64, 80, 96, 112, 128, 256})
    for (int rows : {0, 2 * d}) {
      ++i;
      check_append({Method::kQjl, d, 1, rows, ((i / 2) % 2) == 0}, pages[i % 4], ios[i % 3], seed + i);
    }
  check_append({Method::kQjl, 64, 1, 72, false}, 32, cuda::IoType::kBf16, seed + 100);
}

void check_append_flags(Method method) {
  SCOPED_TRACE(method_name(method));
  CodecConfig cfg;
  cfg.method = method;
  cfg.bits = method == Method::kQjl ? 1 : 3;
  cfg.head_dim = 128;
  cuda::QjlTables tab(cfg);
  const int batch = 2, num_new = 3, kvh = 2, page_size = 16, d = 128;
  const std::size_t stride = tab.page_stride(page_size);
  DevBuf<std::int32_t> dtable(std::vector<std::int32_t>{0, 1});
  DevBuf<std::int32_t> dstart(std::vector<std::int32_t>{0, 4});
  DevBuf<std::uint8_t> pool(2 * kvh * stride);
  const cuda::PageTable pt{dtable.p, 1, page_size};
  Rng r(fresh_seed());
  auto run = [&](const std::vector<float>& x) {
    DevBuf<float> dx(x);
    DevBuf<std::int32_t> bad(std::vector<std::int32_t>{0});
    if (method == Method::kQjl)
      cuda::qjl_append(tab, dx.p, batch, num_new, kvh, dstart.p, pt, {pool.p, stride}, nullptr, cuda::IoType::kF32,
                       bad.p);
    else
      cuda::tq_prod_append(tab, dx.p, batch, num_new, kvh, dstart.p, pt, {pool.p, stride}, nullptr,
                           cuda::IoType::kF32, bad.p);
    return bad.download()[0];
  };
  const std::size_t n = static_cast<std::size_t>(batch) * num_new * kvh;
  auto x = awkward_rows(n, d, r);
  EXPECT_EQ(run(x), 0) << "clean vectors";
  auto nan = x;
  nan[7 * d + 5] = std::nanf("");
  EXPECT_EQ(run(nan), 1) << "a NaN";
  auto inf = x;
  inf[3 * d] = -INFINITY;
  EXPECT_EQ(run(inf), 1) << "an Inf";
  auto big = x;
  for (int i = 0; i < d; ++i) big[11 * d + i] = 4000.0f;  // norm 45255 >= 32768
  EXPECT_EQ(run(big), 1) << "a norm the fp16 scalar cannot hold";
}

TEST(CudaTqProd, AppendFlagsWhatTheReferenceRejects) { check_append_flags(Method::kTurboProd); }
TEST(CudaQjl, AppendFlagsWhatTheReferenceRejects) { check_append_flags(Method::kQjl); }

TEST(CudaTqProd, AppendRejectsBadArguments) {
  CodecConfig cfg;
  cfg.method = Method::kTurboProd;
  cfg.bits = 2;
  cuda::QjlTables prod(cfg);
  CodecConfig qcfg;
  qcfg.method = Method::kQjl;
  qcfg.bits = 1;
  cuda::QjlTables qjl(qcfg);
  const std::size_t rs = cuda::tq_prod_page_stride(16, prod.code_bytes());
  DevBuf<float> x(128 * 4);
  DevBuf<std::int32_t> start(std::vector<std::int32_t>{0}), pages(std::vector<std::int32_t>{0});
  DevBuf<std::uint8_t> pool(rs);
  const cuda::PageTable pt{pages.p, 1, 16};
  expect_invalid([&] { cuda::tq_prod_append(qjl, x.p, 1, 4, 1, start.p, pt, {pool.p, rs}, nullptr); }, "kcodec.method");
  expect_invalid([&] { cuda::tq_prod_append(prod, x.p, 1, 4, 1, start.p, pt, {pool.p, rs + 32}, nullptr); },
                 "pool.page_stride");
  expect_invalid([&] { cuda::tq_prod_append(prod, x.p, 1, 4, 1, start.p, {pages.p, 1, 12}, {pool.p, rs}, nullptr); },
                 "page_size");
  expect_invalid([&] { cuda::tq_prod_append(prod, nullptr, 1, 4, 1, start.p, pt, {pool.p, rs}, nullptr); }, "pointers");
  expect_invalid([&] { cuda::tq_prod_append(prod, x.p, 1, 4, 0, start.p, pt, {pool.p, rs}, nullptr); }, "num_kv_heads");
  expect_invalid([&] { cuda::tq_prod_append(prod, x.p, -1, 4, 1, start.p, pt, {pool.p, rs}, nullptr); }, "batch");
  expect_invalid(
      [&] { cuda::tq_prod_append(prod, x.p, 1, 4, 1, start.p, pt, {pool.p, rs}, nullptr, static_cast<cuda::IoType>(7)); },
      "x_type");
  EXPECT_NO_THROW(cuda::tq_prod_append(prod, nullptr, 0, 4, 1, nullptr, pt, {pool.p, rs}, nullptr));  // no work
  // qjl_append: the same checks against qjl's page stride (one fp16 norm per token)
  const std::size_t qs = qjl.page_stride(16);
  EXPECT_EQ(qs, cuda::tq_page_stride(16, qjl.code_bytes()));
  expect_invalid([&] { cuda::qjl_append(prod, x.p, 1, 4, 1, start.p, pt, {pool.p, qs}, nullptr); }, "kcodec.method");
  expect_invalid([&] { cuda::qjl_append(qjl, x.p, 1, 4, 1, start.p, pt, {pool.p, rs}, nullptr); }, "pool.page_stride");
  expect_invalid([&] { cuda::qjl_append(qjl, x.p, 1, 4, 1, start.p, {pages.p, 1, 12}, {pool.p, qs}, nullptr); },
                 "page_size");
  expect_invalid([&] { cuda::qjl_append(qjl, x.p, 1, 4, 1, nullptr, pt, {pool.p, qs}, nullptr); }, "pointers");
  expect_invalid(
      [&] { cuda::qjl_append(qjl, x.p, 1, 4, 1, start.p, pt, {pool.p, qs}, nullptr, static_cast<cuda::IoType>(7)); },
      "x_type");
  expect_invalid([&] { (void)qjl.page_stride(12); }, "page_size");
  EXPECT_NO_THROW(cuda::qjl_append(qjl, nullptr, 0, 4, 1, nullptr, pt, {pool.p, qs}, nullptr));  // no work
  TKV_TEST_CUDA(cudaDeviceSynchronize());
}

/// Scores of num_queries queries over [t0, t1) vs the reference, plus a
/// sensitivity control: one flipped sign bit must move its token's score
/// beyond the tolerance.
void check_scores(const Case& c, std::uint64_t seed) {
  SCOPED_TRACE(describe(c, seed));
  const CodecConfig cfg = config_of(c, seed);
  const auto ref = make_codec(cfg);
  cuda::QjlTables tab(cfg);
  const int d = c.head_dim, m = tab.rows(), nq = 3;
  const std::size_t n = 1000, ssz = tab.query_state_size();
  ASSERT_EQ(ssz, ref->query_state_size());
  Rng r(seed);
  const auto x = awkward_rows(n, d, r);
  std::vector<float> q(static_cast<std::size_t>(nq) * d);
  for (auto& v : q) v = static_cast<float>(r.normal()) * 2.0f;
  q[5] = 40.0f;  // an outlier query channel
  std::vector<std::uint8_t> blk(ref->encoded_bytes(n));
  ref->encode(x.data(), n, blk.data());
  DevBuf<float> dq(q), dstate(nq * ssz);
  DevBuf<std::uint8_t> dblk(blk);
  const bool is_qjl = c.method == Method::kQjl;
  if (is_qjl)
    cuda::qjl_prepare_query(tab, dq.p, nq, dstate.p, nullptr);
  else
    cuda::tq_prod_prepare_query(tab, dq.p, nq, dstate.p, nullptr);
  const auto gstate = dstate.download();
  std::vector<double> state(nq * ssz);
  for (int h = 0; h < nq; ++h) {
    ref->prepare_query(&q[static_cast<std::size_t>(h) * d], &state[h * ssz]);
    double mx = 0;
    for (std::size_t i = 0; i < ssz; ++i) mx = std::max(mx, std::abs(state[h * ssz + i]));
    for (std::size_t i = 0; i < ssz; ++i) {
      const double e = std::abs(gstate[h * ssz + i] - state[h * ssz + i]);
      if (!(e <= kStateRelTol * mx)) {
        ADD_FAILURE() << "query " << h << " state[" << i << "]: expected " << state[h * ssz + i] << " got "
                      << gstate[h * ssz + i] << " (tolerance " << kStateRelTol * mx << ")";
        return;
      }
    }
  }
  // Per-token scale of the score (sum of term magnitudes), from the reference bytes.
  const std::size_t cb = tab.code_bytes(), mb = tab.mse_bytes();
  const ScalarCodebook* book = tab.mse_bits() > 0 ? &lloyd_max_codebook(d, tab.mse_bits(), cfg.codebook) : nullptr;
  auto scale_of = [&](int h, std::size_t t) {
    const double* st = &state[h * ssz];
    const double norm = load_half(blk.data() + n * cb + 2 * tab.num_scalars() * t);
    const double* sq = is_qjl ? st : st + d;
    double ssum = 0;
    for (int i = 0; i < m; ++i) ssum += std::abs(sq[i]);
    if (is_qjl) return tab.kappa() * norm * ssum;
    const double gamma = load_half(blk.data() + n * cb + 4 * t + 2);
    double msum = 0;
    if (book)
      for (int i = 0; i < d; ++i)
        msum += std::abs(st[i] * book->centroids[get_code(blk.data() + t * cb, i, tab.mse_bits())]);
    return norm * (msum + tab.kappa() * gamma * ssum);
  };
  auto gpu_scores = [&](const DevBuf<std::uint8_t>& b, std::size_t t0, std::size_t t1) {
    DevBuf<float> dout(static_cast<std::size_t>(nq) * (t1 - t0));
    dout.fill_byte(0xFF);  // NaN poison
    if (is_qjl)
      cuda::qjl_scores(tab, dstate.p, nq, b.p, n, t0, t1, dout.p, nullptr);
    else
      cuda::tq_prod_scores(tab, dstate.p, nq, b.p, n, t0, t1, dout.p, nullptr);
    return dout.download();
  };
  for (auto [t0, t1] : {std::pair<std::size_t, std::size_t>{0, n}, {333, 334}, {129, 777}, {999, 1000}}) {
    const auto got = gpu_scores(dblk, t0, t1);
    std::vector<double> want(t1 - t0);
    int bad = 0;
    double worst = 0;
    for (int h = 0; h < nq; ++h) {
      ref->scores(&state[h * ssz], blk.data(), n, t0, t1, want.data());
      for (std::size_t t = t0; t < t1; ++t) {
        const double g = got[h * (t1 - t0) + (t - t0)], w = want[t - t0], sc = scale_of(h, t);
        const double e = std::abs(g - w);
        if (sc > 0) worst = std::max(worst, e / sc);
        if (!(e <= kScoreRelTol * sc) && bad++ < 3)
          ADD_FAILURE() << "range [" << t0 << ", " << t1 << ") query " << h << " token " << t << ": expected " << w
                        << " got " << g << " |err| " << e << " > " << kScoreRelTol << " * scale " << sc;
      }
    }
    EXPECT_EQ(bad, 0) << "worst |err| / scale = " << worst;
  }
  // Sensitivity control: flip the sign bit of the largest |(S q)_i| of query 0 in token 0
  // (a non-zero gaussian row with gamma > 0); the score must leave the tolerance.
  const double* sq0 = is_qjl ? &state[0] : &state[d];
  int imax = 0;
  for (int i = 1; i < m; ++i)
    if (std::abs(sq0[i]) > std::abs(sq0[imax])) imax = i;
  auto flipped = blk;
  flipped[0 * cb + mb + imax / 8] ^= static_cast<std::uint8_t>(1u << (imax % 8));
  DevBuf<std::uint8_t> dflip(flipped);
  const auto gf = gpu_scores(dflip, 0, 1);
  std::vector<double> w0(1);
  ref->scores(&state[0], blk.data(), n, 0, 1, w0.data());
  EXPECT_GT(std::abs(gf[0] - w0[0]), kScoreRelTol * scale_of(0, 0))
      << "a flipped sign bit (row " << imax << ") stays within the tolerance: the check could not fail";
}

TEST(CudaQjl, ScoresMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {64, 128, 256})
    for (int rows : {d, 2 * d})
      for (bool orth : {false, true}) check_scores({Method::kQjl, d, 1, rows, orth}, seed + d * 3 + rows + orth);
  check_scores({Method::kQjl, 72, 1, 40, false}, seed + 1);
  check_scores({Method::kQjl, 1024, 1, 520, true}, seed + 2);
}

TEST(CudaTqProd, ScoresMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {64, 128, 256})
    for (int bits = 1; bits <= 4; ++bits)
      for (int rows : {d, 2 * d})
        for (bool orth : {false, true})
          check_scores({Method::kTurboProd, d, bits, rows, orth}, seed + d * 17 + bits * 3 + rows + orth);
  for (int d : {80, 96, 112, 208})  // dense rotations: the prepared query's Pi q (fp64) and the scores
    for (int bits = 1; bits <= 4; ++bits) check_scores({Method::kTurboProd, d, bits, d, bits % 2 == 0}, seed + d + bits);
}


struct DecodeCase {
  int head_dim, key_bits, value_bits, rows, num_heads, num_kv_heads, num_splits;
  bool orthogonal;
  std::vector<int> lens;
};

void run_decode_case(const DecodeCase& c, std::uint64_t seed) {
  std::ostringstream os;
  os << "decode d=" << c.head_dim << " kb=" << c.key_bits << " vb=" << c.value_bits << " m=" << c.rows
     << " heads=" << c.num_heads << "/" << c.num_kv_heads << " splits=" << c.num_splits << " orth=" << c.orthogonal
     << " lens=";
  for (int l : c.lens) os << l << ",";
  os << " seed=" << seed << " (TURBOKV_TEST_SEED=" << fresh_seed() << ")";
  SCOPED_TRACE(os.str());
  const int d = c.head_dim, nh = c.num_heads, kvh = c.num_kv_heads, batch = static_cast<int>(c.lens.size());
  const int cap = *std::max_element(c.lens.begin(), c.lens.end()) + 3;
  CodecConfig kcfg, vcfg;
  kcfg.method = Method::kTurboProd;
  kcfg.head_dim = vcfg.head_dim = d;
  kcfg.bits = c.key_bits;
  kcfg.qjl_rows = c.rows;
  kcfg.qjl_orthogonal = c.orthogonal;
  kcfg.seed = seed ^ 0x1234;
  vcfg.method = Method::kTurboMse;
  vcfg.bits = c.value_bits;
  vcfg.role = Role::kValue;
  vcfg.seed = seed ^ 0x9876;
  const auto kref = make_codec(kcfg), vref = make_codec(vcfg);
  cuda::QjlTables ktab(kcfg);
  cuda::TqMseTables vtab(vcfg);
  const std::size_t kbytes = kref->encoded_bytes(cap), vbytes = vref->encoded_bytes(cap);
  std::vector<std::uint8_t> kall(kbytes * batch * kvh), vall(vbytes * batch * kvh);
  Rng r(seed);
  std::vector<float> q(static_cast<std::size_t>(batch) * nh * d);
  for (auto& v : q) v = static_cast<float>(r.normal()) * 2.0f;
  std::vector<float> k(static_cast<std::size_t>(cap) * d), v(static_cast<std::size_t>(cap) * d);
  for (int i = 0; i < batch * kvh; ++i) {
    for (auto& x : k) x = static_cast<float>(r.normal()) * 1.5f;
    for (auto& x : v) x = static_cast<float>(r.normal());
    kref->encode(k.data(), cap, &kall[i * kbytes]);
    vref->encode(v.data(), cap, &vall[i * vbytes]);
  }
  DevBuf<std::uint8_t> dk(kall), dv(vall);
  DevBuf<float> dq(q), dout(q.size());
  DevBuf<std::int32_t> dlens(std::vector<std::int32_t>(c.lens.begin(), c.lens.end()));
  cuda::ProdDecodeArgs a;
  a.batch = batch, a.num_heads = nh, a.num_kv_heads = kvh;
  a.q = dq.p, a.out = dout.p, a.keys = dk.p, a.values = dv.p, a.capacity = cap, a.seq_lens = dlens.p;
  a.max_seq_len = cap;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  a.num_splits = c.num_splits;
  DevBuf<std::uint8_t> ws(cuda::tq_prod_decode_workspace_bytes(a, d));
  a.workspace = ws.p;
  dout.fill_byte(0xFF);  // NaN poison
  cuda::tq_prod_decode(ktab, vtab, a, nullptr);
  const auto out = dout.download();
  AttentionParams p;
  p.softmax_scale = a.softmax_scale;
  for (int b = 0; b < batch; ++b) {
    std::vector<EncodedHead> keys, values;
    for (int g = 0; g < kvh; ++g) {
      keys.push_back({kref.get(), &kall[(static_cast<std::size_t>(b) * kvh + g) * kbytes]});
      values.push_back({vref.get(), &vall[(static_cast<std::size_t>(b) * kvh + g) * vbytes]});
    }
    std::vector<double> ref(static_cast<std::size_t>(nh) * d);
    attention_compressed(keys, values, cap, &q[static_cast<std::size_t>(b) * nh * d], nh, p, ref.data(), nullptr,
                         c.lens[b]);
    const float* o = &out[static_cast<std::size_t>(b) * nh * d];
    for (std::size_t i = 0; i < ref.size(); ++i)
      ASSERT_TRUE(std::isfinite(o[i])) << "sequence " << b << " head " << i / d << " dim " << i % d << " = " << o[i];
    const double err = rel_err(o, ref.data(), ref.size());
    EXPECT_LE(err, kProdDecodeRelTol) << "sequence " << b << " (len " << c.lens[b] << "): first head out[0] = " << o[0]
                                      << " ref " << ref[0];
  }
}

TEST(CudaTqProd, DecodeMatchesReference) {
  const std::uint64_t seed = fresh_seed();
  int i = 0;
  for (int d : {64, 128, 256})
    for (int kb = 1; kb <= 4; ++kb) {
      const int vb = 1 + (kb + d / 64) % 4;
      run_decode_case({d, kb, vb, d, 8, 2, 0, false, {1, 130, 1000}}, seed + ++i);
      run_decode_case({d, kb, vb, 2 * d, 6, 1, 7, true, {257, 5, 64}}, seed + ++i);
    }
  run_decode_case({128, 3, 4, 128, 4, 4, 1, false, {2000, 1, 129}}, seed + ++i);   // one split, MHA
  run_decode_case({128, 2, 3, 136, 12, 3, 256, false, {300, 77}}, seed + ++i);     // many (mostly empty) splits
  // Dense rotations (head_dim not a power of two): Pi q and the values' Pi^T as dense matrix products.
  for (int d : {80, 96, 112, 176})
    for (int kb = 1; kb <= 4; ++kb)
      run_decode_case({d, kb, 1 + (kb + d / 16) % 4, d, 7, 1, 0, kb % 2 == 0, {1, 65, 700}}, seed + ++i);
}

TEST(CudaTqProd, DecodeRejectsBadArguments) {
  CodecConfig kcfg, vcfg;
  kcfg.method = Method::kTurboProd;
  kcfg.bits = 3;
  vcfg.bits = 2;
  cuda::QjlTables ktab(kcfg);
  cuda::TqMseTables vtab(vcfg);
  vcfg.head_dim = 64;
  cuda::TqMseTables vtab64(vcfg);
  DevBuf<float> buf(4096);
  cuda::ProdDecodeArgs a;
  a.batch = 1, a.num_heads = 6, a.num_kv_heads = 4;  // 6 % 4 != 0
  a.q = buf.p, a.out = buf.p, a.keys = reinterpret_cast<const std::uint8_t*>(buf.p);
  a.values = a.keys, a.capacity = 4, a.seq_lens = reinterpret_cast<const std::int32_t*>(buf.p), a.max_seq_len = 4;
  a.softmax_scale = 0.1f, a.workspace = buf.p;
  EXPECT_THROW(cuda::tq_prod_decode(ktab, vtab, a, nullptr), std::invalid_argument);
  a.num_heads = 8;
  EXPECT_THROW(cuda::tq_prod_decode(ktab, vtab64, a, nullptr), std::invalid_argument);  // head_dim mismatch
  a.capacity = 3;
  EXPECT_THROW(cuda::tq_prod_decode(ktab, vtab, a, nullptr), std::invalid_argument);
  a.capacity = 4;
  a.softmax_scale = 0;
  EXPECT_THROW(cuda::tq_prod_decode(ktab, vtab, a, nullptr), std::invalid_argument);
  a.softmax_scale = 0.1f;
  a.num_splits = 300;
  EXPECT_THROW(cuda::tq_prod_decode(ktab, vtab, a, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::tq_prod_decode_workspace_bytes(a, 128), std::invalid_argument);
  a.num_splits = 0;
  a.workspace = nullptr;
  EXPECT_THROW(cuda::tq_prod_decode(ktab, vtab, a, nullptr), std::invalid_argument);
  CodecConfig qcfg;
  qcfg.method = Method::kQjl;
  qcfg.bits = 1;
  cuda::QjlTables qjl(qcfg);
  a.workspace = buf.p;
  EXPECT_THROW(cuda::tq_prod_decode(qjl, vtab, a, nullptr), std::invalid_argument);  // keys not tq-prod
}

TEST(CudaQjl, RejectsBadArguments) {
  CodecConfig cfg;
  cfg.method = Method::kTurboMse;
  EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument);  // tq-mse
  cfg.method = Method::kQjl;
  cfg.bits = 1;
  cfg.qjl_rows = 12;
  EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument);  // rows not a multiple of 8
  cfg.qjl_rows = 0;
  cfg.head_dim = 2048;
  EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument);
  cfg.head_dim = 128;
  cfg.center = true;
  EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument);
  cfg.center = false;
  cfg.method = Method::kTurboProd;
  cfg.bits = 2.5;
  EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument);
  cfg.bits = 3;
  for (int d : {48, 72, 100, 272}) {  // tq-prod head_dim: multiples of 16 in 64..256
    cfg.head_dim = d;
    EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument) << "head_dim " << d;
  }
  cfg.head_dim = 96;  // the dense rotation
  EXPECT_TRUE(cuda::QjlTables(cfg).dense());
  cfg.head_dim = 128;
  EXPECT_FALSE(cuda::QjlTables(cfg).dense());
  cfg.rotation = RotationKind::kHaar;
  EXPECT_THROW(cuda::QjlTables t(cfg), std::invalid_argument);
  cfg.rotation = RotationKind::kHadamard;

  cuda::QjlTables prod(cfg);
  CodecConfig qcfg;
  qcfg.method = Method::kQjl;
  qcfg.bits = 1;
  cuda::QjlTables qjl(qcfg);
  DevBuf<float> x(128 * 4), st(prod.query_state_size() * 2), out(16);
  DevBuf<std::uint8_t> blk(prod.block_bytes(4));
  // Wrong method for the call.
  EXPECT_THROW(cuda::qjl_encode(prod, x.p, 4, blk.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::tq_prod_encode(qjl, x.p, 4, blk.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::qjl_prepare_query(prod, x.p, 1, st.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::tq_prod_scores(qjl, st.p, 1, blk.p, 4, 0, 4, out.p, nullptr), std::invalid_argument);
  // Null pointers with work to do.
  EXPECT_THROW(cuda::tq_prod_encode(prod, nullptr, 4, blk.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::qjl_encode(qjl, x.p, 4, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::tq_prod_prepare_query(prod, nullptr, 1, st.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::qjl_scores(qjl, st.p, 1, nullptr, 4, 0, 4, out.p, nullptr), std::invalid_argument);
  // Bad ranges and counts.
  EXPECT_THROW(cuda::tq_prod_scores(prod, st.p, 1, blk.p, 4, 0, 5, out.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::tq_prod_scores(prod, st.p, 1, blk.p, 4, 3, 2, out.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::qjl_prepare_query(qjl, x.p, -1, st.p, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::qjl_scores(qjl, st.p, -2, blk.p, 4, 0, 4, out.p, nullptr), std::invalid_argument);
  // The message names the argument and value.
  try {
    cuda::qjl_scores(qjl, st.p, 1, blk.p, 4, 0, 9, out.p, nullptr);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("t1 = 9"), std::string::npos) << e.what();
  }
  // Empty work is a no-op (no throw, even with null pointers).
  EXPECT_NO_THROW(cuda::qjl_encode(qjl, nullptr, 0, nullptr, nullptr));
  EXPECT_NO_THROW(cuda::tq_prod_scores(prod, nullptr, 1, nullptr, 4, 2, 2, nullptr, nullptr));
  TKV_TEST_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace turbokv::test

int main(int argc, char** argv) { return turbokv::test::cuda_test_main(argc, argv, "test_cuda_qjl"); }
