// Fused TurboQuant-MSE decode attention with int8 dot products
// (AttentionPrecision::kInt8, turbokv/attention.h): AVX-512 with VNNI
// (`vpdpbusd`: 4 u8 x s8 products per int32 lane per instruction) and VBMI
// (`vpmultishiftqb`, `vpermb`), both part of the AVX-512 level (simd.cpp).
// avx512_int8_attend: integer widths (AttnJob); avx512_int8_attend_split: jobs
// with fractional heads (SplitAttnJob; "fractional widths" below).
//
// Same job and outputs as Kernels::attend (kernels_simd.h): m, l and the value
// accumulator in the 16-lane layout of kernels.h. The pass structure is the
// kBf16 kernel's (fused_pass_avx512.h): scores of 4 blocks of 16 tokens, one
// fp32 online-softmax update per head and pass, then the pass's values.
//  - scores, tokens in lanes (keys staged and transposed by TqSrc): for each
//    group of 8 coordinates, the codes of every token go to bytes, 4 a dword
//    (`vpmultishiftqb`; at 4 bits nibble masks, even then odd codes), are
//    looked up in the key codebook as u8 (`vpermb`, or `vpshufb` at 4 bits;
//    zero point: c ~ kmin + kstep * u), and one `vpdpbusd` per head and half
//    adds 4 products u * q8 with the broadcast int8 query dword;
//  - values, groups in lanes (the kernels.h layout, read in place a pass at a
//    time): for each quad of tokens and half of a group's 8 codes, one
//    `vpmultishiftqb` per token pulls the 4 codes of every group into bytes,
//    in-lane byte and word unpacks put the 4 tokens of one code in a dword,
//    `vpshufb` looks them up as s8 centroids, and one `vpdpbusd` per head adds
//    the 4 tokens times their u8 weights (softmax weight times value norm,
//    scaled per head and pass). After the pass the int32 sums go back to the
//    kernels.h lane order (a 4 x 4 dword transpose in each 128-bit lane) and
//    are added to the fp32 accumulator times their scales. The unpacks and
//    masks run beside `vpdpbusd` on Zen 4; cross-lane byte permutes do not
//    (a first version transposed with `vpermt2b`: ~20% more perf samples in
//    the value loop, one thread, 4-bit, head_dim 128).
//  - with Intel AMX (where int8_uses_amx(), turbokv/simd.h) the same u8 / s8
//    operands go to tiles instead of vpdpbusd (AmxTiles):
//    keys, the looked-up centroids of a block as rows of 16 tokens x 4
//    coordinates (the VNNI layout of a `tdpbsud` B tile) against the query as
//    the A tile, which gives the scores head-major; values, the centroid
//    dwords of 16 quads as a `tdpbusd` B tile against the pass's u8 weights
//    as the A tile, all G heads of the job in one tile product. Integer sums
//    are exact either way, so the outputs are the VNNI path's bit for bit
//    (tests/test_cpu_low_precision.cpp).
// Measured error and speed: turbokv/attention.h (kInt8), docs/RESULTS.md.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "fused_pass_avx512.h"
#include "int8_vnni_avx512.h"
#include "kernels_avx512_traits.h"

namespace turbokv::cpu::detail::avx512i8 {
using T = avx512::T;
}
#define KNS avx512i8
#define TURBOKV_KERNELS_SOURCES_ONLY
#include "kernels_simd.h"
#undef TURBOKV_KERNELS_SOURCES_ONLY
#undef KNS

