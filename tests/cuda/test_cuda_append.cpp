// GPU append (fused Hadamard + quantize + pack into pages) vs the reference
// TurboQuant-MSE codec: every token's code bytes and fp16 norm(s) identical, at
// integer widths and at the fractional widths (outlier split, calibrated).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "turbokv/half.h"
#include "turbokv/codec.h"
#include "turbokv/cuda_kivi.h"
#include "turbokv/cuda_polar.h"
#include "turbokv/cuda_vq.h"

namespace turbokv::test {
namespace {

struct AppendCase {
  int head_dim;
  double bits;  ///< 1..4, or 1.5 / 2.5 / 3.5 (the reference is calibrated first)
  int page_size;
  int prefill = 21;
  cuda::IoType io = cuda::IoType::kF32;  ///< type of the appended vectors
  /// One prefill vector (sequence 1, token 2, KV head 1) made bad: 0 none, 1 a NaN, 2 an Inf, 3 finite
  /// with norm 40000 (>= 32768: the reference rejects it), 4 finite with norm 30000 (accepted).
  int bad = 0;
};

constexpr int kBadB = 1, kBadJ = 2, kBadG = 1;

void run_case(const AppendCase& c, std::uint64_t seed) {
  const int batch = 3, kvh = 3, d = c.head_dim;  // kvh 3: the kernel's index divisions by a non-power of two
  const std::vector<int> start = {0, 5, 33};
  const int prefill = c.prefill, capacity = 33 + prefill + 1;
  const int max_pages = (capacity + c.page_size - 1) / c.page_size;
  CodecConfig cfg;
  cfg.method = Method::kTurboMse;
  cfg.bits = c.bits;
  cfg.head_dim = d;
  cfg.seed = seed ^ 0x55aa;
  const auto ref = make_codec(cfg);
  Rng r(seed);
  if (ref->needs_calibration()) {  // fractional: the outlier channels from rows like the appended ones
    const auto cal = awkward_rows(64, d, r);
    ref->calibrate(cal.data(), 64);
  }
  const cuda::TqMseTables tab(*ref);
  const std::size_t cb = tab.code_bytes(), nb = 2 * static_cast<std::size_t>(tab.num_norms());
  const std::size_t stride = tab.page_stride(c.page_size);
  if (!tab.split()) {
    EXPECT_EQ(stride, cuda::tq_page_stride(c.page_size, cb));
  }

  const auto table = permutation(static_cast<std::size_t>(batch) * max_pages, seed + 1);
  DevBuf<std::int32_t> dtable(table);
  DevBuf<std::uint8_t> pool(static_cast<std::size_t>(batch) * max_pages * kvh * stride);
  pool.fill_byte(0xA5);
  const cuda::PageTable pt{dtable.p, max_pages, c.page_size};
  const cuda::PagedPool pp{pool.p, stride};

  // Prefill chunk of `prefill` tokens, then one decode token.
  auto x1 = awkward_rows(static_cast<std::size_t>(batch) * prefill * kvh, d, r);
  auto x2 = awkward_rows(static_cast<std::size_t>(batch) * 1 * kvh, d, r);
  const bool rejected = c.bad >= 1 && c.bad <= 3;  // the reference throws on that vector
  if (c.bad) {
    float* v = &x1[((static_cast<std::size_t>(kBadB) * prefill + kBadJ) * kvh + kBadG) * d];
    // Fractional widths: the NaN in a channel of part 0 (only the first launch sees it: the second must
    // catch it through the first part's stored norm), the Inf in one of part 1.
    int nan_at = d / 3, inf_at = d - 1;
    if (tab.split()) {
      std::vector<std::int32_t> ch(d);
      TKV_TEST_CUDA(cudaMemcpy(ch.data(), tab.channels(), d * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
      nan_at = ch[0], inf_at = ch[d / 2];
    }
    if (c.bad == 1) v[nan_at] = std::nanf("");
    if (c.bad == 2) v[inf_at] = -INFINITY;
    if (c.bad >= 3) {  // a fixed nonzero direction (the chosen row may be one of the zero rows)
      double s = 0;
      for (int i = 0; i < d; ++i) v[i] = static_cast<float>(1 + i % 7), s += double(v[i]) * v[i];
      const double want = c.bad == 3 ? 40000.0 : 30000.0;
      for (int i = 0; i < d; ++i) v[i] = static_cast<float>(v[i] * (want / std::sqrt(s)));
    }
  }
  const bool io16 = c.io != cuda::IoType::kF32;
  std::vector<std::uint16_t> h1, h2;
  if (io16) h1 = round_to_io(x1, c.io), h2 = round_to_io(x2, c.io);
  DevBuf<float> dx1(x1), dx2(x2);
  DevBuf<std::uint16_t> dh1(h1), dh2(h2);
  DevBuf<std::int32_t> dstart1(std::vector<std::int32_t>(start.begin(), start.end()));
  std::vector<std::int32_t> s2(start.begin(), start.end());
  for (auto& s : s2) s += prefill;
  DevBuf<std::int32_t> dstart2(s2);
  // The bad-vector flag of each call (zeroed here; nonzero after the call: some vector rejected).
  DevBuf<std::int32_t> flag1(std::vector<std::int32_t>{0}), flag2(std::vector<std::int32_t>{0});
  if (io16) {
    cuda::tq_mse_append(tab, dh1.p, batch, prefill, kvh, dstart1.p, pt, pp, nullptr, c.io, flag1.p);
    cuda::tq_mse_append(tab, dh2.p, batch, 1, kvh, dstart2.p, pt, pp, nullptr, c.io, flag2.p);
  } else {
    cuda::tq_mse_append(tab, dx1.p, batch, prefill, kvh, dstart1.p, pt, pp, nullptr, cuda::IoType::kF32, flag1.p);
    cuda::tq_mse_append(tab, dx2.p, batch, 1, kvh, dstart2.p, pt, pp, nullptr, cuda::IoType::kF32, flag2.p);
  }
  const auto got = pool.download();
  EXPECT_EQ(flag1.download()[0], rejected ? 1 : 0) << "prefill call's flag, bad = " << c.bad;
  EXPECT_EQ(flag2.download()[0], 0) << "decode call's flag";

  std::vector<float> row(d);
  std::vector<std::uint8_t> enc(ref->encoded_bytes(1));
  std::vector<bool> written(got.size(), false);
  int mismatches = 0;
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j <= prefill; ++j)
      for (int g = 0; g < kvh; ++g) {
        const float* src = j < prefill ? &x1[((static_cast<std::size_t>(b) * prefill + j) * kvh + g) * d]
                                       : &x2[(static_cast<std::size_t>(b) * kvh + g) * d];
        const bool skip = rejected && b == kBadB && j == kBadJ && g == kBadG;
        if (skip) {
          EXPECT_THROW(ref->encode(src, 1, enc.data()), std::invalid_argument);  // the reference rejects it too
        } else {
          ref->encode(src, 1, enc.data());
        }
        const int pos = start[b] + j;
        const int page = table[static_cast<std::size_t>(b) * max_pages + pos / c.page_size];
        const int off = pos % c.page_size;
        const std::size_t bo = (static_cast<std::size_t>(page) * kvh + g) * stride;
        const std::uint8_t* blk = got.data() + bo;
        std::fill_n(written.begin() + bo + off * cb, cb, true);
        std::fill_n(written.begin() + bo + c.page_size * cb + nb * off, nb, true);
        if (skip) continue;  // its bytes are meaningless (the flag says so); every other vector's must match
        const bool codes_ok = std::memcmp(blk + off * cb, enc.data(), cb) == 0;
        const bool norm_ok = std::memcmp(blk + c.page_size * cb + nb * off, enc.data() + cb, nb) == 0;
        if ((!codes_ok || !norm_ok) && ++mismatches <= 3)
          ADD_FAILURE() << "b=" << b << " token=" << pos << " head=" << g << " codes_ok=" << codes_ok
                        << " norm_ok=" << norm_ok;
      }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(count_stray_bytes(got, written, 0xA5), 0);
}

TEST(CudaAppend, BytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {64, 128, 256})
    for (int bits = 1; bits <= 4; ++bits)
      for (int ps : {1, 16, 64}) {
        SCOPED_TRACE("head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " page_size=" +
                     std::to_string(ps) + " seed=" + std::to_string(seed));
        run_case({d, double(bits), ps}, seed + d * 31 + bits * 7 + ps);
      }
}

// Many tokens per case (every code value and many near-boundary coordinates):
// the centroid-index table of the kernel must agree with the reference count.
TEST(CudaAppend, ManyTokensMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {64, 128, 256})
    for (int bits = 1; bits <= 4; ++bits) {
      SCOPED_TRACE("head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " seed=" + std::to_string(seed));
      run_case({d, double(bits), 16, 1500}, seed + d * 131 + bits * 17);
    }
}

// More vectors than the grid holds groups (132 SMs x 4 blocks x 256 / T threads: 16,896 at head_dim
// 128, 8,448 at 256), so every group encodes several: at fp32 the staged path's next-vector bulk copy
// into the group's stage and its mbarrier phases (append.cu, "Staged input").
TEST(CudaAppend, GroupsLoopOverManyVectors) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {128, 256})
    for (int bits : {3, 4}) {
      SCOPED_TRACE("head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " seed=" + std::to_string(seed));
      run_case({d, double(bits), 16, 2501}, seed + d * 11 + bits);  // 22,509 vectors: a partial last warp
    }
}

// The Hadamard kernel reads x in 16-byte units: a pointer off that alignment is rejected by name.
TEST(CudaAppend, RejectsMisalignedInput) {
  CodecConfig cfg;
  cfg.head_dim = 128;
  cfg.bits = 4;
  const auto ref = make_codec(cfg);
  const cuda::TqMseTables tab(*ref);
  const int ps = 16;
  DevBuf<std::int32_t> dtable(std::vector<std::int32_t>{0});
  DevBuf<std::uint8_t> pool(tab.page_stride(ps));
  pool.fill_byte(0xA5);
  DevBuf<float> x(std::vector<float>(2 * 128, 1.0f));
  DevBuf<std::int32_t> dstart(std::vector<std::int32_t>{0});
  const cuda::PageTable pt{dtable.p, 1, ps};
  const cuda::PagedPool pp{pool.p, tab.page_stride(ps)};
  try {
    cuda::tq_mse_append(tab, x.p + 1, 1, 1, 1, dstart.p, pt, pp, nullptr);
    ADD_FAILURE() << "misaligned x accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("x"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
  const auto got = pool.download();
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](std::uint8_t b) { return b == 0xA5; }));  // pool unchanged
  cuda::tq_mse_append(tab, x.p, 1, 1, 1, dstart.p, pt, pp, nullptr);  // the aligned pointer is accepted
  const auto after = pool.download();
  EXPECT_FALSE(std::all_of(after.begin(), after.end(), [](std::uint8_t b) { return b == 0xA5; }));
}

