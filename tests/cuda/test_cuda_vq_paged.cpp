// Paged RVQ, product-VQ and PolarQuant on the GPU (src/cuda/rvq.cu, pvq.cu, polar.cu and the staged
// decode kernel of src/cuda/staged.cuh) vs the scalar reference codecs:
//  - *_append writes, at every appended token's slot of its (page, KV head) block, exactly the bytes
//    the reference's encode writes for that token (codes, and its norm / radii at the slot of the
//    block's scalars), for fp32, fp16 and bf16 input (the reference sees the widened values), a
//    prefill chunk then single-token decode steps, and touches no other byte;
//  - *_paged_decode with both kernels (0: fp16 tensor cores, kStagedH16RelTol; 1: CUDA cores,
//    kPagedRelTol; product VQ runs the look-up-table kernel on CUDA cores for both, except below) against
//    attention_compressed (fp64) on the reference-encoded
//    blocks scattered into shuffled pages: awkward lengths (1, 2, 31, 64, 65, 1000, 4097), page sizes
//    1..256, GQA ratios 1, 2, 3, 4, 5, 6, 7, 8, 16, head_dim 64 / 128 / 256, split counts, sliding
//    windows, soft-capping and 16-bit io;
//  - RVQ with 2 bits per stage on both sides: kernel 0 is the TurboQuant fp16 kernel with RVQ pair
//    tables (decode_h16.cuh), and with 3 or 4 bits per stage on both sides at head_dim 64 / 128 the same
//    kernel with one set of pair tables per stage, unless TURBOKV_RVQ_H16=0 (then the staged kernel: run
//    both);
//  - product VQ at 4 bits, head_dim 64 / 128: kernel 0 is the same fp16 kernel with per-sub-vector
//    centroid tables unless TURBOKV_PVQ_H16=0 (then the look-up-table kernel), with separate and with
//    shared key / value tables (one codec for both);
//  - a control per method: the same decode with a 1000-token sequence's first page-table entry
//    pointing at another sequence's page must leave the tolerance;
//  - bad arguments throw std::invalid_argument naming the argument.
// Fresh random data each run (TURBOKV_TEST_SEED reproduces one; every failure prints the seed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cuda_test_util.h"
#include "test_util.h"
#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cuda_polar.h"
#include "turbokv/cuda_vq.h"

namespace turbokv::test {
namespace {

/// fp32 decode (query rotation, scores, online softmax, accumulation, inverse rotation) vs fp64: as
/// kVqDecodeRelTol of test_cuda_vq.cpp (measured errors ~1e-6); 16-bit outputs add their rounding.
constexpr double kPagedRelTol = 1e-4;
/// The fp16 tensor-core staged kernel (args.kernel 0): staged elements, q' and the softmax weights rounded
/// to fp16 (2^-11 relative each), fp32 accumulation: as the fp16 TurboQuant kernel's kTqDecodeH16RelTol
/// (test_cuda_attention.cpp).
constexpr double kStagedH16RelTol = 3e-3;
const bool kSmall = std::getenv("TURBOKV_CUDA_TEST_SMALL") != nullptr;

/// One method's reference key / value codecs and their GPU tables.
struct Codecs {
  Method method;
  std::unique_ptr<Codec> kref, vref;
  std::unique_ptr<cuda::RvqTables> krvq, vrvq;
  std::unique_ptr<cuda::PvqTables> kpvq, vpvq;
  std::unique_ptr<cuda::PolarTables> kpolar, vpolar;
  bool shared = false;  ///< the value codec is a copy of the key codec and decode passes the key tables twice