namespace turbokv::cpu::detail {
namespace avx512i8 {
namespace {

using fused_pass::kPassTokens;
using fused_pass::load_scalars;
using fused_pass::pass_loop;
using fused_pass::prefetch_rows;
using fused_pass::ValueRows;
using fused_pass::SplitPart;
using fused_pass::split_part;
using fused_pass::as_split_key_source;
using int8_vnni::byte_table;
using int8_vnni::code_bytes;
using int8_vnni::code_ctrl;
using int8_vnni::group_centroids;
using int8_vnni::pass_weights;
using int8_vnni::query_int8;
using int8_vnni::quad_bytes;
using int8_vnni::quad_code;
using int8_vnni::score_heads;

constexpr int kMaxHeads = 16;                  ///< query heads of one job at most (run_split)
constexpr int kBlocks = kPassTokens / TB;      ///< score blocks per pass
constexpr int kMaxGroups = kMaxDim / 8;        ///< code groups (8 coordinates) a token at most
constexpr int kMaxChunks = kMaxGroups / 8;     ///< AMX key tiles (64 coordinates each) a token at most

// The AMX instructions this file uses, as macros: GCC's intrinsics paste the tile number into inline assembly,
// so it must be a literal. Where the compiler lacks -mamx-tile / -mamx-int8 (CMake: TURBOKV_HAVE_AMX=0)
// cpu_has_amx_int8() is false and these are never reached.
#if TURBOKV_HAVE_AMX
#define TKV_AMX_CONFIG(cfg) _tile_loadconfig(cfg)
#define TKV_AMX_RELEASE() _tile_release()
#define TKV_AMX_ZERO(t) _tile_zero(t)
#define TKV_AMX_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TKV_AMX_STORE(t, p, stride) _tile_stored(t, p, stride)
#define TKV_AMX_DOT_US(c, a, b) _tile_dpbusd(c, a, b)  // c += a (u8) x b (s8)
#define TKV_AMX_DOT_SU(c, a, b) _tile_dpbsud(c, a, b)  // c += a (s8) x b (u8)
#else
[[noreturn]] inline void amx_missing() { std::abort(); }
#define TKV_AMX_CONFIG(cfg) amx_missing()
#define TKV_AMX_RELEASE() amx_missing()
#define TKV_AMX_ZERO(t) amx_missing()
#define TKV_AMX_LOAD(t, p, stride) amx_missing()
#define TKV_AMX_STORE(t, p, stride) amx_missing()
#define TKV_AMX_DOT_US(c, a, b) amx_missing()
#define TKV_AMX_DOT_SU(c, a, b) amx_missing()
#endif

/// The AMX tiles of a kInt8 job, configured on the job's thread for its lifetime (palette 1):
///   tmm0 key sums        [G heads][16 tokens] int32
///   tmm1 query chunk     [G heads][64 bytes] s8: dwords 16 c .. 16 c + 15 of KeyInt8::qd (chunk c)
///   tmm2 key centroids   [16 rows][16 tokens x 4 bytes] u8: row 2 i + hf = half hf of group 8 c + i
///   tmm3 value weights   [G heads][64 tokens] u8 (ValueInt8::w8)
///   tmm4, tmm7 value centroids [16 quads][16 coordinates x 4 tokens] s8 (ValueInt8::quad, one r)
///   tmm5, tmm6 value sums      [G heads][16 coordinates] int32
/// A tile load right after the vector stores of its rows waits ~100 cycles (measured: docs/RESULTS.md, session
/// 35), so the rows of a whole pass (keys) or group vector (values) are stored before the first tile load.
struct AmxTiles {
  explicit AmxTiles(int G) {
    alignas(64) std::uint8_t cfg[64] = {};
    cfg[0] = 1;
    auto tile = [&](int t, int rows) {
      cfg[16 + 2 * t] = 64;  // bytes a row
      cfg[48 + t] = static_cast<std::uint8_t>(rows);
    };
    for (int t : {0, 1, 3, 5, 6}) tile(t, G);
    for (int t : {2, 4, 7}) tile(t, 16);
    TKV_AMX_CONFIG(cfg);
  }
  ~AmxTiles() { TKV_AMX_RELEASE(); }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};

/// The int8 forms of a job's rotated queries and key codebook (turbokv/attention.h, kInt8).
struct KeyInt8 {
  alignas(64) std::uint32_t qd[kMaxHeads * kMaxGroups * 2];  ///< [head][d8 / 4] dwords of int8 query coordinates
  float mul[kMaxHeads];  ///< score = mul[h] * acc + add[h] (before the key norm and softmax scale)
  float add[kMaxHeads];
  __m512i book;          ///< u8 centroids: c ~ kmin + kstep * book[code]
  int hd4 = 0;           ///< dwords a head: 2 a code group, rounded up to 16 (an AMX tile row; zeros past)
  /// AMX scratch, allocated only when the job scores with AMX tiles (amx_pass, amx_scores): the job's stack
  /// stays as before otherwise.
  struct AmxRows {
    alignas(64) std::uint8_t kb[kBlocks][kMaxChunks][16 * 64];  ///< tmm2 rows, per block and chunk (zero past)
    alignas(64) std::int32_t ci[kBlocks][kMaxHeads * 16];       ///< tmm0 stored, per block
  };
  std::unique_ptr<AmxRows> tiles;