// fp16 / bf16 input: the bytes of the reference encoding the widened values.
TEST(CudaAppend, SixteenBitInputMatchesReference) {
  const std::uint64_t seed = fresh_seed();
  for (cuda::IoType io : {cuda::IoType::kF16, cuda::IoType::kBf16})
    for (int d : {64, 128, 256})
      for (int bits : {1, 3, 4}) {
        SCOPED_TRACE("io=" + std::to_string(static_cast<int>(io)) + " head_dim=" + std::to_string(d) +
                     " bits=" + std::to_string(bits) + " seed=" + std::to_string(seed));
        run_case({d, double(bits), 16, 300, io}, seed + d * 7 + bits);
      }
}

// Fractional widths: two parts (outlier channels at b + 1 bits, the rest at b), each from its
// gathered channels with its own rotation, codebook and norm.
TEST(CudaAppend, FractionalBytesMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {128, 256})
    for (double bits : {1.5, 2.5, 3.5})
      for (int ps : {1, 16}) {
        SCOPED_TRACE("head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " page_size=" +
                     std::to_string(ps) + " seed=" + std::to_string(seed));
        run_case({d, bits, ps, 300}, seed + d * 13 + static_cast<int>(bits * 10) + ps);
      }
  for (cuda::IoType io : {cuda::IoType::kF16, cuda::IoType::kBf16}) {
    SCOPED_TRACE("io=" + std::to_string(static_cast<int>(io)) + " seed=" + std::to_string(seed));
    run_case({128, 3.5, 16, 100, io}, seed + 77);
  }
}