  /// Code bytes and scalar bytes per token of the key (value = false: value) codec.
  std::size_t cb(bool key) const {
    if (method == Method::kRvq) return (key ? krvq : vrvq)->code_bytes();
    if (method == Method::kPvq) return (key ? kpvq : vpvq)->code_bytes();
    return (key ? kpolar : vpolar)->code_bytes();
  }
  std::size_t sb(bool key) const {
    if (method == Method::kRvq) return 2;
    if (method == Method::kPvq) return 0;
    return 2 * static_cast<std::size_t>((key ? kpolar : vpolar)->num_radii());
  }
  std::size_t stride(bool key, int ps) const {
    if (method == Method::kRvq) return (key ? krvq : vrvq)->page_stride(ps);
    if (method == Method::kPvq) return (key ? kpvq : vpvq)->page_stride(ps);
    return (key ? kpolar : vpolar)->page_stride(ps);
  }
  void append(bool key, const void* x, int batch, int num_new, int kvh, const std::int32_t* start,
              const cuda::PageTable& t, cuda::PagedPool pool, cuda::IoType io) const {
    if (method == Method::kRvq) return cuda::rvq_append(*(key ? krvq : vrvq), x, batch, num_new, kvh, start, t, pool, nullptr, io);
    if (method == Method::kPvq) return cuda::pvq_append(*(key ? kpvq : vpvq), x, batch, num_new, kvh, start, t, pool, nullptr, io);
    cuda::polar_append(*(key ? kpolar : vpolar), x, batch, num_new, kvh, start, t, pool, nullptr, io);
  }
  /// Workspace bytes of the paged decode (product VQ: plus its look-up tables).
  std::size_t workspace(const cuda::DecodeArgs& a) const {
    return method == Method::kPvq ? cuda::pvq_paged_decode_workspace_bytes(a, *kpvq) : cuda::decode_workspace_bytes(a);
  }
  void decode(cuda::PagedPool kp, cuda::PagedPool vp, const cuda::PageTable& t, const cuda::DecodeArgs& a) const {
    if (method == Method::kRvq) return cuda::rvq_paged_decode(*krvq, shared ? *krvq : *vrvq, kp, vp, t, a, nullptr);
    if (method == Method::kPvq) return cuda::pvq_paged_decode(*kpvq, shared ? *kpvq : *vpvq, kp, vp, t, a, nullptr);
    cuda::polar_paged_decode(*kpolar, *vpolar, kp, vp, t, a, nullptr);
  }
};

CodecConfig config(Method m, int d, double bits, std::uint64_t seed, Role role) {
  CodecConfig cfg;
  cfg.method = m;
  cfg.head_dim = d;
  cfg.bits = bits;
  cfg.seed = seed;
  cfg.role = role;
  cfg.kmeans_iters = 3;  // product VQ: the scalar reference's k-means is slow
  return cfg;
}

/// shared (RVQ or product VQ, kb == vb): the value codec is configured (and calibrated) as the key codec
/// (the same state), and decode passes the key tables for both sides (one table in the fp16 kernel).
Codecs make_codecs(Method m, int d, int kb, int vb, std::uint64_t seed, bool shared = false) {
  Codecs c;
  c.method = m;
  c.shared = shared;
  c.kref = make_codec(config(m, d, kb, seed ^ 0x1234, Role::kKey));
  c.vref = shared ? make_codec(c.kref->config()) : make_codec(config(m, d, vb, seed ^ 0x9876, Role::kValue));
  if (m == Method::kRvq) {
    c.krvq = std::make_unique<cuda::RvqTables>(c.kref->config());
    c.vrvq = std::make_unique<cuda::RvqTables>(c.vref->config());
  } else if (m == Method::kPvq) {
    Rng r(seed ^ 0xabc);
    const std::size_t n = 1200;
    const auto cal = awkward_rows(n, d, r);
    c.kref->calibrate(cal.data(), n);
    const auto cal2 = shared ? cal : awkward_rows(n, d, r);
    c.vref->calibrate(cal2.data(), n);
    c.kpvq = std::make_unique<cuda::PvqTables>(*c.kref);
    c.vpvq = std::make_unique<cuda::PvqTables>(*c.vref);
  } else {
    c.kpolar = std::make_unique<cuda::PolarTables>(c.kref->config());
    c.vpolar = std::make_unique<cuda::PolarTables>(c.vref->config());
  }
  return c;
}

const char* io_name(cuda::IoType io) {
  return io == cuda::IoType::kF32 ? "f32" : io == cuda::IoType::kF16 ? "f16" : "bf16";
}

// ---------------------------------------------------------------- append

struct AppendCase {
  Method method;
  int d, bits, page_size;
  bool key;
  cuda::IoType io;
};

void run_append_case(const AppendCase& c, std::uint64_t seed) {
  SCOPED_TRACE(std::string(method_name(c.method)) + " append d=" + std::to_string(c.d) + " bits=" +
               std::to_string(c.bits) + " page=" + std::to_string(c.page_size) + (c.key ? " keys" : " values") +
               " io=" + io_name(c.io) + " seed=" + std::to_string(seed) +
               " (TURBOKV_TEST_SEED=" + std::to_string(fresh_seed()) + ")");
  const int d = c.d, batch = 3, kvh = 2;
  const Codecs cod = make_codecs(c.method, d, c.bits, c.bits, seed);
  const Codec& ref = c.key ? *cod.kref : *cod.vref;
  const std::vector<int> start = {0, 5, 33};
  const int nn[3] = {21, 1, 1};  // a prefill chunk, then two decode steps
  const int capacity = start.back() + nn[0] + nn[1] + nn[2], max_pages = (capacity + c.page_size - 1) / c.page_size;
  const std::size_t stride = cod.stride(c.key, c.page_size), cb = cod.cb(c.key), sb = cod.sb(c.key);
  ASSERT_EQ(cb + sb, ref.encoded_bytes(1));
  const auto table = permutation(static_cast<std::size_t>(batch) * max_pages, seed + 1);
  DevBuf<std::int32_t> dtable(table);
  DevBuf<std::uint8_t> pool(static_cast<std::size_t>(batch) * max_pages * kvh * stride);
  pool.fill_byte(0xA5);
  const cuda::PageTable pt{dtable.p, max_pages, c.page_size};
  Rng r(seed);
  std::vector<float> xs[3];
  int pos0 = 0;
  for (int part = 0; part < 3; ++part) {
    xs[part] = awkward_rows(static_cast<std::size_t>(batch) * nn[part] * kvh, d, r);
    const std::vector<std::uint16_t> h = round_to_io(xs[part], c.io);
    DevBuf<float> dx(xs[part]);
    DevBuf<std::uint16_t> dh(h);
    std::vector<std::int32_t> s(start.begin(), start.end());
    for (auto& v : s) v += pos0;
    DevBuf<std::int32_t> ds(s);
    cod.append(c.key, c.io == cuda::IoType::kF32 ? static_cast<const void*>(dx.p) : dh.p, batch, nn[part], kvh, ds.p,
               pt, {pool.p, stride}, c.io);
    pos0 += nn[part];
  }
  expect_appended_pool(pool.download(), ref, xs, nn, start, table, max_pages, c.page_size, kvh, d, stride, cb, sb);
}

TEST(CudaVqPaged, AppendBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  using IO = cuda::IoType;
  int i = 0;
  for (Method m : {Method::kRvq, Method::kPvq, Method::kPolar})
    for (int d : {64, 128, 256}) {
      const int b0 = m == Method::kPolar ? 2 : 1;
      for (int bits = b0; bits <= 4; ++bits) {
        const int ps = (bits + d / 64) % 3 == 0 ? 1 : (bits % 2 ? 16 : 64);
        const IO io = (bits + d / 64) % 3 == 1 ? IO::kF16 : (bits + d / 64) % 3 == 2 ? IO::kBf16 : IO::kF32;
        run_append_case({m, d, bits, ps, (bits % 2) == 0, io}, seed + ++i);
      }
    }
}

// ---------------------------------------------------------------- decode

struct DecodeCase {
  Method method;
  int d, kb, vb, nh, kvh, page_size, window, splits;
  std::vector<int> lens;
  float softcap = 0;
  cuda::IoType io = cuda::IoType::kF32;
  int kernel = 0;  ///< DecodeArgs::kernel
  bool shared = false;  ///< RVQ / product VQ: one codec (and one GPU table object) for keys and values
  int block_warps = 0;  ///< DecodeArgs::block_warps (2 + 2-bit RVQ at head_dim 256, kernel 0: 8 or 12 warps)
};

/// RVQ's kernel 0 at 3 + 3 or 4 + 4 bits, head_dim 64 / 80 / 96 / 112 / 128: the fp16 kernel's two-part layout
/// (H16Layout::RVQ2).
bool rvq2_h16(const DecodeCase& c) {
  return c.method == Method::kRvq && c.kernel == 0 && (c.kb == 3 || c.kb == 4) && c.vb == c.kb &&
         (c.d == 64 || c.d == 80 || c.d == 96 || c.d == 112 || c.d == 128);
}

/// Product VQ's kernel 0 runs the fp16 tensor-core kernel (keys and values of the same width at head_dim
/// 64 / 128, and at 3 bits at 256, unless TURBOKV_PVQ_H16=0); its other cases run the look-up-table kernel
/// (fp32).
bool pvq_h16(const DecodeCase& c) {
  static const bool off = [] {
    const char* e = std::getenv("TURBOKV_PVQ_H16");
    return e && std::string(e) == "0";
  }();
  return c.method == Method::kPvq && c.kernel == 0 && !off && c.kb >= 1 && c.kb <= 4 && c.vb == c.kb &&
         (c.d == 64 || c.d == 128 || (c.d == 256 && c.kb == 3));
}

/// The decode tolerance of case c before 16-bit output rounding: the fp16 tensor-core kernel's where it runs
/// (kernel 0 at every head_dim, dense rotations included, except product VQ's look-up-table kernel).
double kernel_tol(const DecodeCase& c) {
  return c.kernel == 0 && (c.method != Method::kPvq || pvq_h16(c)) ? kStagedH16RelTol : kPagedRelTol;
}

std::string describe(const DecodeCase& c, std::uint64_t seed) {
  std::string s = std::string(method_name(c.method)) + " paged decode d=" + std::to_string(c.d) +
                  " kb=" + std::to_string(c.kb) + " vb=" + std::to_string(c.vb) + " heads=" + std::to_string(c.nh) +
                  "/" + std::to_string(c.kvh) + " page=" + std::to_string(c.page_size) +
                  " window=" + std::to_string(c.window) + " splits=" + std::to_string(c.splits) +
                  " softcap=" + std::to_string(c.softcap) + " io=" + io_name(c.io) +
                  " kernel=" + std::to_string(c.kernel) + (c.shared ? " shared" : "") +
                  " block_warps=" + std::to_string(c.block_warps) + " lens=";
  for (int l : c.lens) s += std::to_string(l) + ",";
  return s + " seed=" + std::to_string(seed) + " (TURBOKV_TEST_SEED=" + std::to_string(fresh_seed()) + ")";
}

/// Runs case c; returns the worst relative error (and, with control, also checks that a wrong page-table
/// entry leaves the tolerance).
double run_decode_case(DecodeCase c, std::uint64_t seed, bool control = false, std::vector<float>* got = nullptr) {
  if (kSmall)
    for (int& l : c.lens) l = std::min(l, 130);
  SCOPED_TRACE(describe(c, seed));
  const int d = c.d, batch = static_cast<int>(c.lens.size()), kvh = c.kvh, ps = c.page_size;
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
  const int max_pages = (max_len + ps - 1) / ps;
  const Codecs cod = make_codecs(c.method, d, c.kb, c.vb, seed, c.shared);
  const std::size_t ks = cod.stride(true, ps), vs = cod.stride(false, ps);
  const std::size_t kcb = cod.cb(true), vcb = cod.cb(false), ksb = cod.sb(true), vsb = cod.sb(false);
  auto table = permutation(static_cast<std::size_t>(batch) * max_pages, seed + 3);
  std::vector<std::uint8_t> kpool(table.size() * kvh * ks, 0xA5), vpool(table.size() * kvh * vs, 0xA5);
  Rng r(seed);
  std::vector<float> q(static_cast<std::size_t>(batch) * c.nh * d);
  for (auto& v : q) v = static_cast<float>(r.normal()) * 2.0f;
  DecodeIo dio(q, c.io);
  // Each (sequence, KV head) encoded by the reference as one block, its tokens' codes and scalars
  // scattered into the pages.
  std::vector<std::vector<std::uint8_t>> kblk(batch * kvh), vblk(batch * kvh);
  for (int b = 0; b < batch; ++b)
    for (int g = 0; g < kvh; ++g) {
      const std::size_t n = c.lens[b];
      std::vector<float> k(n * d), v(n * d);
      for (std::size_t t = 0; t < n; ++t)
        for (int j = 0; j < d; ++j) {
          k[t * d + j] = static_cast<float>(r.normal()) + (j == 3 ? 6.0f : 0.0f);  // an outlier key channel
          v[t * d + j] = static_cast<float>(r.normal());
        }
      auto& kb = kblk[b * kvh + g];
      auto& vb = vblk[b * kvh + g];
      kb.resize(cod.kref->encoded_bytes(n));
      vb.resize(cod.vref->encoded_bytes(n));
      cod.kref->encode(k.data(), n, kb.data());
      cod.vref->encode(v.data(), n, vb.data());
      const std::int32_t* row = &table[static_cast<std::size_t>(b) * max_pages];
      scatter_block(kpool, ks, row, ps, kvh, g, kb.data(), n, kcb, ksb);
      scatter_block(vpool, vs, row, ps, kvh, g, vb.data(), n, vcb, vsb);
    }
  DevBuf<std::uint8_t> dk(kpool), dv(vpool);
  DevBuf<std::int32_t> dtable(table), dlens(std::vector<std::int32_t>(c.lens.begin(), c.lens.end()));
  cuda::DecodeArgs a;
  a.batch = batch, a.num_heads = c.nh, a.num_kv_heads = kvh, a.head_dim = d;
  dio.bind(a);
  a.seq_lens = dlens.p, a.max_seq_len = max_len;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  a.window = c.window, a.num_splits = c.splits, a.softcap = c.softcap, a.kernel = c.kernel;
  a.block_warps = c.block_warps;
  DevBuf<std::uint8_t> ws(cod.workspace(a));
  a.workspace = ws.p;
  auto run = [&] {
    dio.poison();
    cod.decode({dk.p, ks}, {dv.p, vs}, {dtable.p, max_pages, ps}, a);
    return dio.output();
  };
  const std::vector<float> out = run();
  if (got) *got = out;
  AttentionParams p;
  p.softmax_scale = a.softmax_scale;
  p.window = c.window;
  p.softcap = c.softcap;
  const double tol = kernel_tol(c) + (c.io == cuda::IoType::kF16 ? 1e-3 : c.io == cuda::IoType::kBf16 ? 8e-3 : 0.0);
  const double worst = check_decode_outputs(*cod.kref, *cod.vref, kblk, vblk, c.lens, kvh, c.nh, d, q, out, p, tol);
  if (control) {
    // The longest sequence's first page entry pointed at the first page of the next-longest sequence in
    // the table the GPU sees: its first page_size tokens are another sequence's keys and values (all
    // written), so its output must leave the tolerance. (Swapping two of its own full pages would only
    // permute its tokens, which attention without a window does not see: sessions 12-13 did that and the
    // check could not fail.)
    const int bl = static_cast<int>(std::max_element(c.lens.begin(), c.lens.end()) - c.lens.begin());
    int other = -1;
    for (int i = 0; i < static_cast<int>(c.lens.size()); ++i)
      if (i != bl && c.lens[i] >= ps && (other < 0 || c.lens[i] > c.lens[other])) other = i;
    if (c.lens[bl] <= ps || other < 0) {
      ADD_FAILURE() << "the control needs a sequence of two pages and another of one full page";
      return worst;
    }
    table[static_cast<std::size_t>(bl) * max_pages] = table[static_cast<std::size_t>(other) * max_pages];
    dtable.upload(table);
    const std::vector<float> bad = run();
    std::vector<double> ref(static_cast<std::size_t>(c.nh) * d);
    std::vector<EncodedHead> keys, values;
    for (int g = 0; g < kvh; ++g) {
      keys.push_back({cod.kref.get(), kblk[static_cast<std::size_t>(bl) * kvh + g].data()});
      values.push_back({cod.vref.get(), vblk[static_cast<std::size_t>(bl) * kvh + g].data()});
    }
    const std::size_t o = static_cast<std::size_t>(bl) * c.nh * d;
    attention_compressed(keys, values, c.lens[bl], q.data() + o, c.nh, p, ref.data());
    const double err = rel_err(bad.data() + o, ref.data(), ref.size());
    EXPECT_GT(err, tol) << "a wrong page-table entry stays within the tolerance: the check could not fail";
    std::printf("[ control  ] %s: another sequence's page -> rel err %.3g (tolerance %.0e)\n", method_name(c.method), err, tol);
  }
  return worst;
}

TEST(CudaVqPaged, DecodeMatchesReference) {
  const std::uint64_t seed = fresh_seed();
  using IO = cuda::IoType;
  const Method R = Method::kRvq, P = Method::kPvq, Q = Method::kPolar;
  const std::vector<DecodeCase> cases = {
      // First RVQ case (the control): 2 + 2 bits, the fp16 kernel's RVQ tables at kernel 0 (the staged
      // kernel with TURBOKV_RVQ_H16=0).
      {R, 128, 2, 2, 32, 8, 16, 0, 0, {1, 2, 31, 1000}},
      // 4 + 4 bits (the first two-part case: its control), GQA 4, pages of 16 (bulk, 128-byte rows)
      {R, 128, 4, 4, 32, 8, 16, 0, 0, {1, 31, 1000}},
      {R, 128, 2, 3, 32, 8, 16, 0, 0, {1, 2, 31, 1000}},
      {R, 64, 4, 1, 9, 3, 1, 0, 0, {65, 64}},
      {R, 256, 1, 4, 16, 1, 64, 0, 3, {4097}},
      {R, 128, 3, 3, 7, 1, 32, 100, 0, {1000, 5}, 0.0f, IO::kF16},
      {R, 128, 2, 2, 8, 4, 16, 0, 0, {300, 17}},   // GQA 2 (2 heads per warp group)
      {R, 64, 4, 4, 3, 3, 4, 0, 0, {129, 1}},      // GQA 1
      {R, 128, 4, 2, 10, 2, 16, 0, 0, {77, 1000}},  // GQA 5
      // 2 + 2 bits on both sides: kernel 0 is the TurboQuant fp16 kernel with RVQ pair tables (decode_h16.cuh)
      {R, 64, 2, 2, 9, 3, 1, 0, 0, {1000, 65}},              // GQA 3, page 1 (per-row copies)
      {R, 128, 2, 2, 32, 8, 16, 0, 1, {4097, 31}},           // GQA 4, one split (fused epilogue)
      {R, 256, 2, 2, 4, 1, 64, 300, 0, {2049, 2}, 5.0f},     // page 64, window, soft-cap
      {R, 128, 2, 2, 24, 2, 32, 0, 3, {999, 1}, 0.0f, IO::kF16},  // GQA 12 (two blocks of query heads)
      {R, 64, 2, 2, 7, 1, 16, 0, 0, {130, 64, 17}, 0.0f, IO::kBf16},  // GQA 7, bulk copies
      // head_dim 256 with 12 warps per block (DecodeArgs::block_warps, session 30; kernel 1 ignores it)
      {R, 256, 2, 2, 8, 1, 16, 0, 0, {4097, 1000, 17}, 0.0f, IO::kF32, 0, false, 12},  // GQA 8, pages of 16
      {R, 256, 2, 2, 12, 4, 32, 300, 1, {2049, 40}, 3.0f, IO::kF16, 0, true, 12},     // GQA 3, window, one split
      {R, 256, 2, 2, 16, 1, 1, 0, 3, {999, 2}, 0.0f, IO::kBf16, 0, false, 12},        // GQA 16, page 1, 3 splits
      // 3 + 3 and 4 + 4 bits at head_dim 64 / 128: the same kernel with one set of pair tables per stage
      // (the 3 + 3 d128 and 4 + 4 d64 cases above too)
      {R, 128, 4, 4, 12, 2, 64, 0, 1, {2049, 17}, 5.0f, IO::kBf16},   // one split, soft-cap, page 64
      {R, 64, 3, 3, 16, 1, 16, 0, 3, {777, 64}},                      // GQA 16, 3 splits
      {R, 128, 3, 3, 8, 8, 8, 0, 0, {300, 65}},                       // GQA 1, page 8 (cp.async rows)
      {R, 128, 3, 3, 20, 4, 16, 200, 0, {1000, 3}, 0.0f, IO::kF32, 0, true},  // GQA 5, window, shared tables
      {R, 64, 4, 4, 6, 1, 32, 0, 0, {400}, 0.0f, IO::kF16, 0, true},          // GQA 6, shared tables
      {P, 128, 2, 4, 32, 8, 16, 0, 0, {1, 31, 1000}},
      {P, 64, 3, 1, 6, 1, 2, 0, 5, {257, 2}},
      {P, 256, 1, 2, 5, 1, 64, 0, 0, {4097}, 5.0f},
      {P, 128, 4, 3, 10, 2, 128, 37, 0, {999, 64}, 0.0f, IO::kBf16},
      // The same width on both sides at head_dim 64 / 128: kernel 0 is the fp16 kernel with per-sub-vector
      // tables (the first is the control)
      {P, 128, 4, 4, 32, 8, 16, 0, 0, {1, 31, 1000}},               // GQA 4, pages of 16 (bulk copies)
      {P, 64, 2, 2, 4, 2, 16, 0, 0, {200, 3}},                      // GQA 2
      {P, 128, 2, 2, 32, 8, 16, 0, 0, {1, 31, 1000}},
      {P, 128, 1, 1, 32, 8, 32, 0, 2, {1000, 64}, 0.0f, IO::kF16},  // page 32, 2 splits
      {P, 64, 1, 1, 9, 3, 1, 100, 0, {500, 2}},                     // GQA 3, page 1, window
      {P, 128, 2, 2, 12, 1, 8, 0, 1, {333}, 3.0f},                  // GQA 12, page 8, one split, soft-cap
      {P, 64, 2, 2, 5, 1, 16, 0, 0, {4097, 65}, 0.0f, IO::kBf16, 0, true},  // GQA 5, shared tables
      {P, 128, 1, 1, 16, 2, 64, 0, 0, {129, 2}, 0.0f, IO::kF32, 0, true},   // GQA 8, page 64, shared
      {P, 128, 3, 3, 32, 8, 16, 0, 0, {1000, 17}},                  // 3 bits: 6-bit codes
      {P, 64, 3, 3, 6, 1, 4, 0, 3, {300, 1}, 0.0f, IO::kF16},       // GQA 6, page 4, 3 splits
      {P, 128, 3, 3, 4, 4, 16, 0, 0, {65}, 0.0f, IO::kF32, 0, true},  // GQA 1, shared
      {P, 64, 4, 4, 9, 3, 1, 0, 0, {1000, 65}},                     // GQA 3, page 1 (per-row copies)
      {P, 128, 4, 4, 24, 2, 32, 0, 3, {999, 1}, 0.0f, IO::kF16},    // GQA 12, page 32, 3 splits
      {P, 128, 4, 4, 4, 1, 64, 300, 0, {2049, 2}, 5.0f},            // page 64, window, soft-cap
      {P, 64, 4, 4, 7, 1, 16, 0, 1, {130, 64, 17}, 0.0f, IO::kBf16},  // GQA 7, one split
      {P, 128, 4, 4, 8, 8, 8, 0, 0, {300, 17}},                     // GQA 1, page 8 (cp.async rows)
      {P, 128, 4, 4, 16, 1, 16, 0, 0, {4097, 5}},                   // GQA 16
      {P, 64, 4, 4, 6, 2, 4, 40, 0, {513, 64}, 0.0f, IO::kF32, 0, true},  // shared tables, page 4, window
      {P, 128, 4, 4, 10, 2, 16, 0, 0, {777}, 0.0f, IO::kF32, 0, true},    // GQA 5, shared tables
      {P, 256, 4, 4, 4, 1, 16, 0, 0, {500}},                        // head_dim 256: the look-up-table kernel
      // 3 bits at head_dim 256: the fp16 kernel (2 x 32 KB of tables, 8 warps)
      {P, 256, 3, 3, 4, 1, 16, 0, 0, {4097, 33}},                   // GQA 4, pages of 16 (bulk copies)
      {P, 256, 3, 3, 8, 1, 1, 100, 0, {700, 2}, 0.0f, IO::kF16},    // GQA 8, page 1, window
      {P, 256, 3, 3, 10, 2, 64, 0, 1, {2049, 65}, 5.0f},            // GQA 5, page 64, one split, soft-cap
      {P, 256, 3, 3, 3, 3, 32, 0, 3, {999, 1}, 0.0f, IO::kBf16, 0, true},  // GQA 1, 3 splits, shared tables
      {Q, 128, 3, 2, 32, 8, 16, 0, 0, {1, 2, 31, 1000}},
      {Q, 64, 2, 4, 12, 4, 1, 0, 2, {65, 64}},
      {Q, 256, 4, 3, 16, 2, 256, 0, 0, {4097, 1}, 0.0f, IO::kF16},
      {Q, 128, 2, 2, 14, 2, 8, 100, 0, {1000}, 3.0f},
      {Q, 256, 3, 3, 2, 1, 32, 0, 0, {333, 64}},   // GQA 2
      {Q, 64, 3, 3, 24, 2, 8, 0, 0, {130, 7}},     // GQA 12 (two blocks of query heads, the second partial)
      // Equal widths at head_dim 128 / 256: kernel 0's compile-time-width instances (PolarFmt<B>, one radius
      // group per lane)
      {Q, 128, 3, 3, 32, 8, 16, 0, 0, {1, 31, 1000}},                  // GQA 4, pages of 16
      {Q, 128, 4, 4, 12, 1, 1, 200, 3, {777, 2}, 0.0f, IO::kBf16},     // GQA 12, page 1, window, 3 splits
      {Q, 256, 2, 2, 8, 1, 64, 0, 1, {2049, 65}, 4.0f, IO::kF16},      // GQA 8, page 64, one split, soft-cap
  };
  // [kernel][rvq, pvq (look-up-table kernel), polar, pvq fp16, rvq two-part]
  double worst[2][5] = {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
  for (int kernel : {0, 1}) {
    bool controlled[5] = {false, false, false, false, false};
    for (std::size_t i = 0; i < cases.size(); ++i) {
      DecodeCase c = cases[i];
      c.kernel = kernel;
      const int mi = pvq_h16(c) ? 3 : rvq2_h16(c) ? 4 : c.method == R ? 0 : c.method == P ? 1 : 2;
      // The first case of each method and kernel (a 1000-token sequence, pages of 16)
      const bool control = !controlled[mi];
      controlled[mi] = true;
      worst[kernel][mi] = std::max(worst[kernel][mi], run_decode_case(c, seed + 31 * i, control));
    }
  }
  std::printf("[ measured ] paged decode worst relative L2 error, kernel 0 (fp16 tensor cores): rvq %.3g (two-part "
              "3+3 / 4+4: %.3g), polar %.3g, pvq one width d64/128 %.3g (tolerance %.0e + io); pvq's other cases "
              "(look-up-table kernel) %.3g (tolerance %.0e + io)\n",
              worst[0][0], worst[0][4], worst[0][2], worst[0][3], kStagedH16RelTol, worst[0][1], kPagedRelTol);
  std::printf("[ measured ] paged decode worst relative L2 error, kernel 1 (CUDA cores): rvq %.3g, pvq %.3g, polar %.3g "
              "(tolerance %.0e + io)\n",
              worst[1][0], worst[1][1], worst[1][2], kPagedRelTol);
}

// head_dim a multiple of 16 that is not a power of two (80, 96, 112, 160, 192, 240): the reference rotates by
// its dense Haar matrix, and so do the GPU appends (bytes identical) and decodes (the query rotated by Pi, the
// merge by Pi^T; kernel 0: for RVQ at equal widths 2..4 and head_dim 80 / 96 / 112 the TurboQuant fp16 kernel,
// for RVQ's other cases and PolarQuant the staged fp16 kernel, for product VQ the look-up-table kernel; kernel 1
// the CUDA-core kernel). Which route kernel 0 took is not visible to the test (both fp16 routes have the same
// tolerance); the bench's times show it. The first decode case of each method is its
// control (a wrong page-table entry must leave the tolerance).
TEST(CudaVqPaged, DenseHeadDimsMatchReference) {
  const std::uint64_t seed = fresh_seed();
  using IO = cuda::IoType;
  int i = 0;
  for (Method m : {Method::kRvq, Method::kPvq, Method::kPolar})
    for (int d : {80, 96, 112, 160, 192, 240}) {
      const int b0 = m == Method::kPolar ? 2 : 1;
      for (int bits = b0; bits <= 4; ++bits) {
        if ((bits + d / 16) % 2 == 1 && bits != 4) continue;  // about half the widths per head_dim, 4 bits at all
        const int ps = (bits + d / 16) % 3 == 0 ? 1 : (bits % 2 ? 16 : 64);
        const IO io = (bits + d / 16) % 3 == 1 ? IO::kF16 : (bits + d / 16) % 3 == 2 ? IO::kBf16 : IO::kF32;
        run_append_case({m, d, bits, ps, (bits % 2) == 0, io}, seed + ++i);
      }
    }
  const Method R = Method::kRvq, P = Method::kPvq, Q = Method::kPolar;
  const std::vector<DecodeCase> cases = {
      {R, 96, 2, 2, 32, 8, 16, 0, 0, {1, 2, 31, 1000}},  // the RVQ control
      // 2 + 2 bits at 80 / 112 too: kernel 0 is the TurboQuant fp16 kernel there (H16Layout::RVQ, bit spans)
      {R, 80, 2, 2, 20, 4, 16, 0, 0, {1, 63, 2049}, 0.0f, IO::kBf16},  // GQA 5
      {R, 112, 2, 2, 12, 2, 1, 200, 3, {65, 777}, 4.0f},  // GQA 6, page 1, window, soft-cap, 3 splits
      {R, 80, 2, 2, 16, 1, 64, 0, 1, {4097, 3}, 0.0f, IO::kF16, 0, true},  // GQA 16, one split, shared
      // 3 + 3 and 4 + 4 bits at 80 / 96 / 112: kernel 0 is the same kernel's two-part layout (H16Layout::RVQ2;
      // spans of fractional bytes through bit spans)
      {R, 80, 3, 3, 32, 8, 16, 0, 0, {1, 31, 1000}},
      {R, 96, 3, 3, 6, 1, 1, 0, 2, {257, 64}, 0.0f, IO::kF16},  // GQA 6, page 1, 2 splits
      {R, 112, 3, 3, 10, 2, 64, 300, 0, {2049, 5}, 3.0f, IO::kBf16, 0, true},  // GQA 5, window, soft-cap, shared
      {R, 96, 4, 4, 32, 8, 16, 0, 0, {1, 31, 1000}},
      {R, 80, 4, 4, 14, 2, 1, 0, 2, {257, 64}, 0.0f, IO::kBf16},  // GQA 7, page 1, 2 splits
      {R, 112, 4, 4, 8, 1, 32, 500, 0, {3000, 2}, 2.0f, IO::kF16, 0, true},  // GQA 8, window, soft-cap, shared
      {R, 80, 4, 3, 10, 2, 1, 0, 3, {257, 64}, 0.0f, IO::kF16},  // GQA 5, page 1, 3 splits
      {R, 112, 1, 4, 16, 1, 64, 300, 0, {2049, 5}, 5.0f},  // GQA 16, window, soft-cap
      {R, 240, 3, 3, 6, 3, 16, 0, 1, {999, 65}, 0.0f, IO::kBf16, 0, true},  // GQA 2, one split, shared
      {R, 160, 4, 4, 7, 1, 32, 0, 0, {4097}},  // GQA 7
      {P, 96, 2, 4, 32, 8, 16, 0, 0, {1, 31, 1000}},  // the product-VQ control
      {P, 112, 4, 4, 12, 4, 8, 0, 0, {300, 17}, 0.0f, IO::kF16, 0, true},  // GQA 3, shared
      {P, 80, 3, 1, 6, 1, 64, 37, 2, {999, 64}, 3.0f},  // GQA 6, window, soft-cap, 2 splits
      {P, 192, 1, 2, 16, 2, 16, 0, 0, {4097, 1}, 0.0f, IO::kBf16},  // GQA 8
      {Q, 96, 3, 2, 32, 8, 16, 0, 0, {1, 2, 31, 1000}},  // the PolarQuant control
      {Q, 80, 2, 4, 12, 4, 1, 0, 2, {65, 64}},  // GQA 3, page 1
      {Q, 112, 4, 3, 16, 1, 256, 0, 0, {4097, 1}, 0.0f, IO::kF16},  // GQA 16, page 256
      {Q, 240, 2, 2, 14, 2, 8, 100, 0, {1000}, 3.0f},  // GQA 7, window, soft-cap
      // Equal widths: PolarFmt<B> at kernel 0; kernel 1 stages runs of 2 quads at 160, single quads at 80
      {Q, 160, 4, 4, 10, 2, 16, 0, 2, {999, 64}, 0.0f, IO::kF16},  // GQA 5, 2 splits
      {Q, 80, 3, 3, 6, 6, 32, 0, 0, {300, 17}},  // GQA 1
  };
  double worst[2][3] = {{0, 0, 0}, {0, 0, 0}};
  for (int kernel : {0, 1}) {
    bool controlled[3] = {false, false, false};
    for (std::size_t k = 0; k < cases.size(); ++k) {
      DecodeCase c = cases[k];
      c.kernel = kernel;
      const int mi = c.method == R ? 0 : c.method == P ? 1 : 2;
      const bool control = !controlled[mi];
      controlled[mi] = true;
      worst[kernel][mi] = std::max(worst[kernel][mi], run_decode_case(c, seed + 1000 + 31 * k, control));
    }
  }
  std::printf("[ measured ] dense head_dims, paged decode worst relative L2 error (rvq / pvq / polar): kernel 0 "
              "%.3g / %.3g / %.3g (tolerance %.0e + io; product VQ %.0e + io), kernel 1 %.3g / %.3g / %.3g "
              "(tolerance %.0e + io)\n",
              worst[0][0], worst[0][1], worst[0][2], kStagedH16RelTol, kPagedRelTol, worst[1][0], worst[1][1],
              worst[1][2], kPagedRelTol);
}

// 2 + 2-bit RVQ at head_dim 256, kernel 0: block_warps 12 and 8 must both match the reference and differ from
// each other over 2,000 tokens (other warp token ranges and split counts: other fp32 rounding): the 12-warp
// instance ran.
TEST(CudaVqPaged, RvqBlockWarpsRunTheirOwnInstance) {
  if (kSmall) GTEST_SKIP() << "TURBOKV_CUDA_TEST_SMALL: 130 tokens give both warp counts the same token ranges";
  if (const char* e = std::getenv("TURBOKV_RVQ_H16"); e && std::string(e) == "0")
    GTEST_SKIP() << "TURBOKV_RVQ_H16=0: the staged kernel ignores block_warps";
  const std::uint64_t seed = fresh_seed();
  DecodeCase c{Method::kRvq, 256, 2, 2, 4, 1, 16, 0, 0, {2000, 1500}};
  c.block_warps = 8;
  std::vector<float> out8, out12;
  run_decode_case(c, seed, false, &out8);
  c.block_warps = 12;
  run_decode_case(c, seed, false, &out12);
  ASSERT_EQ(out8.size(), out12.size());
  EXPECT_NE(std::memcmp(out8.data(), out12.data(), out8.size() * sizeof(float)), 0)
      << "block_warps 12 and 8 gave identical outputs: 12 must run its own instance";
}

TEST(CudaVqPaged, RejectsBadArguments) {
  const Codecs rvq = make_codecs(Method::kRvq, 128, 2, 2, 1), polar = make_codecs(Method::kPolar, 128, 3, 3, 1),
               pvq = make_codecs(Method::kPvq, 128, 2, 2, 1);
  const cuda::RvqTables& rt = *rvq.krvq;
  DevBuf<std::uint8_t> pool(1 << 16), ws(1 << 16);
  DevBuf<std::int32_t> pages(std::vector<std::int32_t>{0, 1}), lens(std::vector<std::int32_t>{1});
  DevBuf<float> q(128 * 8), out(128 * 8), x(128 * 64);
  const cuda::PageTable pt{pages.p, 2, 16};
  const std::size_t rs = rt.page_stride(16);
  EXPECT_EQ(rs, (16 * (rt.code_bytes() + 2) + 31) / 32 * 32);
  expect_invalid([&] { rt.page_stride(12); }, "page_size");
  expect_invalid([&] { cuda::rvq_append(rt, x.p, 1, 4, 1, lens.p, pt, {pool.p, rs + 32}, nullptr); }, "pool.page_stride");
  expect_invalid([&] { cuda::rvq_append(rt, nullptr, 1, 4, 1, lens.p, pt, {pool.p, rs}, nullptr); }, "pointers");
  expect_invalid([&] { cuda::rvq_append(rt, x.p, 1, 4, 0, lens.p, pt, {pool.p, rs}, nullptr); }, "num_kv_heads");
  expect_invalid(
      [&] { cuda::rvq_append(rt, x.p, 1, 4, 1, lens.p, pt, {pool.p, rs}, nullptr, static_cast<cuda::IoType>(7)); },
      "x_type");
  EXPECT_NO_THROW(cuda::rvq_append(rt, nullptr, 0, 4, 1, nullptr, pt, {pool.p, rs}, nullptr));  // no work
  const cuda::PolarTables& qt = *polar.kpolar;
  expect_invalid([&] { cuda::polar_append(qt, x.p, 1, 4, 1, lens.p, pt, {pool.p, rs}, nullptr); }, "pool.page_stride");
  cuda::DecodeArgs a;
  a.batch = 1, a.num_heads = 8, a.num_kv_heads = 2, a.head_dim = 128, a.q = q.p, a.out = out.p;
  a.seq_lens = lens.p, a.max_seq_len = 1, a.softmax_scale = 0.1f, a.workspace = ws.p;
  const std::size_t vs = rvq.vrvq->page_stride(16);
  expect_invalid([&] { cuda::rvq_paged_decode(rt, *rvq.vrvq, {pool.p, rs + 32}, {pool.p, vs}, pt, a, nullptr); },
                 "kpool.page_stride");
  expect_invalid([&] { cuda::rvq_paged_decode(rt, *rvq.vrvq, {pool.p, rs}, {pool.p, vs + 32}, pt, a, nullptr); },
                 "vpool.page_stride");
  a.kernel = 2;
  expect_invalid([&] { cuda::rvq_paged_decode(rt, *rvq.vrvq, {pool.p, rs}, {pool.p, vs}, pt, a, nullptr); }, "kernel");
  a.kernel = 0;
  a.head_dim = 64;
  expect_invalid([&] { cuda::rvq_paged_decode(rt, *rvq.vrvq, {pool.p, rs}, {pool.p, vs}, pt, a, nullptr); }, "head_dim");
  a.head_dim = 128;
  a.num_heads = 7;
  expect_invalid([&] { cuda::rvq_paged_decode(rt, *rvq.vrvq, {pool.p, rs}, {pool.p, vs}, pt, a, nullptr); },
                 "num_heads");
  a.num_heads = 8;
  a.max_seq_len = 64;  // 2 pages of 16 do not cover it
  expect_invalid([&] { cuda::rvq_paged_decode(rt, *rvq.vrvq, {pool.p, rs}, {pool.p, vs}, pt, a, nullptr); },
                 "max_pages");
  a.max_seq_len = 1;
  const std::size_t qs = polar.kpolar->page_stride(16), qvs = polar.vpolar->page_stride(16);
  expect_invalid([&] { cuda::polar_paged_decode(*polar.kpolar, *polar.vpolar, {pool.p, qs}, {pool.p, qvs},
                                                {pages.p, 2, 3}, a, nullptr); },
                 "page_size");
  a.softmax_scale = 0;
  expect_invalid([&] { cuda::polar_paged_decode(*polar.kpolar, *polar.vpolar, {pool.p, qs}, {pool.p, qvs}, pt, a,
                                                nullptr); },
                 "softmax_scale");
  expect_invalid([&] { cuda::pvq_paged_decode_workspace_bytes(a, *pvq.kpvq); }, "softmax_scale");
  a.softmax_scale = 0.1f;
  // Product VQ's workspace: the decode's, then one look-up table per query head.
  const std::size_t base = (cuda::decode_workspace_bytes(a) + 15) / 16 * 16;
  EXPECT_EQ(cuda::pvq_paged_decode_workspace_bytes(a, *pvq.kpvq),
            base + sizeof(float) * pvq.kpvq->lut_size() * a.batch * a.num_heads);
  TKV_TEST_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace turbokv::test

int main(int argc, char** argv) { return turbokv::test::cuda_test_main(argc, argv, "test_cuda_vq_paged"); }