  /// qp: [G][qstride] rotated queries, this code stream's d coordinates at the start of each row.
  void prepare(const TqState& ks, const float* qp, int qstride, int G, int d, bool amx) {
    if (amx) tiles = std::make_unique<AmxRows>();  // value-initialized: every row zero at first
    const int nb = 1 << ks.bits;
    float lo = ks.cbx[0], hi = ks.cbx[0];
    for (int k = 1; k < nb; ++k) lo = std::min(lo, ks.cbx[k]), hi = std::max(hi, ks.cbx[k]);
    const float step = hi > lo ? (hi - lo) / 255.0f : 1.0f;
    book = byte_table(ks.bits, [&](int k) {
      return static_cast<std::uint8_t>(std::clamp(std::nearbyint((ks.cbx[k] - lo) / step), 0.0f, 255.0f));
    });
    hd4 = (ks.ng * 2 + 15) / 16 * 16;
    for (int h = 0; h < G; ++h) {
      int sum = 0;
      const float qs = query_int8(qp + static_cast<std::size_t>(h) * qstride, d, ks.bits, 4 * hd4,
                                  reinterpret_cast<std::int8_t*>(qd + h * hd4), sum);
      // sum_i q_i c_i ~ qs sum_i q8_i (lo + step u_i) = qs step acc + qs lo sum_i q8_i
      mul[h] = qs * step;
      add[h] = qs * lo * static_cast<float>(sum);
    }
  }
};

/// The AMX key sums of a pass (tokens [t, t + pcnt)): every block staged in turn (src.stage) and its
/// centroid rows stored to kb (8 groups a chunk, 2 rows a group), then per block the chunks' tile products
/// (tmm1 query chunk x tmm2 rows) summed in tmm0 and stored to ci[block] ([G][16 tokens]); the same integers
/// as score_heads. src is left staged at the pass's last block: callers reload a block's norms.
template <int BITS, class Src>
void amx_pass(Src& src, KeyInt8& q, std::size_t t, int pcnt) {
  const int nblk = (pcnt + TB - 1) / TB, nch = (src.ng + 7) / 8;
  for (int b = 0; b < nblk; ++b) {
    src.stage(t + static_cast<std::size_t>(b) * TB, std::min(TB, pcnt - b * TB));
    for (int j = 0; j < src.ng; ++j) {
      __m512i x0, x1;
      group_centroids<BITS>(src.trow(j), q.book, x0, x1);
      std::uint8_t* row = q.tiles->kb[b][j / 8] + 2 * (j % 8) * 64;
      _mm512_store_si512(row, x0);
      _mm512_store_si512(row + 64, x1);
    }
  }
  for (int b = 0; b < nblk; ++b) {
    TKV_AMX_ZERO(0);
    for (int c = 0; c < nch; ++c) {
      TKV_AMX_LOAD(2, q.tiles->kb[b][c], 64);
      TKV_AMX_LOAD(1, q.qd + 16 * c, q.hd4 * 4);
      TKV_AMX_DOT_SU(0, 1, 2);
    }
    TKV_AMX_STORE(0, q.tiles->ci[b], 64);
  }
}

/// scores_block's output for block b of the pass from amx_pass's sums.
inline void amx_scores(const KeyInt8& q, int b, int G, float* out) {
  for (int h = 0; h < G; ++h)
    _mm512_storeu_ps(out + h * W, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(q.tiles->ci[b] + h * 16)),
                                                  _mm512_set1_ps(q.mul[h]), _mm512_set1_ps(q.add[h])));
}

/// out[h * 16 + i] = <q_h, c[codes of token i]> (no norm) for the G heads, from the int8 sums.
template <int BITS, class Src>
void scores_block(const Src& src, const KeyInt8& q, int G, float* out) {
  int8_vnni::head_runs<8>(G, [&](auto gh, int h0) __attribute__((always_inline)) {
    constexpr int GH = decltype(gh)::value;
    __m512i v[GH];
    score_heads<GH, BITS>(src, q.qd + h0 * q.hd4, q.hd4, q.book, v);
    for (int h = 0; h < GH; ++h)
      _mm512_storeu_ps(out + (h0 + h) * W, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[h]), _mm512_set1_ps(q.mul[h0 + h]),
                                                           _mm512_set1_ps(q.add[h0 + h])));
  });
}

// ---------------------------------------------------------------- values