// head_dim not a power of two: the reference's dense Haar rotation (d^2 products and sums, each
// rounded on its own, in ascending j), then the same norm / quantize / pack as the Hadamard kernel.
// Row sizes of 2 mod 4 bytes (80 and 112 at 1 and 3 bits) and page size 1 and 2 included.
TEST(CudaAppend, DenseHeadDimsMatchReference) {
  const std::uint64_t seed = fresh_seed();
  for (int d : {80, 96, 112, 240})
    for (int bits = 1; bits <= 4; ++bits)
      for (int ps : {1, 2, 16}) {
        SCOPED_TRACE("head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " page_size=" +
                     std::to_string(ps) + " seed=" + std::to_string(seed));
        run_case({d, double(bits), ps}, seed + d * 31 + bits * 7 + ps);
      }
  for (int bits : {3, 4}) {  // many tokens: every code value, near-boundary coordinates
    SCOPED_TRACE("head_dim=96 bits=" + std::to_string(bits) + " many tokens, seed=" + std::to_string(seed));
    run_case({96, double(bits), 16, 1000}, seed + 991 + bits);
  }
  for (cuda::IoType io : {cuda::IoType::kF16, cuda::IoType::kBf16}) {
    SCOPED_TRACE("io=" + std::to_string(static_cast<int>(io)) + " head_dim=112 seed=" + std::to_string(seed));
    run_case({112, 3.0, 16, 100, io}, seed + 555);
  }
}

// The optional flag of tq_mse_append: a NaN, an Inf or a norm >= 32768 in one vector of a prefill sets it
// (the reference throws on that vector) and leaves every other vector's bytes exact; a norm of 30000
// does not set it. Every kernel: Hadamard at head_dim 64 / 128 / 256 (fp32 staged and not, 16-bit
// input), the fractional parts (parts of 64 and 128 channels; a NaN in part 0 is caught by the second
// launch through the stored norm), the dense rotation. (run_case also checks the flag stays 0 on the
// clean inputs of every other test.)
TEST(CudaAppend, FlagsNonFiniteAndOversizedVectors) {
  const std::uint64_t seed = fresh_seed();
  for (int bad = 1; bad <= 4; ++bad) {
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE("bad=" + std::to_string(bad) + " head_dim=" + std::to_string(d) + " seed=" + std::to_string(seed));
      run_case({d, 3.0, 16, 40, cuda::IoType::kF32, bad}, seed + d * 5 + bad);
      run_case({d, 4.0, 16, 40, cuda::IoType::kF16, bad}, seed + d * 9 + bad);
    }
    SCOPED_TRACE("bad=" + std::to_string(bad) + " seed=" + std::to_string(seed));
    run_case({128, 2.5, 16, 40, cuda::IoType::kBf16, bad}, seed + 3 + bad);
    run_case({256, 3.5, 16, 40, cuda::IoType::kF32, bad}, seed + 5 + bad);
    run_case({96, 3.0, 16, 40, cuda::IoType::kF32, bad}, seed + 7 + bad);
  }
}