/// One value code stream of a job (a TurboQuant-MSE head, or one part of a fractional one): the pass's code
/// rows (read in place, groups in lanes as in the kernels.h layout), its u8 weights, and the int8 codebook.
template <int BITS>
struct ValueInt8 {
  ValueRows<BITS> rows;
  const std::uint8_t* codes = nullptr;  ///< the stream's first token's codes
  const std::uint8_t* scal = nullptr;   ///< the block's fp16 scalars (per a token; this stream's: which)
  std::size_t stride = 0, avail = 0;    ///< token stride; bytes readable from codes
  int per = 1, which = 0, off = 0, nv = 1;
  __m512i book, mask;
  float cstep;  ///< value centroid c ~ cstep * book[code] (s8)
  alignas(64) float vn[kPassTokens];                    ///< this stream's norms of the pass
  alignas(64) std::uint8_t w8[kMaxHeads][kPassTokens];  ///< u8 weights: p ||v|| ~ wstep[h] * w8
  float wstep[kMaxHeads];
  /// AMX scratch, allocated only when the job accumulates with AMX tiles (heads_amx).
  struct AmxRows {
    alignas(64) std::uint8_t vb[2][4][16 * 64];         ///< tmm4 / tmm7 rows for each hf, r (zero at first)
    alignas(64) std::int32_t cv[2][4][kMaxHeads * 16];  ///< tmm5 / tmm6 stored for each hf, r
  };
  std::unique_ptr<AmxRows> tiles;

  /// Accumulate with AMX tiles from now on (the job's AmxTiles configured).
  void use_amx() {
    tiles = std::make_unique<AmxRows>();  // value-initialized: every row zero at first
  }

  /// An integer-width head: n tokens of codes, then their fp16 norms.
  ValueInt8(const TqState& s, const std::uint8_t* c, std::size_t n) {
    init(s, c, s.code_bytes, n * (s.code_bytes + 2), c + n * s.code_bytes, 1, 0, 0);
  }
  ValueInt8() = default;
  /// The stream of codebook s at `c` (token stride stride_, avail_ bytes readable), fp16 scalars `per_` a
  /// token at sc (its own: which_), accumulated at acc + off_ ([G][AP] in the kernels.h layout of its
  /// groups).
  void init(const TqState& s, const std::uint8_t* c, std::size_t stride_, std::size_t avail_, const std::uint8_t* sc,
            int per_, int which_, int off_) {
    codes = c, stride = stride_, avail = avail_, scal = sc, per = per_, which = which_, off = off_;
    nv = (s.ng + W - 1) / W;
    const int nb = 1 << s.bits;
    float mx = 0;
    for (int k = 0; k < nb; ++k) mx = std::max(mx, std::fabs(s.cbx[k]));
    cstep = mx > 0 ? mx / 127.0f : 1.0f;
    book = byte_table(s.bits, [&](int k) {
      return static_cast<std::uint8_t>(static_cast<std::int8_t>(std::nearbyint(s.cbx[k] / cstep)));
    });
    mask = _mm512_set1_epi8(static_cast<char>((1 << BITS) - 1));
  }
  /// This stream's norms of block b of the pass (tokens [tb, tb + cnt)).
  void norms(int b, std::size_t tb, int cnt) { load_scalars(scal, per, which, tb, cnt, vn + b * TB); }

  /// The pass's weights of the G heads, p: [G][kPassTokens] softmax weights (0 past the end): w8 and
  /// wstep from p * ||v|| (weights()).
  void all_weights(int G, int nblk, const float* p) {
    alignas(64) float pw[kPassTokens];
    for (int h = 0; h < G; ++h) {
      for (int b = 0; b < nblk; ++b)
        _mm512_store_ps(pw + b * TB, _mm512_mul_ps(_mm512_load_ps(p + h * kPassTokens + b * TB), _mm512_load_ps(vn + b * TB)));
      weights(h, nblk, pw);
    }
  }

  /// Weights of head h over the pass: pw = p * ||v|| (fp32, 0 past the end) -> w8[h] = round(pw /
  /// wstep[h]), wstep[h] = max pw / 255.
  void weights(int h, int nblk, const float* pw) { wstep[h] = pass_weights(pw, nblk, kBlocks, w8[h]); }

  /// Half hf of the codes of group vector v (codes code_of(hf, 0..3) of every group) of tokens 4 qd ..
  /// 4 qd + 3 (zero past pcnt) as s8 centroids, four tokens a dword, lanes in the order of the in-lane
  /// byte and word unpacks: out[r], 128-bit lane L, dword s = code code_of(hf, s) of group 16 v + 4 L + r.
  /// (Cross-lane byte permutes compete with vpdpbusd for the same pipes on Zen 4; the unpacks and masks
  /// do not.)
  inline void quad(int v, int qd, int pcnt, int hf, __m512i ctrl, __m512i* out) const {
    __m512i m[4];
    for (int k = 0; k < 4; ++k) {
      const int i = 4 * qd + k;
      m[k] = i >= pcnt ? _mm512_setzero_si512() : code_bytes<BITS>(rows.group(i, v), hf, ctrl, mask);
    }
    quad_bytes(m, out);
    for (int r = 0; r < 4; ++r) out[r] = _mm512_shuffle_epi8(book, out[r]);
  }