/// The other appends' `bad` flag (fp8, RVQ, product VQ, PolarQuant, KIVI keys and values) against the
/// reference's input check itself: the flag is set exactly when Codec::encode throws on some (sequence,
/// KV head) block of the call's input. Inputs: clean, one NaN, one -Inf, one vector of norm 40000 (over
/// 32768), one of norm 30000 (accepted), and for KIVI a 1-bit group whose scale is 40000 while every
/// vector's norm is about 28000 (rejected at 1 bit, accepted at 2; keys: in the second of two 16-token
/// groups). fp32 and bf16 input; 32 new tokens over two pages of 16 per sequence.
TEST(CudaAppend, OtherAppendsFlagWhatTheReferenceRejects) {
  const std::uint64_t seed = fresh_seed();
  const int d = 64, batch = 2, num_new = 32, kvh = 2, page = 16, max_pages = 2;
  struct M {
    Method m;
    double bits;
    Role role;
    int group;
  };
  const std::vector<M> methods = {{Method::kFp8, 8, Role::kKey, 32},    {Method::kRvq, 2, Role::kKey, 32},
                                  {Method::kPvq, 2, Role::kKey, 32},    {Method::kPolar, 3, Role::kKey, 32},
                                  {Method::kKivi, 1, Role::kKey, 16},   {Method::kKivi, 1, Role::kValue, 32},
                                  {Method::kKivi, 2, Role::kKey, 16},   {Method::kKivi, 2, Role::kValue, 32}};
  const std::vector<std::int32_t> table = permutation(static_cast<std::size_t>(batch) * max_pages, seed);
  DevBuf<std::int32_t> dtable(table), dstart(std::vector<std::int32_t>(batch, 0));
  int flagged = 0, clean = 0;
  for (const M& mc : methods)
    for (cuda::IoType io : {cuda::IoType::kF32, cuda::IoType::kBf16})
      for (int kind = 0; kind < 6; ++kind) {
        if (kind == 5 && mc.m != Method::kKivi) continue;
        const std::uint64_t sd = seed + 131 * kind + 7 * static_cast<int>(mc.m) + 3 * static_cast<int>(mc.bits);
        SCOPED_TRACE(std::string(method_name(mc.m)) + " bits=" + std::to_string(mc.bits) +
                     (mc.role == Role::kKey ? " keys" : " values") + " io=" + std::to_string(static_cast<int>(io)) +
                     " input=" + std::to_string(kind) + " seed=" + std::to_string(sd));
        CodecConfig cfg;
        cfg.method = mc.m, cfg.bits = mc.bits, cfg.head_dim = d, cfg.role = mc.role, cfg.group_size = mc.group;
        cfg.seed = sd ^ 0x55, cfg.kmeans_iters = 3;
        const auto ref = make_codec(cfg);
        Rng r(sd);
        if (ref->needs_calibration()) {
          std::vector<float> cal(600 * d);
          for (auto& v : cal) v = static_cast<float>(r.normal());
          ref->calibrate(cal.data(), 600);
        }
        // x: [batch][num_new][kvh][d]
        std::vector<float> x(static_cast<std::size_t>(batch) * num_new * kvh * d);
        for (auto& v : x) v = static_cast<float>(r.normal());
        const int vb = static_cast<int>(r.uniform() * batch) % batch, vt = static_cast<int>(r.uniform() * num_new) % num_new,
                  vh = static_cast<int>(r.uniform() * kvh) % kvh, vj = static_cast<int>(r.uniform() * d) % d;
        float* row = &x[((static_cast<std::size_t>(vb) * num_new + vt) * kvh + vh) * d];
        auto scale_to = [&](float* v, double norm) {
          double s = 0;
          for (int j = 0; j < d; ++j) s += double(v[j]) * v[j];
          for (int j = 0; j < d; ++j) v[j] = static_cast<float>(v[j] * norm / std::sqrt(s));
        };
        if (kind == 1) row[vj] = NAN;
        if (kind == 2) row[vj] = -INFINITY;
        if (kind == 3) scale_to(row, 40000.0);
        if (kind == 4) scale_to(row, 30000.0);
        if (kind == 5) {  // KIVI: a group of scale 40000 / (2^b - 1), vectors of norm ~28000
          if (mc.role == Role::kKey) {  // channel vj of two tokens of the second key group (tokens 16..31)
            const int t1 = 16 + vt % 15;
            row = &x[((static_cast<std::size_t>(vb) * num_new + t1) * kvh + vh) * d];
            float* row2 = &x[((static_cast<std::size_t>(vb) * num_new + t1 + 1) * kvh + vh) * d];
            row[vj] = 20000.0f, row2[vj] = -20000.0f;
            for (float* v : {row, row2})
              for (int j = 0; j < d; ++j)
                if (j != vj) v[j] = static_cast<float>(r.normal()) * 2000.0f;
          } else {  // channels 0 and 1 of one token (one value group of 32 channels)
            row[0] = 20000.0f, row[1] = -20000.0f;
          }
        }
        // 16-bit input: round first, so the reference sees what the kernel widens (NaN / Inf stay)
        const std::vector<std::uint16_t> h = round_to_io(x, io);
        bool rejects = false;
        for (int b = 0; b < batch; ++b)
          for (int g = 0; g < kvh; ++g) {
            std::vector<float> blk(static_cast<std::size_t>(num_new) * d);
            for (int t = 0; t < num_new; ++t)
              std::memcpy(&blk[static_cast<std::size_t>(t) * d], &x[((static_cast<std::size_t>(b) * num_new + t) * kvh + g) * d],
                          sizeof(float) * d);
            std::vector<std::uint8_t> out(ref->encoded_bytes(num_new));
            try {
              ref->encode(blk.data(), num_new, out.data());
            } catch (const std::invalid_argument&) {
              rejects = true;
            }
          }
        if (kind == 0 || kind == 4) {
          EXPECT_FALSE(rejects) << "test input: the reference must accept it";
        }
        if (kind >= 1 && kind <= 3) {
          EXPECT_TRUE(rejects) << "test input: the reference must reject it";
        }
        DevBuf<float> dx(x);
        DevBuf<std::uint16_t> dh(h);
        const void* xin = io == cuda::IoType::kF32 ? static_cast<const void*>(dx.p) : dh.p;
        DevBuf<std::int32_t> dbad(std::vector<std::int32_t>{0});
        std::unique_ptr<cuda::RvqTables> rt;
        std::unique_ptr<cuda::PvqTables> pt;
        std::unique_ptr<cuda::PolarTables> qt;
        std::size_t stride = 0;
        if (mc.m == Method::kFp8) stride = cuda::tq_page_stride(page, d);
        if (mc.m == Method::kRvq) rt = std::make_unique<cuda::RvqTables>(cfg), stride = rt->page_stride(page);
        if (mc.m == Method::kPvq) pt = std::make_unique<cuda::PvqTables>(*ref), stride = pt->page_stride(page);
        if (mc.m == Method::kPolar) qt = std::make_unique<cuda::PolarTables>(cfg), stride = qt->page_stride(page);
        if (mc.m == Method::kKivi) stride = cuda::kivi_page_stride(cfg, page);
        DevBuf<std::uint8_t> pool(static_cast<std::size_t>(batch) * max_pages * kvh * stride);
        const cuda::PageTable ptab{dtable.p, max_pages, page};
        const cuda::PagedPool pp{pool.p, stride};
        if (mc.m == Method::kFp8) cuda::fp8_append(d, xin, batch, num_new, kvh, dstart.p, ptab, pp, nullptr, io, dbad.p);
        if (mc.m == Method::kRvq) cuda::rvq_append(*rt, xin, batch, num_new, kvh, dstart.p, ptab, pp, nullptr, io, dbad.p);
        if (mc.m == Method::kPvq) cuda::pvq_append(*pt, xin, batch, num_new, kvh, dstart.p, ptab, pp, nullptr, io, dbad.p);
        if (mc.m == Method::kPolar)
          cuda::polar_append(*qt, xin, batch, num_new, kvh, dstart.p, ptab, pp, nullptr, io, dbad.p);
        if (mc.m == Method::kKivi) cuda::kivi_append(cfg, xin, batch, num_new, kvh, dstart.p, ptab, pp, nullptr, io, dbad.p);
        const bool flag = dbad.download()[0] != 0;
        EXPECT_EQ(flag, rejects) << (rejects ? "the reference rejects this input, the flag is clear"
                                             : "the reference accepts this input, the flag is set");
        (rejects ? flagged : clean) += 1;
      }
  std::printf("other appends' bad-input flag: %d rejected inputs flagged, %d accepted inputs clear\n", flagged, clean);
  EXPECT_GT(flagged, 0);
  EXPECT_GT(clean, 0);
}