  static constexpr int code_of(int hf, int s) { return quad_code<BITS>(hf, s); }

  /// acc[h0 + h] vectors v * 8 + code_of(hf, s) (s < 4) += the pass's int32 sums times their scales, GH heads.
  template <int GH>
  void heads(int h0, int v, int hf, int pcnt, float* acc, int P) const {
    const __m512i ctrl = _mm512_set1_epi64(code_ctrl<BITS>(hf));
    __m512i a[GH][4];
    for (int h = 0; h < GH; ++h)
      for (int r = 0; r < 4; ++r) a[h][r] = _mm512_setzero_si512();
    for (int qd = 0; 4 * qd < pcnt; ++qd) {
      __m512i c[4];
      quad(v, qd, pcnt, hf, ctrl, c);
      for (int h = 0; h < GH; ++h) {
        std::uint32_t wd;
        std::memcpy(&wd, w8[h0 + h] + 4 * qd, 4);
        const __m512i w = _mm512_set1_epi32(static_cast<int>(wd));
        for (int r = 0; r < 4; ++r) a[h][r] = _mm512_dpbusd_epi32(a[h][r], w, c[r]);
      }
    }
    for (int h = 0; h < GH; ++h) add_sums(h0 + h, a[h], v, hf, acc, P);
  }

  /// acc[h] vectors v * 8 + code_of(hf, s) += head h's int32 sums a[r] of the pass (lanes as quad's out[r])
  /// times their scale.
  [[gnu::always_inline]] void add_sums(int h, const __m512i* a, int v, int hf, float* acc, int P) const {
    int8_vnni::add_quad_sums<BITS>(a, _mm512_set1_ps(wstep[h] * cstep), hf,
                                   acc + static_cast<std::size_t>(h) * P + off + v * 8 * W);
  }

  /// Both halves of heads() for group vector v and all G heads with AMX: the centroid dwords of the pass's
  /// quads to vb (tmm4 / tmm7 rows) for every hf and r, then each times the weights (tmm3, loaded by pass())
  /// into tmm5 / tmm6, stored to cv; the same integers as heads().
  void heads_amx(int v, int pcnt, int G, float* acc, int P) {
    auto& vb = tiles->vb;
    auto& cv = tiles->cv;
    // Quads past the pass keep earlier bytes (or zeros): their weights are 0.
    for (int hf = 0; hf < 2; ++hf) {
      const __m512i ctrl = _mm512_set1_epi64(code_ctrl<BITS>(hf));
      for (int qd = 0; 4 * qd < pcnt; ++qd) {
        __m512i c[4];
        quad(v, qd, pcnt, hf, ctrl, c);
        for (int r = 0; r < 4; ++r) _mm512_store_si512(vb[hf][r] + qd * 64, c[r]);
      }
    }
    for (int hf = 0; hf < 2; ++hf)
      for (int r = 0; r < 4; r += 2) {
        TKV_AMX_LOAD(4, vb[hf][r], 64);
        TKV_AMX_LOAD(7, vb[hf][r + 1], 64);
        TKV_AMX_ZERO(5);
        TKV_AMX_ZERO(6);
        TKV_AMX_DOT_US(5, 3, 4);
        TKV_AMX_DOT_US(6, 3, 7);
        TKV_AMX_STORE(5, cv[hf][r], 64);
        TKV_AMX_STORE(6, cv[hf][r + 1], 64);
      }
    for (int hf = 0; hf < 2; ++hf)
      for (int h = 0; h < G; ++h) {
        const __m512i a[4] = {_mm512_load_si512(cv[hf][0] + h * 16), _mm512_load_si512(cv[hf][1] + h * 16),
                              _mm512_load_si512(cv[hf][2] + h * 16), _mm512_load_si512(cv[hf][3] + h * 16)};
        add_sums(h, a, v, hf, acc, P);
      }
  }

  /// The pass's values (tokens [t, t + pcnt)) for G heads added to acc ([G][P], the kernels.h layout).
  void pass(std::size_t t, int pcnt, int G, float* acc, int P) {
    rows.set_at(codes, stride, avail, nv, t, pcnt);
    if (tiles) {
      TKV_AMX_LOAD(3, w8[0], kPassTokens);
      for (int v = 0; v < nv; ++v) heads_amx(v, pcnt, G, acc, P);
      return;
    }
    for (int v = 0; v < nv; ++v)
      for (int hf = 0; hf < 2; ++hf)
        int8_vnni::head_runs<4>(G, [&](auto gh, int h0) { heads<decltype(gh)::value>(h0, v, hf, pcnt, acc, P); });
  }
};

/// Passes of up to 64 tokens (fused_pass::pass_loop): scores of 4 blocks of 16 (keys staged and transposed
/// per block), one online-softmax update per head for the pass, one value pass (value codes read in place).
template <int KB, int VB>
void attend_int8(const AttnJob& j) {
  const bool amx = j.int8_amx;
  TqSrc<KB> ks(*j.ks, j.kcodes, j.n);
  ks.transpose = true;
  ValueInt8<VB> vs(*j.vs, j.vcodes, j.n);
  if (amx) vs.use_amx();
  const int d = j.ks->dim, G = j.G;
  const int P = layout_floats(j.ks->ng, W);
  KeyInt8 kq;
  kq.prepare(*j.ks, j.qp, d, G, d, amx);
  alignas(64) float pw[kMaxHeads * kPassTokens];  // [head][token of the pass] weights p * ||v||
  const __m512 scale = _mm512_set1_ps(j.scale);
  const std::size_t krow = j.ks->code_bytes, kend = j.n * krow, vrow = j.vs->code_bytes, vend = j.n * vrow;
  pass_loop(
      j, j.acc, P,
      [&](std::size_t tb, int cnt, int b, float* dots) {
        // Key rows two blocks ahead (the staging loads would otherwise wait on memory), value rows one pass
        // ahead (the value pass reads them in place).
        prefetch_rows(j.kcodes, (tb + 2 * TB) * krow, std::min((tb + 3 * TB) * krow, kend));
        prefetch_rows(j.vcodes, (tb + kPassTokens) * vrow, std::min((tb + kPassTokens + TB) * vrow, vend));
        vs.norms(b, tb, cnt);
        if (amx) {
          if (b == 0) amx_pass<KB>(ks, kq, tb, static_cast<int>(std::min<std::size_t>(kPassTokens, j.t1 - tb)));
          ks.load_norms(tb, cnt);
          amx_scores(kq, b, G, dots);
        } else {
          ks.stage(tb, cnt);
          scores_block<KB>(ks, kq, G, dots);
        }
        const __m512 kn = _mm512_mul_ps(ks.norm_vec(), scale);
        for (int h = 0; h < G; ++h) _mm512_storeu_ps(dots + h * W, _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), kn));
      },
      [&](int h, int b, __m512 p) {
        _mm512_store_ps(pw + h * kPassTokens + b * TB, _mm512_mul_ps(p, _mm512_load_ps(vs.vn + b * TB)));
      },
      [&](std::size_t t, int pcnt, int nblk) {  // u8 weights per head, then the values
        for (int h = 0; h < G; ++h) vs.weights(h, nblk, pw + h * kPassTokens);
        vs.pass(t, pcnt, G, j.acc, P);
      });
}


// ---------------------------------------------------------------- fractional widths (SplitAttnJob)
//
// The jobs of CodecAttentionPath::kTqMseSplitFused: keys and values each either fractional (the outlier
// split, SplitHeadState: two code streams a row, each with its own codebook and fp16 norm) or at an integer
// width. Every code stream is one of the streams above (KeyInt8 + TqSrc for keys, ValueInt8 for values);
// a fractional key's score is ||x_o|| s_o + ||x_r|| s_r (each part's int8 sums scaled in fp32), a fractional
// value's weights are quantized per part (p ||x_o||, p ||x_r||). Jobs with a packed fractional head
// (SplitHeadState::packed) run the bf16 kernel (avx512_int8_attend_split). Keys and values are dispatched
// separately (one virtual call per block or pass), as in the bf16 kernel.

/// fn(std::integral_constant<int, BL>{}) with BL = the rest part's width of a fractional head (1..3; its
/// outlier part has BL + 1 bits).
template <class Fn>
inline void with_rest_bits(int bl, Fn&& fn) {
  switch (bl) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    default: fn(std::integral_constant<int, 3>{}); break;
  }
}

/// Scores of a job's keys, one block of up to 16 tokens at a time.
struct KeySideI8 {
  virtual ~KeySideI8() = default;
  /// out[h * 16 + i] = score of token tb + i for head h (norms applied, softmax scale not); block b of a
  /// pass of pcnt tokens (called for b = 0, 1, ... in order).
  virtual void score(std::size_t tb, int cnt, int b, int pcnt, float* out) = 0;
};