// ---------------------------------------------------------------- tq_mse_dequantize

/// Pages holding the reference's encode of awkward rows (or, random_bytes, uniform random code bytes and
/// finite random fp16 norms), 3 sequences x 3 KV heads in a shuffled page table; the
/// window [start_b, start_b + num_tokens) of each sequence dequantized into [batch][num_tokens][kvh][d]:
/// fp32 output equal to the reference decode of the same bytes bit for bit, fp16 / bf16 its nearest-even
/// rounding; every output written (the buffer starts as NaN bits). out_off: the output starts that many
/// elements into its buffer (1: not 16-byte aligned, the kernel's one-store-per-element path).
void run_dequant_case(int d, double bits, int page_size, int num_tokens, cuda::IoType io, bool random_bytes,
                      std::uint64_t seed, int out_off = 0) {
  SCOPED_TRACE("dequantize head_dim=" + std::to_string(d) + " bits=" + std::to_string(bits) + " page_size=" +
               std::to_string(page_size) + " num_tokens=" + std::to_string(num_tokens) + " io=" +
               std::to_string(static_cast<int>(io)) + " random_bytes=" + std::to_string(random_bytes) +
               " out_off=" + std::to_string(out_off) + " seed=" + std::to_string(seed));
  const int batch = 3, kvh = 3;
  const std::vector<std::int32_t> start = {0, 7, 40};
  const int cap = 40 + num_tokens, max_pages = (cap + page_size - 1) / page_size;
  CodecConfig cfg;
  cfg.method = Method::kTurboMse;
  cfg.bits = bits;
  cfg.head_dim = d;
  cfg.seed = seed ^ 0x3c3c;
  const auto ref = make_codec(cfg);
  Rng r(seed);
  if (ref->needs_calibration()) {
    const auto cal = awkward_rows(64, d, r);
    ref->calibrate(cal.data(), 64);
  }
  const cuda::TqMseTables tab(*ref);
  const std::size_t cb = tab.code_bytes(), nb = 2 * static_cast<std::size_t>(tab.num_norms());
  const std::size_t stride = tab.page_stride(page_size);
  const auto table = permutation(static_cast<std::size_t>(batch) * max_pages, seed + 3);
  std::vector<std::uint8_t> pool(table.size() * kvh * stride, 0xA5);
  // want[b][g]: the reference decode of sequence b's block of KV head g (cap tokens)
  std::vector<std::vector<float>> want(static_cast<std::size_t>(batch) * kvh);
  for (int b = 0; b < batch; ++b)
    for (int g = 0; g < kvh; ++g) {
      std::vector<std::uint8_t> blk(ref->encoded_bytes(cap));
      if (random_bytes) {  // uniform code bytes; norms from bounded_random_bytes (finite, |norm| < 2)
        blk = bounded_random_bytes(blk.size(), seed + 17 * b + g);
        for (std::size_t k = 0; k < static_cast<std::size_t>(cap) * cb; ++k)
          blk[k] = static_cast<std::uint8_t>(r.uniform() * 256.0);
      } else {
        const auto x = awkward_rows(cap, d, r);
        ref->encode(x.data(), cap, blk.data());
      }
      scatter_block(pool, stride, &table[static_cast<std::size_t>(b) * max_pages], page_size, kvh, g, blk.data(), cap,
                    cb, nb);
      auto& w = want[static_cast<std::size_t>(b) * kvh + g];
      w.resize(static_cast<std::size_t>(cap) * d);
      ref->decode(blk.data(), cap, w.data());
    }
  DevBuf<std::uint8_t> dpool(pool);
  DevBuf<std::int32_t> dtable(table), dstart(start);
  const std::size_t n_out = static_cast<std::size_t>(batch) * num_tokens * kvh * d;
  DevBuf<float> out32(n_out + out_off);
  DevBuf<std::uint16_t> out16(n_out + out_off);
  out32.fill_byte(0xFF);
  out16.fill_byte(0xFF);
  void* out = io == cuda::IoType::kF32 ? static_cast<void*>(out32.p + out_off) : out16.p + out_off;
  cuda::tq_mse_dequantize(tab, {dpool.p, stride}, {dtable.p, max_pages, page_size}, batch, num_tokens, kvh, dstart.p,
                          out, nullptr, io);
  auto got32 = out32.download();
  auto got16 = out16.download();
  for (int k = 0; k < out_off; ++k) {  // nothing written before the output
    EXPECT_EQ(std::isnan(got32[k]), true) << "out32[" << k << "] written";
    EXPECT_EQ(got16[k], 0xFFFF) << "out16[" << k << "] written";
  }
  got32.erase(got32.begin(), got32.begin() + out_off);
  got16.erase(got16.begin(), got16.begin() + out_off);
  int mismatches = 0;
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < num_tokens; ++j)
      for (int g = 0; g < kvh; ++g)
        for (int i = 0; i < d; ++i) {
          const std::size_t o = ((static_cast<std::size_t>(b) * num_tokens + j) * kvh + g) * d + i;
          const float w = want[static_cast<std::size_t>(b) * kvh + g][static_cast<std::size_t>(start[b] + j) * d + i];
          bool ok;
          if (io == cuda::IoType::kF32)
            ok = std::memcmp(&got32[o], &w, 4) == 0;
          else
            ok = got16[o] == (io == cuda::IoType::kF16 ? float_to_half(w) : float_to_bf16(w));
          if (!ok && ++mismatches <= 3)
            ADD_FAILURE() << "b=" << b << " token=" << start[b] + j << " head=" << g << " dim=" << i << " want " << w
                          << " got " << (io == cuda::IoType::kF32 ? got32[o] : float(got16[o]));
        }
  EXPECT_EQ(mismatches, 0);
}