template <int KB>
struct IntKeysI8 final : KeySideI8 {
  TqSrc<KB> src;
  KeyInt8 kq;
  int G;
  explicit IntKeysI8(const SplitAttnJob& j) : src(*j.ks, j.kcodes, j.n), G(j.G) {
    src.transpose = true;
    kq.prepare(*j.ks, j.qs, j.qstride, G, j.ks->dim, j.int8_amx);
  }
  void score(std::size_t tb, int cnt, int blk, int pcnt, float* out) override {
    if (kq.tiles) {
      if (blk == 0) amx_pass<KB>(src, kq, tb, pcnt);
      src.load_norms(tb, cnt);
      amx_scores(kq, blk, G, out);
    } else {
      src.stage(tb, cnt);
      scores_block<KB>(src, kq, G, out);
    }
    const __m512 kn = src.norm_vec();
    for (int h = 0; h < G; ++h) _mm512_storeu_ps(out + h * W, _mm512_mul_ps(_mm512_loadu_ps(out + h * W), kn));
  }
};

/// Fractional keys: the outlier part (BL + 1 bits) and the rest (BL bits) as two code streams.
template <int BL>
struct SplitKeysI8 final : KeySideI8 {
  TqSrc<BL + 1> hi;
  TqSrc<BL> lo;
  KeyInt8 k0, k1;
  int G;
  std::size_t row;
  const std::uint8_t* scal;
  alignas(64) float rest[kMaxHeads * W];
  alignas(64) float nrm[2][TB];
  explicit SplitKeysI8(const SplitAttnJob& j)
      : hi(j.kx->part[0], j.kcodes + j.kx->code_offset[0], j.n), lo(j.kx->part[1], j.kcodes + j.kx->code_offset[1], j.n),
        G(j.G), row(j.kx->row_bytes), scal(j.kcodes + j.n * j.kx->row_bytes) {
    as_split_key_source(hi, split_part(*j.kx, j.kcodes, j.n, 0));
    as_split_key_source(lo, split_part(*j.kx, j.kcodes, j.n, 1));
    k0.prepare(j.kx->part[0], j.qs, j.qstride, G, j.kx->part[0].dim, j.int8_amx);
    k1.prepare(j.kx->part[1], j.qs + j.kx->part[0].dim, j.qstride, G, j.kx->part[1].dim, j.int8_amx);
  }
  void score(std::size_t tb, int cnt, int blk, int pcnt, float* out) override {
    prefetch_rows(hi.block, (tb + 2 * TB) * row, std::min((tb + 3 * TB) * row, hi.block_bytes));  // two blocks ahead
    load_scalars(scal, 2, 0, tb, cnt, nrm[0]);
    load_scalars(scal, 2, 1, tb, cnt, nrm[1]);
    if (k0.tiles) {
      if (blk == 0) {
        amx_pass<BL + 1>(hi, k0, tb, pcnt);
        amx_pass<BL>(lo, k1, tb, pcnt);
      }
      amx_scores(k0, blk, G, out);
      amx_scores(k1, blk, G, rest);
    } else {
      hi.stage(tb, cnt);
      lo.stage(tb, cnt);
      scores_block<BL + 1>(hi, k0, G, out);
      scores_block<BL>(lo, k1, G, rest);
    }
    const __m512 a = _mm512_load_ps(nrm[0]), b = _mm512_load_ps(nrm[1]);
    for (int h = 0; h < G; ++h)
      _mm512_storeu_ps(out + h * W, _mm512_fmadd_ps(b, _mm512_load_ps(rest + h * W),
                                                    _mm512_mul_ps(a, _mm512_loadu_ps(out + h * W))));
  }
};

/// Values of a job: its value streams, each accumulated into j.acc ([G][j.P]).
struct ValSideI8 {
  virtual ~ValSideI8() = default;
  /// Norms of block b of the pass (tokens [tb, tb + cnt)).
  virtual void norms(int b, std::size_t tb, int cnt) = 0;
  /// The pass's values: p [G][kPassTokens] softmax weights (0 past the end).
  virtual void pass(std::size_t t, int pcnt, int nblk, const float* p, int G, float* acc, int AP) = 0;
};

template <int VB>
struct IntValsI8 final : ValSideI8 {
  ValueInt8<VB> v;
  explicit IntValsI8(const SplitAttnJob& j) : v(*j.vs, j.vcodes, j.n) {
    if (j.int8_amx) v.use_amx();
  }
  void norms(int b, std::size_t tb, int cnt) override { v.norms(b, tb, cnt); }
  void pass(std::size_t t, int pcnt, int nblk, const float* p, int G, float* acc, int AP) override {
    v.all_weights(G, nblk, p);
    v.pass(t, pcnt, G, acc, AP);
  }
};