TEST(CudaDequantize, MatchesReferenceDecode) {
  const std::uint64_t seed = fresh_seed();
  const cuda::IoType ios[3] = {cuda::IoType::kF32, cuda::IoType::kF16, cuda::IoType::kBf16};
  const int pages[3] = {16, 1, 64};
  int i = 0;
  // every integer width at the Hadamard and the dense head_dims
  for (int d : {64, 80, 96, 112, 128, 256})
    for (int bits = 1; bits <= 4; ++bits, ++i)
      run_dequant_case(d, bits, pages[(i / 3) % 3], 1 + (i % 4) * 10, ios[i % 3], false, seed + i);
  // fractional widths (the outlier split: two parts, channels scattered back)
  for (int d : {128, 256})
    for (double bits : {1.5, 2.5, 3.5}) {
      ++i;
      run_dequant_case(d, bits, pages[(i / 3) % 3], 33, ios[i % 3], false, seed + i);
    }
  // any bytes (all code values, norms of any finite size), more tokens, odd page sizes of the window
  for (double bits : {1.0, 3.0, 4.0, 2.5}) run_dequant_case(128, bits, 8, 129, cuda::IoType::kF32, true, seed + 100 + int(bits * 2));
  run_dequant_case(96, 2, 32, 65, cuda::IoType::kF32, true, seed + 200);
  run_dequant_case(256, 3, 16, 1000, cuda::IoType::kF16, false, seed + 201);
  // outputs off 16-byte alignment (one store per element) at the head_dims whose aligned outputs take
  // the vector stores, every output type
  for (int d : {64, 128, 256}) {
    ++i;
    run_dequant_case(d, 1 + i % 4, pages[i % 3], 37, ios[i % 3], false, seed + 300 + i, 1);
  }
}