/// Fractional values (not packed): part 0 (BL + 1 bits) at 0, part 1 (BL bits) at split_acc_offset.
template <int BL>
struct SplitValsI8 final : ValSideI8 {
  ValueInt8<BL + 1> v0;
  ValueInt8<BL> v1;
  explicit SplitValsI8(const SplitAttnJob& j) {
    const SplitHeadState& x = *j.vx;
    const SplitPart p0 = split_part(x, j.vcodes, j.n, 0), p1 = split_part(x, j.vcodes, j.n, 1);
    v0.init(x.part[0], p0.codes, x.row_bytes, p0.avail, p0.scal, 2, 0, 0);
    v1.init(x.part[1], p1.codes, x.row_bytes, p1.avail, p1.scal, 2, 1, x.split_acc_offset(W));
    if (j.int8_amx) v0.use_amx(), v1.use_amx();
  }
  void norms(int b, std::size_t tb, int cnt) override {
    v0.norms(b, tb, cnt);
    v1.norms(b, tb, cnt);
  }
  void pass(std::size_t t, int pcnt, int nblk, const float* p, int G, float* acc, int AP) override {
    v0.all_weights(G, nblk, p);
    v1.all_weights(G, nblk, p);
    v0.pass(t, pcnt, G, acc, AP);
    v1.pass(t, pcnt, G, acc, AP);
  }
};

/// The passes of a split job over its key and value sides (fused_pass::pass_loop).
void split_loop(const SplitAttnJob& j, KeySideI8& ks, ValSideI8& vs) {
  alignas(64) float pp[kMaxHeads * kPassTokens];  // [head][token of the pass] exp(logit - m) (0 past the end)
  const __m512 scale = _mm512_set1_ps(j.scale);
  pass_loop(
      j, j.acc, j.P,
      [&](std::size_t tb, int cnt, int b, float* dots) {
        ks.score(tb, cnt, b, static_cast<int>(std::min<std::size_t>(kPassTokens, j.t1 - tb + static_cast<std::size_t>(b) * TB)), dots);
        vs.norms(b, tb, cnt);
        for (int h = 0; h < j.G; ++h) _mm512_storeu_ps(dots + h * W, _mm512_mul_ps(_mm512_loadu_ps(dots + h * W), scale));
      },
      [&](int h, int b, __m512 p) { _mm512_store_ps(pp + h * kPassTokens + b * TB, p); },
      [&](std::size_t t, int pcnt, int nblk) { vs.pass(t, pcnt, nblk, pp, j.G, j.acc, j.P); });
}

void split_values(const SplitAttnJob& j, KeySideI8& ks) {
  if (j.vx) {
    with_rest_bits(j.vx->part[1].bits, [&](auto bl) {
      SplitValsI8<decltype(bl)::value> v(j);
      split_loop(j, ks, v);
    });
  } else {
    with_bits(j.vs->bits, [&](auto vb) {
      IntValsI8<decltype(vb)::value> v(j);
      split_loop(j, ks, v);
    });
  }
}

template <class K>
void split_keys(const SplitAttnJob& j) {
  K k(j);
  split_values(j, k);
}

}  // namespace
}  // namespace avx512i8

void avx512_int8_attend(const AttnJob& j) {
  using namespace avx512i8;
  std::optional<AmxTiles> tiles;
  if (j.int8_amx) tiles.emplace(j.G);
  with_bits(j.ks->bits, [&](auto kb) {
    with_bits(j.vs->bits, [&](auto vb) { attend_int8<decltype(kb)::value, decltype(vb)::value>(j); });
  });
}

void avx512_int8_attend_split(const SplitAttnJob& j) {
  using namespace avx512i8;
  // Packed fractional heads (SplitHeadState::packed: both parts in one register, e.g. 64 + 64 channels at
  // head_dim 128) have no int8 kernel: two half-empty int8 streams measured slower than the bf16 kernel's
  // packed one (docs/RESULTS.md, session 33), so those jobs run it (or the fp32 kernel without AVX512-BF16).
  if ((j.kx && j.kx->packed(W)) || (j.vx && j.vx->packed(W))) {
    if (cpu_has_avx512_bf16())
      avx512_bf16_attend_split(j);
    else
      avx512_kernels().attend_split(j);
    return;
  }
  std::optional<AmxTiles> tiles;
  if (j.int8_amx) tiles.emplace(j.G);
  if (j.kx)
    with_rest_bits(j.kx->part[1].bits, [&](auto bl) { split_keys<SplitKeysI8<decltype(bl)::value>>(j); });
  else
    with_bits(j.ks->bits, [&](auto kb) { split_keys<IntKeysI8<decltype(kb)::value>>(j); });
}

}  // namespace turbokv::cpu::detail