TEST(CudaDequantize, RejectsBadArguments) {
  const cuda::TqMseTables tab(CodecConfig{});
  const std::size_t st = tab.page_stride(16);
  DevBuf<std::uint8_t> pool(4 * st);
  DevBuf<std::int32_t> pages(std::vector<std::int32_t>{0}), start(std::vector<std::int32_t>{0});
  DevBuf<float> out(16 * 128);
  const cuda::PageTable pt{pages.p, 1, 16};
  expect_invalid([&] { cuda::tq_mse_dequantize(tab, {pool.p, st + 32}, pt, 1, 4, 1, start.p, out.p, nullptr); },
                 "pool.page_stride");
  expect_invalid([&] { cuda::tq_mse_dequantize(tab, {pool.p, st}, {pages.p, 1, 12}, 1, 4, 1, start.p, out.p, nullptr); },
                 "page_size");
  expect_invalid([&] { cuda::tq_mse_dequantize(tab, {pool.p, st}, pt, -1, 4, 1, start.p, out.p, nullptr); },
                 "batch/num_tokens");
  expect_invalid([&] { cuda::tq_mse_dequantize(tab, {pool.p, st}, pt, 1, 4, 0, start.p, out.p, nullptr); },
                 "num_kv_heads");
  expect_invalid([&] { cuda::tq_mse_dequantize(tab, {pool.p, st}, pt, 1, 4, 1, start.p, nullptr, nullptr); },
                 "pointers");
  expect_invalid(
      [&] {
        cuda::tq_mse_dequantize(tab, {pool.p, st}, pt, 1, 4, 1, start.p, out.p, nullptr, static_cast<cuda::IoType>(9));
      },
      "out_type");
  EXPECT_NO_THROW(cuda::tq_mse_dequantize(tab, {pool.p, st}, pt, 0, 4, 1, nullptr, nullptr, nullptr));  // no work
  TKV_TEST_CUDA(cudaDeviceSynchronize());
}

TEST(CudaAppend, RejectsUnsupportedConfig) {
  CodecConfig cfg;
  for (int d : {48, 72, 100, 272}) {  // below 64, not a multiple of 16, above 256
    cfg.head_dim = d;
    try {
      cuda::TqMseTables t(cfg);
      ADD_FAILURE() << "head_dim " << d << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
    }
  }
  cfg.head_dim = 96;  // a multiple of 16: the dense rotation
  {
    const cuda::TqMseTables t(cfg);
    EXPECT_TRUE(t.dense());
    EXPECT_EQ(t.signs(), nullptr);
    EXPECT_NE(t.rotation(), nullptr);
  }
  cfg.head_dim = 72;
  EXPECT_THROW(cuda::TqMseTables t(cfg), std::invalid_argument);
  cfg.head_dim = 128;
  cfg.bits = 2.5;
  EXPECT_THROW(cuda::TqMseTables t(cfg), std::invalid_argument);  // fractional: from a calibrated codec only
  const auto uncal = make_codec(cfg);
  EXPECT_THROW(cuda::TqMseTables t(*uncal), std::invalid_argument);  // not calibrated
  cfg.head_dim = 64;  // parts of 32 channels: not on the GPU
  const auto small = make_codec(cfg);
  std::vector<float> x(64 * 64, 1.0f);
  small->calibrate(x.data(), 64);
  EXPECT_THROW(cuda::TqMseTables t(*small), std::invalid_argument);
  cfg.head_dim = 128;
  cfg.bits = 4;
  cfg.center = true;  // centred codecs are not supported on the GPU
  EXPECT_THROW(cuda::TqMseTables t(cfg), std::invalid_argument);
}

}  // namespace
}  // namespace turbokv::test

int main(int argc, char** argv) { return turbokv::test::cuda_test_main(argc, argv, "test_cuda_append"); }
