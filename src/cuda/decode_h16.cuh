// fp16 tensor-core split-K decode attention on paged TurboQuant-MSE keys/values
// (the default decode kernel; decode_mma.cuh's 3xTF32 kernel is the fp32-accurate
// one), and fp8_decode's kernel 0 (e4m3 keys and values, KB = VB = 8: each e4m3 pair is an A
// register by one cvt, no tables, no rotation). Same grid, workspace and merge as decode_mma.cuh;
// what changes is the pipeline and how codes become matrix operands:
//
//   scores  S[16 tokens x 8 heads]  = C_k[16 x D] . (Pi q)^T[D x 8]       mma m16n8k16 f16
//   values  O^T[D x 8 heads]       += C_v^T[D x 16 tokens] . P[16 x 8]    mma m16n8k16 f16
//
// Pipeline: every warp owns 16-token steps of its split (warp w takes steps w,
// w + NW, ...) and copies, waits for and computes them on its own (cp.async
// groups, or cp.async.bulk onto per-(warp, slot) mbarriers where rows are
// dense, issued under one elect.sync predicate from warp-uniform operands; with
// page_size 16 a step is one range per pool): the main loop has no block barrier.
// Pair look-up tables: an mma A register holds two fp16 values, and two codes
// (2*B bits) index a table of (c[lo], c[hi]) half2 pairs. Keys: the two
// consecutive codes of a token (two consecutive dims). Values: at 2 and 4 bits
// the codes of one dim of two tokens (cross-token indices, built four or eight
// at a time by LOP3), so the entry is the A register itself; otherwise a
// token's dim pair and one byte permute with the neighbouring token's pair.
// The table is replicated per lane in 256-byte rows (entry e of lane L at byte
// 256 e + 4 L; values with their own codebook at + 128), so a byte-wide index
// becomes an address with one PRMT and every look-up of a warp hits 32 banks.
// 2-bit keys and values use quad tables instead (H16Layout::kQuad): a byte of
// four codes (two tokens x two dims) indexes an 8-byte entry that is an mma A
// register pair, one 64-bit look-up per pair.
// 3-bit codes (6-bit pair fields) use a 256-row table that repeats the 64 entries, so a field's
// address is the byte at its first bit (one PRMT after a funnel shift shared by several fields).
// Orders: each lane owns a contiguous span of every key row (its k-slots map to
// dims D/4 * tig + 4 kk + {0..3}; the query fragments are permuted to match)
// and of every value row (pair gid * D/16 + j; output rows are un-permuted when
// the accumulators are written out); score row gid of a step is the token of value k-slot gid, so
// the value mma's P operand is the score fragment transposed in registers (movmatrix).
// Precision: Pi q, the centroids and the softmax weights (times the value
// norm) are rounded to fp16 (relative error <= 2^-11 each); products
// accumulate in fp32. Tests bound the result against fp64 with a named tolerance.
#pragma once

#include <type_traits>

#include "decode_mma.cuh"
#include "splitk.cuh"

namespace turbokv::cuda::detail {

/// SPAN bytes of a row as little-endian 32-bit words (one extra zero word so a field straddling the
/// last word reads zeros), loaded 16, 8, 4, 2 or 1 bytes at a time by the largest of those dividing
/// SPAN: the address must be aligned to that width (an offset that is a multiple of SPAN from a
/// 16-byte aligned row start is; the fractional widths' part-1 spans, e.g. SPAN 6 at byte 32, are
/// aligned to their 2-byte loads).
template <int SPAN>
struct CodeSpan {
  static constexpr int kWords = (SPAN + 3) / 4 + 1;
  std::uint32_t w[kWords];
  __device__ __forceinline__ void load(const std::uint8_t* p) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0;
    if constexpr (SPAN % 16 == 0) {
#pragma unroll
      for (int i = 0; i < SPAN / 16; ++i) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[i];
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
      }
    } else if constexpr (SPAN % 8 == 0) {
#pragma unroll
      for (int i = 0; i < SPAN / 8; ++i) {
        const uint2 v = reinterpret_cast<const uint2*>(p)[i];
        w[2 * i] = v.x, w[2 * i + 1] = v.y;
      }
    } else if constexpr (SPAN % 4 == 0) {
#pragma unroll
      for (int i = 0; i < SPAN / 4; ++i) w[i] = reinterpret_cast<const std::uint32_t*>(p)[i];
    } else if constexpr (SPAN % 2 == 0) {
#pragma unroll
      for (int i = 0; i < SPAN / 2; ++i)
        w[i / 2] |= std::uint32_t(reinterpret_cast<const std::uint16_t*>(p)[i]) << (16 * (i % 2));
    } else {
#pragma unroll
      for (int i = 0; i < SPAN; ++i) w[i / 4] |= std::uint32_t(p[i]) << (8 * (i % 4));
    }
  }
  /// Field p of PB bits (LSB-first stream), PB <= 8.
  template <int PB>
  __device__ __forceinline__ std::uint32_t field(int p) const {
    const int bit = p * PB, wi = bit / 32, sh = bit % 32;
    if (PB == 8) return __byte_perm(w[wi], 0u, 0x4440u + sh / 8);  // one PRMT: byte sh/8, zero-extended
    if (sh + PB <= 32) return (w[wi] >> sh) & ((1u << PB) - 1u);
    return __funnelshift_r(w[wi], w[wi + 1], sh) & ((1u << PB) - 1u);
  }
  /// Byte offset (field p << 8) | lanebyte of a pair-table entry (H16Layout::tab; lanebyte < 256):
  /// one PRMT for byte-wide fields (byte 1 = the code byte, byte 0 = lanebyte, bytes 2, 3 = 0).
  /// WIDE (PB = 6 only; the table's 256 rows repeat every 2^PB entries, H16Layout::kWideK/V): the
  /// byte that starts at the field's first bit, with the next field's low bits above it, is the row.
  /// Fields p and p + 4 are 24 bits apart, so one funnel-shifted window starting at field p (p mod 8 <
  /// 4) holds both, in bytes 0 and 3: one funnel shift per two fields and one PRMT per field, instead of
  /// a shift, a mask and a multiply-add per field.
  template <int PB, bool WIDE = false>
  __device__ __forceinline__ std::uint32_t row_addr(int p, std::uint32_t lanebyte) const {
    const int bit = p * PB, wi = bit / 32, sh = bit % 32;
    if (PB == 8) return __byte_perm(w[wi], lanebyte, 0x5504u | ((sh / 8) << 4));
    if constexpr (WIDE) {
      // o: the window's first bit (field p's own, or field p - 4's when p mod 8 >= 4, whose window
      // the compiler shares); the row is byte (bit - o) / 8 = 0 or 3 of the window.
      static_assert(!WIDE || PB == 6, "wide tables: 6-bit pair fields");
      const int o = bit - (((p >> 2) & 1) ? 24 : 0), owi = o / 32, osh = o % 32;
      const std::uint32_t x = osh == 0 ? w[owi] : __funnelshift_r(w[owi], w[owi + 1], osh);
      return __byte_perm(x, lanebyte, 0x5504u | (((bit - o) / 8) << 4));
    }
    return (field<PB>(p) << 8) | lanebyte;
  }
};

/// BITS bits of a row from bit `bit` on (LSB-first stream), for lane spans at head_dim 80, 96, 112
/// that are not an even number of bytes: the UNIT-byte units (4: rows 4-byte aligned; 2: rows of 2
/// mod 4 bytes) holding them are loaded and shifted down, so field p of the span starts at bit
/// p * PB of w as in CodeSpan (bits past the span, from the next lane's span, are never a field of
/// this one). Units past the unit holding the span's last bit are not read; that unit may reach past
/// the span (into the next lane's span, or into a padded row's unwritten padding: bits shifted out,
/// never used, though compute-sanitizer's initcheck would report the read).
template <int BITS, int UNIT>
struct BitSpan : CodeSpan<(BITS + 7) / 8> {
  using Base = CodeSpan<(BITS + 7) / 8>;
  static_assert(UNIT == 2 || UNIT == 4, "unit loads of 2 or 4 bytes");
  __device__ __forceinline__ void load_bits(const std::uint8_t* row, int bit) {
    constexpr int UB = 8 * UNIT, NU = (BITS + 2 * UB - 2) / UB;  // units touched at most
    constexpr int NX = (NU * UNIT + 3) / 4 + 1;
    static_assert(NX <= Base::kWords + 1, "span words");
    std::uint32_t x[Base::kWords + 1];
#pragma unroll
    for (int i = 0; i <= Base::kWords; ++i) x[i] = 0;
    const int sh = bit % UB;
    const std::uint8_t* p = row + (bit / UB) * UNIT;
#pragma unroll
    for (int i = 0; i < NU; ++i)
      if (UB * i < sh + BITS) {
        if constexpr (UNIT == 4)
          x[i] = reinterpret_cast<const std::uint32_t*>(p)[i];
        else
          x[i / 2] |= std::uint32_t(reinterpret_cast<const std::uint16_t*>(p)[i]) << (16 * (i % 2));
      }
#pragma unroll
    for (int i = 0; i < Base::kWords; ++i) this->w[i] = __funnelshift_r(x[i], x[i + 1], sh);
  }
};

/// A lane's span of BITS bits of a code row whose rows are UNIT-byte aligned. Powers of two
/// (kDenseRot false): CodeSpan (whole bytes there). head_dim 80, 96, 112: CodeSpan where the span
/// is an even number of bytes (16- or 32-bit loads at these sizes), else BitSpan.
template <int BITS, int UNIT, bool kDenseRot>
using LaneSpan = std::conditional_t<!kDenseRot || BITS % 16 == 0, CodeSpan<BITS / 8>, BitSpan<BITS, UNIT>>;

/// Byte offset ((byte k of x) << 8) | lanebyte (one PRMT).
__device__ __forceinline__ std::uint32_t byte_addr(std::uint32_t x, int k, std::uint32_t lanebyte) {
  return __byte_perm(x, lanebyte, 0x5504u | (k << 4));
}

/// 4-bit fields of NW words spread to bytes (two instructions per word), so each field's table
/// address is one PRMT: e[i] holds fields 8 i + {0, 2, 4, 6}, o[i] fields 8 i + {1, 3, 5, 7}.
template <int NW>
struct NibbleBytes {
  std::uint32_t e[NW], o[NW];
  __device__ __forceinline__ void spread(const std::uint32_t* w) {
#pragma unroll
    for (int i = 0; i < NW; ++i) e[i] = w[i] & 0x0F0F0F0Fu, o[i] = (w[i] >> 4) & 0x0F0F0F0Fu;
  }
  __device__ __forceinline__ std::uint32_t addr(int p, std::uint32_t lanebyte) const {
    const int i = p / 8, r = p % 8;
    return byte_addr((r & 1) ? o[i] : e[i], r / 2, lanebyte);
  }
};

/// Largest dynamic shared memory of one block on sm_90 (227 KB).
constexpr int kMaxBlockSmem = 232448;

/// NW warps per block, each with a private pipeline of 16-token steps (split chunks are multiples of
/// kTileT = 16 NW tokens, warp w takes steps w, w + NW, ...). PROD: TurboQuant-Prod keys, KB = their
/// MSE bits (0..3), rows [MSE codes (D * KB / 8 bytes)][QJL signs (D / 8 bytes, m = D)].
/// SPLIT: fractional TurboQuant-MSE widths (the outlier split, TqMseTables::split()) for keys and
/// values alike: rows [part 0: H = D/2 dims at KB bits][part 1: H dims at VB = KB - 1 bits], two fp16
/// norms per token; part 0 looks up the table's key slot (KB-bit pairs), part 1 its value slot.
/// F8 (KB = VB = 8): fp8 e4m3 keys and values (formats.h "fp8", fp8_decode's kernel 0): rows of D
/// code bytes and an fp16 scale per token in the norm's place, no rotation, no tables (an e4m3 pair
/// becomes an mma A register by one cvt).
/// RVQ (KB = VB = 4): two-stage residual scalar VQ at 2 bits per stage (formats.h "rvq"): rows
/// [stage 1 packed(D, 2)][stage 2 packed(D, 2)] and the fp16 norm, so a coordinate's code is 4 bits in
/// two planes. A pair-table index byte is (stage-1 codes of the pair) | (stage-2 codes) << 4, i.e.
/// e = p1a | p1b << 2 | p2a << 4 | p2b << 6 -> half2(c1[p1a] + c2[p2a], c1[p1b] + c2[p2b]); the pair is two
/// dims of a token (keys) or two tokens at one dim (values), the same entry either way.
/// KIVI (MODE kModeKivi; KB = VB = 2, 3 or 4): KIVI keys and values (formats.h "kivi"): a step's key rows
/// lie in one key group (G a multiple of 16), whose [channel][min, scale] fp16 words (4 D bytes) are
/// staged in the key-norm slot; the value slot holds the 16 tokens' [channel group][min, scale] words
/// (at most 512 bytes: head_dim / G_v <= 8; 1024 at head_dim 256, where G_v may be 16). Each A register is two codes as exact fp16 integers
/// (PRMT + LOP3 on 0x6400, minus 1024) times the channels' scales plus their mins (one hfma2, rounded
/// once, as the staged kernel's fp16 tile). No tables, no rotation.
/// PVQ (MODE kModePvq; KB = VB = 4, 3, 2 or 1; head_dim 64 / 128, and 3 bits at 256): product VQ at b bits (formats.h "pvq": g = 2, 2, 4, 8
/// coordinates per sub-vector, c = 8, 6, 8, 8-bit codes packed LSB first, no per-token scalars): code s of
/// a row is the centroid index of dims [g s, g s + g) in the codec's smoothed, rotated domain, and
/// C_s[code] as g fp16 values (one 4-, 8- or 16-byte look-up) is g / 2 mma A registers of a key row
/// (values: one byte permute per register with the neighbouring token's pair, as the generic path). One
/// table per side and sub-vector, [s][2^c] entries of 2 g bytes (D / 2 KB per side; D / 8 KB at 3 bits),
/// not replicated per lane: a look-up's banks follow its codes.
/// RVQ2 (MODE kModeRvq2; KB = VB = b = 3 or 4, head_dim 64 / 80 / 96 / 112 / 128; at 80 / 96 / 112 a lane's
/// span of a stage, D b / 4 key bits and D b / 8 value bits, is a LaneSpan: a BitSpan where it is not an even
/// number of bytes, i.e. every 3-bit span there and the 4-bit value spans at 80 / 112): two-stage RVQ at b bits
/// per stage
/// (rows [stage 1 packed(D, b)][stage 2 packed(D, b)] and the fp16 norm): each stage is a TurboQuant-like
/// part of all D dims with its own pair tables (stage 1 at byte 0, stage 2 at kRvq2S), and both parts
/// accumulate into the same score and value fragments (c1 + c2 summed by the mma, in fp32).
/// PAIR (MODE kModePair; D = 128 for head_dim 64, D = 256 for head_dim 128, KB and VB 2..4): TurboQuant-MSE
/// keys and values of two sequences per block, the same KV head: one block step is the head_dim-D step over
/// the concatenation [sequence b's row | sequence b + 1's row] with block-diagonal queries (columns 0 ..
/// G - 1: b's query heads, zero in dims D/2..D-1; columns G .. 2 G - 1: b + 1's, zero in dims 0..D/2-1; G
/// <= 4), so the step's head_dim-independent work (softmax over 8 columns, masks, waits, copy issue)
/// serves 2 G query heads instead of G (head_dim 128 since session 34: the d256 step's 4-bit rows are dense,
/// as kD128's). A stage holds each sequence's page block as it is in the pool
/// ([16 rows][16 fp16 norms], keys then values, sequence 0's block first): H16Layout::kH1 / vH1.
/// QJL (MODE kModeQjl; PROD with KB = 0, head_dim 64 / 80 / 96 / 112 / 128 / 256, m = head_dim): QJL keys (Zandieh, Daliri, Han,
/// arXiv 2406.03482: signs of S k, fp16 ||k||) on the Prod kernel's sign chain with no MSE part: the query is not
/// rotated (S q from q itself), a token's key scalar is its fp16 norm alone (2 bytes, the formats.h qjl block:
/// NBK 2) and gamma is 1, so logit = scale * ||k|| * kappa <S q, signs>.
constexpr int kModeTq = 0, kModeRvq = 1, kModeKivi = 2, kModePvq = 3, kModeRvq2 = 4, kModePair = 5, kModeQjl = 6;
template <int D, int KB, int VB, int NW, bool PROD = false, bool SPLIT = false, int MODE = kModeTq>
struct H16Layout {
  static constexpr bool F8 = KB == 8, RVQ = MODE == kModeRvq, KIVI = MODE == kModeKivi, PVQ = MODE == kModePvq,
                        RVQ2 = MODE == kModeRvq2, PAIR = MODE == kModePair, QJL = MODE == kModeQjl;
  static_assert(!QJL || (PROD && KB == 0 && !SPLIT && (D == 64 || D == 80 || D == 96 || D == 112 || D == 128 || D == 256)),
                "qjl: the Prod kernel with no MSE part, head_dim 64 / 80 / 96 / 112 / 128 / 256");
  static_assert(!PAIR || ((D == 128 || D == 256) && KB >= 2 && KB <= 4 && VB >= 2 && VB <= 4 && !PROD && !SPLIT),
                "pair: two head_dim-64 or head_dim-128 sequences, 2..4-bit keys and values");
  static_assert(!RVQ2 || ((KB == 3 || KB == 4) && VB == KB && !PROD && !SPLIT &&
                          (D == 64 || D == 128 || D == 80 || D == 96 || D == 112)),
                "rvq2: 3 + 3 or 4 + 4 bits, head_dim 64 / 80 / 96 / 112 / 128");
  static_assert(!F8 || (VB == 8 && !PROD && !SPLIT && MODE == kModeTq), "fp8: keys and values e4m3");
  static_assert(!PVQ || (KB >= 1 && KB <= 4 && VB == KB && !PROD && !SPLIT && (D == 64 || D == 128 || (D == 256 && KB == 3))),
                "pvq: 1..4 bits, head_dim 64 / 128; 3 bits at 256");
  /// PVQ: bytes of a table entry (g fp16 values), code bits c and entries 2^c per sub-vector table.
  static constexpr int kPvqE = PVQ ? (KB == 3 ? 4 : 16 / KB) : 0, kPvqC = KB == 3 ? 6 : 8, kPvqK = 1 << kPvqC;
  static_assert(!RVQ || (KB == 4 && VB == 4 && !PROD && !SPLIT && ((D & (D - 1)) == 0 || D == 80 || D == 96 || D == 112)),
                "rvq: 2 + 2 bits, head_dim 64 / 80 / 96 / 112 / 128 / 256");
  static_assert(!KIVI || (KB >= 2 && KB <= 4 && VB == KB && !PROD && !SPLIT && (D & (D - 1)) == 0), "kivi: 2, 3 or 4 bits");
  static constexpr int kTileT = 16 * NW;
  static constexpr int H = D / 2;
  static constexpr int cbO = SPLIT ? H * KB / 8 : 0;  // SPLIT: byte offset of part 1 in a row
  static constexpr int cbS = H * KB / 8 + H * VB / 8;  // SPLIT: row bytes
  static constexpr int cbM = SPLIT ? cbS : (RVQ2 ? 2 : 1) * D * KB / 8;  // RVQ2: both stages' planes
  static constexpr int cbK = cbM + (PROD ? D / 8 : 0), cbV = SPLIT ? cbS : (RVQ2 ? 2 : 1) * D * VB / 8;
  /// Key rows: dense where a lane's span is 2..16 bytes (the four lanes of a row read it whole, so
  /// a phase of the warp's look-up reads consecutive rows: conflict-free) or the 3-bit rows of 24,
  /// 48 and 96 bytes (spans of 6, 12, 24 bytes: 16-bit, 32-bit, 64-bit loads; at 48 and 96 bytes
  /// every key load instruction hits 32 distinct banks, at 24 bytes each of the three 16-bit loads
  /// is 2-way); otherwise, and for values (lanes of a phase read four rows two apart), padded to an
  /// odd number of 16-byte units (mma_row_stride).
  /// head_dim 80, 96, 112: every row (10 to 56 bytes; spans of at most 14 bytes), so every width
  /// takes the bulk copies (rows of 2 mod 4 bytes too: a step of 16 rows is a multiple of 16 bytes).
  static constexpr bool dense_ok(int cb) {
    return (D & (D - 1)) != 0 || cb == 8 || cb == 16 || cb == 24 || cb == 32 || cb == 48 || cb == 64 || cb == 96;
  }
  /// fp8 at 16 warps (head_dim 128): dense 128-byte key rows (2-way conflicts on the key loads) so that
  /// three steps per warp fit in shared memory (padded rows need 1.5 KB more than a block may have).
  /// KIVI at head_dim 256 and 4 bits: dense 128-byte rows too (2-way conflicts on the key loads, 4-way on the
  /// value loads), so its rows and scalars are bulk-copied like the other KIVI widths.
  /// TurboQuant-MSE at head_dim 256: 4-bit key or value rows (128 bytes) dense too (since session 30), so
  /// every integer width takes the bulk copies and 4-bit keys with 4-bit values keep 3 stages at 12 warps
  /// (2 with padded 144-byte rows), at the price of KIVI's 2-way (keys) / 4-way (values) conflicts. H200 run
  /// s30-3 (A/B, b16 / b64 x 32k / 128k, two passes): 4/4 1.04-1.06x at 12 warps, 1.08-1.23x at 8; 2 and 3
  /// bits unchanged (docs/CUDA_NOTES.md "Session 30").
  static constexpr bool kD128 = D == 256 && (MODE == kModeTq || MODE == kModePair) && !F8;
  /// SPLIT (rows of 24, 40, 56 bytes at head_dim 128, 48, 80, 112 at 256: 1.5, 2.5, 3.5 bits): dense rows
  /// and bulk copies too, as the integer widths (since session 32; until then cp.async per lane, and at
  /// head_dim 128 rows padded to 48 / 80 bytes). Static count of one step (tools/sass_loopstat.py walk, page
  /// 16, with the other SPLIT changes of session 32: P by movmatrix, cross-token value fields, one chain
  /// per part): head_dim 128 3.5 / 2.5 / 1.5 bits 522 / 526 / 491 -> 373 / 396 / 387 instructions, head_dim
  /// 256 (8 warps) 737 / 774 / 773 -> 529 / 562 / 592; ptxas: the 3.5-bit 12-warp instances no longer spill
  /// (24 bytes of spill stores each before), the 2.5-bit 12-warp split instance (FUSE false) now spills 4 bytes.
  static constexpr bool kSplitDense = SPLIT && (D == 128 || D == 256);
  static constexpr bool kDenseK = kSplitDense || (!PROD && !SPLIT &&
                                                  (dense_ok(cbK) || (F8 && NW == 16) || ((KIVI || RVQ2 || kD128) && cbK == 128)));
  /// kBulk: key and value rows dense, so a step of a page (page_size >= 16) is four contiguous
  /// ranges, copied by one lane with cp.async.bulk (TMA) onto a per-(warp, slot) mbarrier. Values
  /// are then read as rows tig + 4 r (r = 0..3: four consecutive rows per load; conflict-free except
  /// 48-byte rows, whose 16-bit loads are 2-way; 128-byte rows, dense only for KIVI, RVQ2 and TurboQuant at
  /// head_dim 256 (kD128), are 4-way) and
  /// the P fragments follow the same token order. 3-bit rows became dense in session 6, with the wide
  /// table (H200 run s6-2, A/B, b16 x 64k, means of two passes: d64 163.9 -> 144.2 us, d256
  /// 121.2 -> 105.9, d128 386.7 -> 381.5; dense rows without the wide table: d128 389.2).
  static constexpr bool kBulk = kDenseK && (kSplitDense || dense_ok(cbV) || ((KIVI || RVQ2 || kD128) && cbV == 128));
  static_assert(!PAIR || kBulk, "pair: dense rows");
  /// PAIR: a row is one sequence's row (half of the step's D dims).
  static constexpr int rsK = PAIR ? cbK / 2 : kDenseK ? cbK : mma_row_stride(cbK),
                       rsV = PAIR ? cbV / 2 : kBulk ? cbV : mma_row_stride(cbV);
  static constexpr int NBK = PVQ ? 0 : (PROD && !QJL) || SPLIT ? 4 : 2;  // staged key-scalar bytes per token (PVQ: none)
  static constexpr int NBV = PVQ ? 0 : SPLIT ? 4 : 2;          // staged value-norm bytes per token
  /// Bytes of a step's key-norm and value-norm slots (KIVI: the key group's and the tokens' scalars).
  /// KIVI's value slot: 16 tokens x head_dim / G_v words, G_v >= head_dim / 8 (>= 16 at 256: 16 groups).
  static constexpr int KSB = KIVI ? 4 * D : 16 * NBK, VSB = KIVI ? 64 * (D >= 256 ? 16 : 8) : 16 * NBV;
  /// One warp step: [key codes 16 x rsK][key norms 16 x NBK][value codes 16 x rsV][value norms 16 x NBV]
  /// (with page_size 16 a pool's codes and norms of a step are one contiguous range of the page:
  /// kBulk copies each pool's step whole).
  /// PAIR: [seq 0 key block][seq 1 key block][seq 0 value block][seq 1 value block], each block a
  /// page's [16 rows][16 norms] (kH1 / vH1 bytes). The second sequence's block starts kO1 / vO1 bytes after the
  /// first's: kH1 / vH1 plus a skew (16 or 32 bytes where it helps) that moves its lanes' code loads onto other
  /// banks. Counted per step (wavefronts of the key loads of rows kr, kr + 8 / of the four value rows, a model
  /// of the 8-, 16- and 32-lane phases of 128-, 64- and 32-bit loads): head_dim 128 pairs (D 256) 4-bit keys
  /// 64 -> 32 (skew 16), 3-bit values 24 -> 12 (skew 32); head_dim 64 pairs (D 128) 3-bit keys 12 -> 6, 2-bit
  /// values 8 -> 4 (skew 32); the other widths are at their floor or no skew lowers them.
  static constexpr int kH1 = PAIR ? 16 * rsK + KSB : 0, vH1 = PAIR ? 16 * rsV + VSB : 0;
  static constexpr int kSkewK = !PAIR ? 0 : D == 256 ? (KB == 4 ? 16 : 0) : (KB == 3 ? 32 : 0);
  static constexpr int kSkewV = !PAIR ? 0 : D == 256 ? (VB == 3 ? 32 : 0) : (VB == 2 ? 32 : 0);
  static constexpr int kO1 = kH1 + kSkewK, vO1 = vH1 + kSkewV;
  static constexpr int wstep = PAIR ? kO1 + kH1 + vO1 + vH1 : 16 * (rsK + rsV) + KSB + VSB;
  static constexpr int off_kn = 16 * rsK, off_vc = PAIR ? kO1 + kH1 : off_kn + KSB, off_vn = off_vc + 16 * rsV;
  /// Pair tables: row e (256 bytes) holds the key entry e of lane L at byte 4 L and, when values
  /// have their own codebook, the value entry e at 128 + 4 L (so a look-up address is
  /// (e << 8) | lane byte: one PRMT for byte-wide fields; 32 lanes hit 32 banks).
  static constexpr int KE = KB > 0 ? 1 << (2 * KB) : 0, VE = 1 << (2 * VB);
  /// 3-bit codes (6-bit pair fields, which straddle bytes): the table gets 256 rows, entry e holding
  /// the pair of e mod 64, so a field's address is the byte at its first bit (CodeSpan::row_addr
  /// WIDE).
  static constexpr bool kWideK = KB == 3, kWideV = VB == 3;
  static constexpr int KR = kWideK ? 256 : KE, VR = kWideV ? 256 : VE;  // rows holding key / value entries
  /// kQuad (2-bit keys and values): quad tables instead, one for keys at byte 0 and one for values
  /// at kQuadV: row e (256 bytes) holds for lane L at byte 8 L the uint2 (half2(c[e0], c[e1]),
  /// half2(c[e2], c[e3])) of the four 2-bit codes e = e0 | e1 << 2 | e2 << 4 | e3 << 6, so one 64-bit
  /// look-up (half-warps on 16 distinct bank pairs) gives an mma A register pair (a0, a1) or (a2, a3):
  /// an index byte is two tokens x two dims (keys: a pair field of rows gid and gid + 8; values: the
  /// cross-token fields of dims d0 and d1), built from two nibble fields per byte.
  static constexpr bool kQuad = !PROD && !SPLIT && !PVQ && KB == 2 && VB == 2;
  static constexpr int kQuadV = 256 * 256;
  /// PVQ: the key tables [D/g sub-vectors][2^c][g] fp16 at byte 0, the value tables at kPvqV (2 D 2^c bytes).
  static constexpr int kPvqV = PVQ ? 2 * D * kPvqK : 0;
  /// RVQ2: one such set of pair tables per stage, stage 2's at kRvq2S.
  static constexpr int kRvq2S = RVQ2 ? (KR > VR ? KR : VR) * 256 : 0;
  static constexpr int tab =
      F8 || KIVI ? 0 : PVQ ? 2 * kPvqV : RVQ2 ? 2 * kRvq2S : kQuad ? 2 * kQuadV : (KR > VR ? KR : VR) * 256;
  static constexpr int qrot = kMmaHeads * D * 4;
  /// Per warp P[16][8] (p_at): unused since session 32 (SPLIT's P goes by movmatrix too); kept because
  /// removing it changes every instance's shared-memory size (and some stage counts): only with a device A/B.
  static constexpr int pbuf = NW * kPWarpFloats * 4;
  static constexpr int qp = qrot > pbuf ? qrot : pbuf;        // Pi q (set-up) and P (main loop) overlaid
  /// The warps' merge (after the main loop, over the stages or the tables: kMergeInTab): per warp acc[8 heads]
  /// in rows of kAccRow floats (merge_col) and m, l.
  static constexpr int kAccRow = D + 20;
  static constexpr int merge = NW * kMmaHeads * (kAccRow + 2) * 4;
  /// The merge goes over the tables where they are at least as large (they are dead after the main loop's
  /// block barrier; nothing else lives below `rest`): quad tables, 64 KB pair tables at head_dim 64..96,
  /// RVQ2 and product-VQ tables, so the merge no longer bounds the stages' bytes there. It changed the
  /// stage count of one instance only, head_dim 256 with 2-bit keys and values at 12 warps (107 KB of merge
  /// rows; now 3 stages); the others just need fewer bytes (none of them fits a second block per SM: the
  /// 16-warp instances take the whole register file, the 8-warp ones stay above 113 KB).
  static constexpr bool kMergeInTab = tab >= merge;
  static constexpr int merge_rest = kMergeInTab ? 0 : merge;  // merge bytes that live after the tables
  /// Pipeline depth of each warp: 4 steps of 16 tokens (3 in flight while one is computed) where the
  /// block still fits, else 3, else 2 (PVQ at head_dim 128 with 16 warps: 128 KB of tables; head_dim 256
  /// at 12 warps with Prod keys K2V4 / K3V3 / K3V4, fp8 or 2 + 2-bit RVQ; RVQ2 4 + 4 at head_dim 128).
  static constexpr int mbar = kBulk ? NW * 4 * 8 : 0;  // kBulk: one mbarrier per (warp, slot)
  static constexpr int base_bytes(int st) {
    return tab + qp + mbar + (PROD ? 4 * 256 + (D / 16) * 32 * 8 + kMmaHeads * D * 4 : 0) +
           (NW * st * wstep > merge_rest ? NW * st * wstep : merge_rest);
  }
  static constexpr int kStages = base_bytes(4) <= kMaxBlockSmem ? 4 : base_bytes(3) <= kMaxBlockSmem ? 3 : 2;
  static constexpr int stages_bytes = NW * kStages * wstep;
  /// Layout after the tables (tab bytes).
  static constexpr int stab = PROD ? 4 * 256 : 0;              // sign-pair table: 4 rows as in tab
  static constexpr int qsfrag = PROD ? (D / 16) * 32 * 8 : 0;  // (S Pi q) B fragments: uint2 per (kk, lane)
  static constexpr int qsk = PROD ? qrot : 0;                  // S Pi q of the 8 heads (setup only)
  static constexpr int off_qrot = 0, off_p = 0, off_mbar = qp, off_stab = off_mbar + mbar, off_qs = off_stab + stab,
                       off_qsk = off_qs + qsfrag, off_stage = off_qsk + qsk;
  static constexpr int rest = off_stage + (stages_bytes > merge_rest ? stages_bytes : merge_rest);
  static constexpr int bytes() { return tab + rest; }
  static_assert(wstep % 16 == 0 && off_stage % 16 == 0 && kO1 % 16 == 0 && off_vc % 16 == 0 && vO1 % 16 == 0,
                "16-byte aligned warp steps and blocks (bulk copies)");
  /// The block's shared memory fits sm_90's limit (asserted by the kernel; launch_h16 asks it of
  /// candidate warp counts).
  static constexpr bool kFits = tab + rest <= kMaxBlockSmem;
};

/// The 32-bit word at byte off of a pair table (shared-window address tab, warp-uniform): one LDS
/// (written in PTX so the compiler keeps the address one register plus the uniform base; not
/// volatile: a pure load of a table written before the main loop's barriers, ordered after them by
/// its data dependence on the codes).
__device__ __forceinline__ std::uint32_t lds_at(std::uint32_t tab, std::uint32_t off) {
  std::uint32_t v;
  asm("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(tab + off));
  return v;
}

/// base + EB * (byte k of x): the address of entry (byte k of x) of a table of EB-byte entries at base
/// (one PRMT and one LEA; product VQ's per-sub-vector tables).
template <int EB>
__device__ __forceinline__ std::uint32_t entry_addr(std::uint32_t x, int k, std::uint32_t base) {
  static_assert(EB == 4 || EB == 8 || EB == 16, "entry bytes");
  return base + (__byte_perm(x, 0u, 0x4440u + k) << (EB == 4 ? 2 : EB == 8 ? 3 : 4));
}

/// Product VQ (H16Layout::PVQ): the address of code i's entry in the tables of the span's first
/// sub-vector at base (EB-byte entries, 2^CB per sub-vector table): a byte code by entry_addr, a 6-bit
/// field (3 bits: EB = 4) by a shift and mask; the sub-vector's table offset i 2^CB EB is a constant.
template <int EB, int CB, int SPAN>
__device__ __forceinline__ std::uint32_t pvq_addr(const CodeSpan<SPAN>& k, int i, std::uint32_t base) {
  const std::uint32_t sub = static_cast<std::uint32_t>(i) * (EB << CB);
  if constexpr (CB == 8) return entry_addr<EB>(k.w[i / 4], i % 4, base) + sub;
  else return base + (k.template field<CB>(i) << 2) + sub;
}

/// The EB-byte entry at shared-window address addr as EB / 4 words (one LDS.32, .64 or .128).
template <int EB>
__device__ __forceinline__ void lds_entry(std::uint32_t addr, std::uint32_t (&w)[EB / 4]) {
  if constexpr (EB == 4) {
    asm("ld.shared.b32 %0, [%1];" : "=r"(w[0]) : "r"(addr));
  } else if constexpr (EB == 8) {
    asm("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "r"(addr));
  } else {
    asm("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(addr));
  }
}

/// The 64-bit entry at byte off of a quad table (H16Layout::kQuad), as lds_at.
__device__ __forceinline__ uint2 lds64_at(std::uint32_t tab, std::uint32_t off) {
  uint2 v;
  asm("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(tab + off));
  return v;
}

/// The e4m3 bytes 2 H and 2 H + 1 of x as an f16x2 register (byte 2 H in the low half;
/// cvt.rn.f16x2.e4m3x2: exact, every e4m3 value is an fp16 value, as the CUDA-core fp8 kernel's
/// conversion). Written on the 16-bit half itself, so ptxas can select the high half in the F2FP.
template <int H = 0>
__device__ __forceinline__ std::uint32_t e4m3x2_h2(std::uint32_t x) {
  std::uint32_t r;
  if constexpr (H == 0)
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}" : "=r"(r) : "r"(x));
  else
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, h;\n}" : "=r"(r) : "r"(x));
  return r;
}

/// KIVI: B-bit code fields (B = 2, 3 or 4) at byte `by` of x (low half) and of y (high half), bits
/// [0, B) of that byte, as the fp16 integers 1024 + code (0x6400 has a zero low byte: one PRMT moves the
/// two bytes into the halves' low bytes, one LOP3 masks them and sets the exponent).
template <int B>
__device__ __forceinline__ std::uint32_t kivi_int_pair(std::uint32_t x, std::uint32_t y, int by) {
  const std::uint32_t t = __byte_perm(x, y, by | (by << 4) | ((4 + by) << 8) | ((4 + by) << 12));
  return (t & (((1u << B) - 1u) * 0x00010001u)) | 0x64006400u;
}

/// KIVI: min + scale * code of two elements (half2 each), from kivi_int_pair's 1024 + code (exact
/// subtraction), one fp16 fma (rounded once, as the staged kernel's tile).
__device__ __forceinline__ std::uint32_t kivi_dequant(std::uint32_t codes, std::uint32_t sc, std::uint32_t mn) {
  const __half2 c = __hsub2(*reinterpret_cast<const __half2*>(&codes), __half2(__half(1024.0f), __half(1024.0f)));
  const __half2 r = __hfma2(c, *reinterpret_cast<const __half2*>(&sc), *reinterpret_cast<const __half2*>(&mn));
  return *reinterpret_cast<const std::uint32_t*>(&r);
}

// mbarrier and bulk-copy (TMA) primitives (PTX ISA 8.0, sm_90) on shared-window addresses
// (mbar_init, mbar_wait, bulk_load: common.cuh).
/// Arrives on bar when this thread's earlier cp.async copies have completed (counts one arrival).
__device__ __forceinline__ void mbar_arrive_cp_async(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
/// One lane of the (converged) warp, chosen by elect.sync: adds tx bytes to bar's expected
/// transactions and arrives (tx = 0: arrives only), then copies b0 bytes src0 -> dst0 and b1 bytes
/// src1 -> dst1 (bulk copies completing on bar; sizes multiples of 16, addresses 16-byte aligned).
/// All operands must be warp-uniform.
__device__ __forceinline__ void elect_bulk2(std::uint32_t bar, unsigned tx, std::uint32_t dst0, const void* src0,
                                            unsigned b0, std::uint32_t dst1, const void* src1, unsigned b1) {
  if (tx != 0) {
    asm volatile(
        "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n"
        " @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
        " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %4, [%0];\n"
        " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%5], [%6], %7, [%0];\n}" ::"r"(bar),
        "r"(tx), "r"(dst0), "l"(src0), "r"(b0), "r"(dst1), "l"(src1), "r"(b1)
        : "memory");
  } else {
    asm volatile(
        "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n"
        " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%1], [%2], %3, [%0];\n"
        " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%4], [%5], %6, [%0];\n}" ::"r"(bar),
        "r"(dst0), "l"(src0), "r"(b0), "r"(dst1), "l"(src1), "r"(b1)
        : "memory");
  }
}
/// elect_bulk2 with four copies under one elected lane (tx != 0): bi bytes srci -> dsti.
__device__ __forceinline__ void elect_bulk4(std::uint32_t bar, unsigned tx, std::uint32_t dst0, const void* src0,
                                            unsigned b0, std::uint32_t dst1, const void* src1, unsigned b1,
                                            std::uint32_t dst2, const void* src2, unsigned b2, std::uint32_t dst3,
                                            const void* src3, unsigned b3) {
  asm volatile(
      "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n"
      " @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
      " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %4, [%0];\n"
      " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%5], [%6], %7, [%0];\n"
      " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%8], [%9], %10, [%0];\n"
      " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%11], [%12], %13, [%0];\n}" ::"r"(bar),
      "r"(tx), "r"(dst0), "l"(src0), "r"(b0), "r"(dst1), "l"(src1), "r"(b1), "r"(dst2), "l"(src2), "r"(b2),
      "r"(dst3), "l"(src3), "r"(b3)
      : "memory");
}
/// One elected lane of the (converged) warp arrives on bar (no transaction bytes).
__device__ __forceinline__ void elect_arrive(std::uint32_t bar) {
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}" ::"r"(
                   bar)
               : "memory");
}

/// Copies one warp step of one pool (positions p0 .. p0 + 15, p0 a multiple of 16) into the warp's
/// stage: codes as 16 rows of RS bytes at s_codes, norms as NBY bytes per token at s_norm (NBY = 2:
/// the fp16 norm of TurboQuant-MSE; NBY = 4: TurboQuant-Prod's [||x|| | gamma] word; NBY = 0: none). pool_g: the
/// pool + g * stride (this KV head's block of page 0); pstride: bytes between pages (fits 32 bits,
/// checked by the host); page: this lane's page id (fast: the page of p0 in every lane; otherwise
/// lane r holds the page of row r mod 16). fast (page_size >= 16): the 16 rows are consecutive
/// slots of one page, so codes and norms are two contiguous ranges and are copied whole (rows
/// outside [lo, n) lie in the same allocated page; the caller masks them). Otherwise only rows
/// [lo, n) are copied, each from its own page. All 32 lanes must call it (it shuffles).
template <int CB, int RS, int NBY>
__device__ __forceinline__ void warp_copy(std::uint8_t* s_codes, std::uint8_t* s_norm, const std::uint8_t* pool_g,
                                          unsigned pstride, int shift, bool fast, unsigned page, int p0, int lo,
                                          int n, int lane) {
  // Chunks of the largest of 16, 8, 4, 2 bytes dividing a row (4 and 2 only at head_dim 80, 96, 112:
  // cp.async copies 4, 8 or 16 bytes, so rows of 2 mod 4 bytes are plain 2-byte loads and stores,
  // ordered for the consumer by the same __syncwarp after its wait).
  constexpr int CH = CB % 16 == 0 ? 16 : CB % 8 == 0 ? 8 : CB % 4 == 0 ? 4 : 2, CPR = CB / CH, NC = 16 * CPR;
  auto chunk = [](std::uint8_t* dst, const std::uint8_t* src) {
    if constexpr (CH == 2)
      *reinterpret_cast<std::uint16_t*>(dst) = __ldg(reinterpret_cast<const unsigned short*>(src));
    else
      cp_async_n<CH>(dst, src);
  };
  const unsigned pmask = (1u << shift) - 1u;
  if (fast) {
    const unsigned slot = static_cast<unsigned>(p0) & pmask;
    const std::uint8_t* blk = pool_g + static_cast<std::uint64_t>(page) * pstride;  // one IMAD.WIDE.U32
    const std::uint8_t* src = blk + slot * CB;
#pragma unroll
    for (int c0 = 0; c0 < NC; c0 += 32) {
      const int c = c0 + lane;
      if (NC % 32 == 0 || c < NC) {
        const int row = c / CPR, piece = c - row * CPR;
        chunk(s_codes + row * RS + piece * CH, src + c * CH);
      }
    }
    if (lane < NBY) cp_async_n<16>(s_norm + 16 * lane, blk + ((pmask + 1u) * CB + slot * NBY) + 16 * lane);
    return;
  }
#pragma unroll
  for (int c0 = 0; c0 < NC; c0 += 32) {
    const int c = c0 + lane, row = min(c, NC - 1) / CPR, piece = c - row * CPR;
    const unsigned pg = __shfl_sync(0xffffffffu, page, row);
    if (c < NC && row >= lo && row < n) {
      const unsigned pos = static_cast<unsigned>(p0 + row);
      chunk(s_codes + row * RS + piece * CH,
            pool_g + static_cast<std::uint64_t>(pg) * pstride + ((pos & pmask) * CB + piece * CH));
    }
  }
  const int row = lane;
  if (NBY > 0 && row < 16 && row >= lo && row < n) {  // (NBY 0: no per-token scalars, product VQ)
    const unsigned pos = static_cast<unsigned>(p0 + row);
    const std::uint8_t* src =
        pool_g + static_cast<std::uint64_t>(page) * pstride + ((pmask + 1u) * CB + (pos & pmask) * NBY);
    if (NBY == 4 && CB % 4 != 0 && pmask == 0) {
      // Prod keys with code rows of 2 mod 4 bytes (head_dim 80, 112; QJL-part-only rows of 10 / 14 bytes): at
      // page_size 1 (pmask 0) the page's scalars start at 2 mod 4, so the [||x||, gamma] word is two 2-byte
      // loads (at even page sizes page_size * CB is a multiple of 4: cp.async below).
      const unsigned short* h = reinterpret_cast<const unsigned short*>(src);
      reinterpret_cast<unsigned*>(s_norm)[row] = __ldg(h) | (static_cast<unsigned>(__ldg(h + 1)) << 16);
    } else if constexpr (NBY == 4) {
      cp_async_n<4>(s_norm + 4 * row, src);
    } else if constexpr (NBY == 2) {
      reinterpret_cast<unsigned short*>(s_norm)[row] = __ldg(reinterpret_cast<const unsigned short*>(src));
    }
  }
}

/// These two helpers are the integer kernel's generic look-up branches (1/3/4-bit keys, 1/3-bit
/// values) written for one part of a row. The integer branches keep their inline copies: calling
/// the helpers from them changed the SASS of 132 integer instances (20 in length; checked in session
/// 9), and that tuned code is only changed with a device A/B.
/// SPLIT key scores of one part: rows a (token gid) and c (token gid + 8) at this part's byte offset,
/// SPAN bytes per lane (dims SPAN * 8 / (PB / 2) ... of the part, at SPAN * tig), pair fields of PB bits
/// looked up at table byte lanebyte (the key slot for part 0, the value slot for part 1), against
/// the B fragments qb[0 .. KK) (two accumulator chains, even / odd kk).
/// ONE: every k-step into s2[0] (SPLIT: each part is one chain already; RVQ2 alternates chains).
/// key_part_lookups: the same from the lane's spans k0 (row a), k1 (row c) already loaded (CodeSpan or
/// BitSpan: the RVQ2 stages at head_dim 80, 96, 112 whose spans are not whole bytes).
template <int PB, bool WIDE, int KK, bool ONE = false, class S>
__device__ __forceinline__ void key_part_lookups(const S& k0, const S& k1, std::uint32_t tabs, std::uint32_t lanebyte,
                                                 const std::uint32_t (*qb)[2], float (&s2)[2][4]) {
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
    std::uint32_t af[4];
    af[0] = lds_at(tabs, k0.template row_addr<PB, WIDE>(2 * kk, lanebyte));
    af[1] = lds_at(tabs, k1.template row_addr<PB, WIDE>(2 * kk, lanebyte));
    af[2] = lds_at(tabs, k0.template row_addr<PB, WIDE>(2 * kk + 1, lanebyte));
    af[3] = lds_at(tabs, k1.template row_addr<PB, WIDE>(2 * kk + 1, lanebyte));
    mma_f16(s2[ONE ? 0 : kk & 1], af, qb[kk][0], qb[kk][1]);
  }
}
template <int SPAN, int PB, bool WIDE, int KK, bool ONE = false>
__device__ __forceinline__ void split_key_part(const std::uint8_t* row_a, const std::uint8_t* row_c, int tig,
                                               std::uint32_t tabs, std::uint32_t lanebyte,
                                               const std::uint32_t (*qb)[2], float (&s2)[2][4]) {
  CodeSpan<SPAN> k0, k1;
  k0.load(row_a + SPAN * tig);
  k1.load(row_c + SPAN * tig);
  key_part_lookups<PB, WIDE, KK, ONE>(k0, k1, tabs, lanebyte, qb, s2);
}

/// SPLIT value accumulation of one part: the lane's SPAN bytes of value rows r0, r0 + R1, r0 + R2,
/// r0 + R3 (vr: row r0 at the lane's span; RS bytes between rows), pair fields of PB bits (dims pair j
/// of the lane's JJ) looked up at lanebyte, acc[j] += A . (pb0, pb1) as the integer kernel's generic path.
/// value_part_lookups: the same from the four rows' spans already loaded (CodeSpan or BitSpan).
template <int PB, bool WIDE, int JJ, class S>
__device__ __forceinline__ void value_part_lookups(const S& v0, const S& v1, const S& v2, const S& v3,
                                                   std::uint32_t tabs, std::uint32_t lanebyte, std::uint32_t pb0,
                                                   std::uint32_t pb1, float (*acc)[4]) {
#pragma unroll
  for (int j = 0; j < JJ; ++j) {
    const std::uint32_t c0 = lds_at(tabs, v0.template row_addr<PB, WIDE>(j, lanebyte));
    const std::uint32_t c1 = lds_at(tabs, v1.template row_addr<PB, WIDE>(j, lanebyte));
    const std::uint32_t c2 = lds_at(tabs, v2.template row_addr<PB, WIDE>(j, lanebyte));
    const std::uint32_t c3 = lds_at(tabs, v3.template row_addr<PB, WIDE>(j, lanebyte));
    std::uint32_t af[4];
    af[0] = __byte_perm(c0, c1, 0x5410);  // (tok r0, r0 + R1) at dim d0
    af[1] = __byte_perm(c0, c1, 0x7632);  // same tokens at dim d1
    af[2] = __byte_perm(c2, c3, 0x5410);
    af[3] = __byte_perm(c2, c3, 0x7632);
    mma_f16(acc[j], af, pb0, pb1);
  }
}
template <int SPAN, int PB, bool WIDE, int JJ, int RS, int R1, int R2, int R3>
__device__ __forceinline__ void split_value_part(const std::uint8_t* vr, std::uint32_t tabs, std::uint32_t lanebyte,
                                                 std::uint32_t pb0, std::uint32_t pb1, float (*acc)[4]) {
  CodeSpan<SPAN> v0, v1, v2, v3;
  v0.load(vr);
  v1.load(vr + R1 * RS);
  v2.load(vr + R2 * RS);
  v3.load(vr + R3 * RS);
  value_part_lookups<PB, WIDE, JJ>(v0, v1, v2, v3, tabs, lanebyte, pb0, pb1, acc);
}

/// Cross-token 6-bit fields of two rows' 3-bit codes (the lane's span of rows x and y at the same dims): e
/// (o) holds at bit 6 i the codes of the span's dim 2 i (2 i + 1) of x (bits 0-2) and of y (bits 3-5), so
/// the pair-table entry of field i (CodeSpan::row_addr<6, true>) is the A register (x, y) at that dim, as the
/// 4-bit path's nibble merges. The integer kernel's VB = 3 values and split_value_cross's 3-bit parts.
template <class S>
__device__ __forceinline__ void cross3(const S& x, const S& y, S& e, S& o) {
  constexpr int NW3 = S::kWords;
#pragma unroll
  for (int k = 0; k < NW3; ++k) {
    std::uint32_t m = 0;  // bits of word k whose stream position mod 6 is 0, 1 or 2
    for (int b = 0; b < 32; ++b) m |= ((32 * k + b) % 6 < 3 ? 1u : 0u) << b;
    const std::uint32_t yl = k == 0 ? y.w[0] << 3 : __funnelshift_l(y.w[k - 1], y.w[k], 3);
    const std::uint32_t xr = k + 1 < NW3 ? __funnelshift_r(x.w[k], x.w[k + 1], 3) : x.w[k] >> 3;
    e.w[k] = bitsel(x.w[k], yl, m);
    o.w[k] = bitsel(xr, y.w[k], m);
  }
}

/// SPLIT value accumulation of one part at B bits per code (SPAN bytes of value rows r0, r0 + R1, r0 + R2,
/// r0 + R3 per lane, dims pair j of the lane's JJ): cross-token pair fields, as the integer kernel's VB = 4,
/// 3 and 2 branches (whose 4- and 2-bit merges stay inline copies, see above; both call cross3 at 3 bits, the
/// same SASS as the inline copies they replaced): a field holds the codes of two rows at one
/// dim, so its pair-table entry (the part's table slot, lanebyte) is the A register itself, one look-up per
/// register and no byte permute of two rows' entries. B = 1 takes split_value_part's generic path.
template <int SPAN, int B, int JJ, int RS, int R1, int R2, int R3>
__device__ __forceinline__ void split_value_cross(const std::uint8_t* vr, std::uint32_t tabs, std::uint32_t lanebyte,
                                                  std::uint32_t pb0, std::uint32_t pb1, float (*acc)[4]) {
  if constexpr (B == 1) {
    split_value_part<SPAN, 2, false, JJ, RS, R1, R2, R3>(vr, tabs, lanebyte, pb0, pb1, acc);
  } else {
    using S = CodeSpan<SPAN>;
    S v0, v1, v2, v3;
    v0.load(vr);
    v1.load(vr + R1 * RS);
    v2.load(vr + R2 * RS);
    v3.load(vr + R3 * RS);
    constexpr int NWD = (SPAN + 3) / 4;  // words holding the span
    if constexpr (B == 4) {
      constexpr std::uint32_t m = 0x0F0F0F0Fu;
#pragma unroll
      for (int wq = 0; wq < NWD; ++wq) {
        const std::uint32_t lo01 = bitsel(v0.w[wq], v1.w[wq] << 4, m), hi01 = bitsel(v0.w[wq] >> 4, v1.w[wq], m);
        const std::uint32_t lo23 = bitsel(v2.w[wq], v3.w[wq] << 4, m), hi23 = bitsel(v2.w[wq] >> 4, v3.w[wq], m);
#pragma unroll
        for (int k = 0; k < 4 && 4 * wq + k < JJ; ++k) {
          std::uint32_t af[4];
          af[0] = lds_at(tabs, byte_addr(lo01, k, lanebyte));  // (rows r0, r0 + R1) at dim d0
          af[1] = lds_at(tabs, byte_addr(hi01, k, lanebyte));  // same rows at d1
          af[2] = lds_at(tabs, byte_addr(lo23, k, lanebyte));  // (r0 + R2, r0 + R3) at d0
          af[3] = lds_at(tabs, byte_addr(hi23, k, lanebyte));
          mma_f16(acc[4 * wq + k], af, pb0, pb1);
        }
      }
    } else if constexpr (B == 2) {
      constexpr std::uint32_t m = 0x33333333u;
      std::uint32_t lo01[NWD], hi01[NWD], lo23[NWD], hi23[NWD];
#pragma unroll
      for (int wq = 0; wq < NWD; ++wq) {
        lo01[wq] = bitsel(v0.w[wq], v1.w[wq] << 2, m), hi01[wq] = bitsel(v0.w[wq] >> 2, v1.w[wq], m);
        lo23[wq] = bitsel(v2.w[wq], v3.w[wq] << 2, m), hi23[wq] = bitsel(v2.w[wq] >> 2, v3.w[wq], m);
      }
      NibbleBytes<NWD> a0, a1, a2, a3;
      a0.spread(lo01), a1.spread(hi01), a2.spread(lo23), a3.spread(hi23);
#pragma unroll
      for (int j = 0; j < JJ; ++j) {
        std::uint32_t af[4];
        af[0] = lds_at(tabs, a0.addr(j, lanebyte));
        af[1] = lds_at(tabs, a1.addr(j, lanebyte));
        af[2] = lds_at(tabs, a2.addr(j, lanebyte));
        af[3] = lds_at(tabs, a3.addr(j, lanebyte));
        mma_f16(acc[j], af, pb0, pb1);
      }
    } else {
      static_assert(B == 3, "split_value_cross: 1..4 bits");
      S e01, o01, e23, o23;
      cross3(v0, v1, e01, o01);
      cross3(v2, v3, e23, o23);
#pragma unroll
      for (int j = 0; j < JJ; ++j) {
        std::uint32_t af[4];
        af[0] = lds_at(tabs, e01.template row_addr<6, true>(j, lanebyte));  // (rows r0, r0 + R1) at dim d0
        af[1] = lds_at(tabs, o01.template row_addr<6, true>(j, lanebyte));  // same rows at d1
        af[2] = lds_at(tabs, e23.template row_addr<6, true>(j, lanebyte));  // (r0 + R2, r0 + R3) at d0
        af[3] = lds_at(tabs, o23.template row_addr<6, true>(j, lanebyte));
        mma_f16(acc[j], af, pb0, pb1);
      }
    }
  }
}

/// decode_h16_kernel's FUSE epilogue: y [heads][D] (shared) holds the block's rows' results; the
/// inverse value rotation Pi^T = D H / sqrt(d) of each row (splitk::rotate_shared: the butterflies
/// of combine_kernel in the same order, so the results are bit-identical), then out[row0 + h][d] in
/// type io (0 fp32, 1 fp16, 2 bf16). Not inlined: inlined, it changed the register allocation of the
/// kernel's main loop (SASS walk of the 4-bit d128 step 325 -> 331 instructions).
/// vchan (fractional widths, SPLIT): each half of a row is rotated back on its own (its signs, size
/// D/2), then dim i of the row is channel vchan[i] of the output. ROT false (fp8 values, not rotated):
/// the rows are written as they are.
/// Without vchan, warp h < heads rotates row h in registers (splitk::warp_fwht: the same butterflies
/// in the same order and rounding, then * (vscale * sign) as rotate_shared) and stores it: no block
/// barrier per butterfly stage (rotate_shared per row cost 9 barriers a row, 36 for four heads: the
/// epilogue took ~5 us of a b16 x 32k d128 call, H200 run s24-1, docs/CUDA_NOTES.md "Session 24").
template <int D, int NT, bool ROT = true>
__device__ __noinline__ void fused_epilogue(float* y, int heads, void* out, int io, std::size_t row0,
                                            const float* __restrict__ vsigns, float vscale,
                                            const std::int32_t* __restrict__ vchan) {
  static_assert(NT / 32 >= kMmaHeads, "one warp per row of the block");
  if (ROT && !vchan) {
    constexpr int E = D / 32;
    const int h = threadIdx.x / 32, lane = threadIdx.x % 32;
    float sg[E];
#pragma unroll
    for (int e = 0; e < E; ++e) sg[e] = vscale * __ldg(vsigns + E * lane + e);  // before the barrier
    __syncthreads();  // every row of y is written
    if (h >= heads) return;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = y[h * D + E * lane + e];
    splitk::warp_fwht<E>(v);
    const std::size_t o = (row0 + h) * D + E * lane;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float r = v[e] * sg[e];
      if (io == 0) static_cast<float*>(out)[o + e] = r;
      else if (io == 1) static_cast<__half*>(out)[o + e] = __float2half_rn(r);
      else static_cast<__nv_bfloat16*>(out)[o + e] = __float2bfloat16_rn(r);
    }
    return;
  }
  for (int h = 0; h < heads && ROT; ++h) {
    if (vchan) {
      splitk::rotate_shared(y + h * D, D / 2, vsigns, vscale, true);
      splitk::rotate_shared(y + h * D + D / 2, D / 2, vsigns + D / 2, vscale, true);
    } else {
      splitk::rotate_shared(y + h * D, D, vsigns, vscale, true);
    }
  }
  for (int idx = threadIdx.x; idx < heads * D; idx += NT) {
    const float v = y[idx];
    const std::size_t o = row0 * D + (vchan ? (idx / D) * D + __ldg(vchan + idx % D) : idx);
    if (io == 0) static_cast<float*>(out)[o] = v;
    else if (io == 1) static_cast<__half*>(out)[o] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(out)[o] = __float2bfloat16_rn(v);
  }
}

/// a.vtab_shared != 0: keys and values use the same codebook (one table).
/// FUSE: one split (DecodeKernelArgs::fuse_out); the block finishes its rows itself (inverse value
/// rotation, output in its type: fused_epilogue) and no combine kernel runs. A template flag, not a
/// runtime branch: with the branch the split instances measured 1.5-2.5% slower (H200 run s8-1),
/// while the FUSE = false instances are now the SASS of the kernel before (docs/CUDA_NOTES.md).
/// SPLIT: fractional widths (H16Layout; KB = the outlier part's bits, VB = KB - 1 the other part's,
/// for keys and values); a.kchan / a.vchan the parts' channels.
/// KB = VB = 8: fp8 e4m3 keys and values (H16Layout::F8): q unrotated (a.ksigns unused), A registers
/// from e4m3 pairs by cvt (exact), the per-token scales in the norms' place, no rotation back.
/// MODE kModeRvq: 2 + 2-bit RVQ keys and values (H16Layout::RVQ); a.kcent / a.vcent hold the 16 sums
/// c1[i] + c2[j] at i | j << 2 (RvqTables::sum_centroids). kModeKivi: KIVI keys and values
/// (H16Layout::KIVI; a.kside.group = key group tokens, a.vside.group = value group channels).
template <int D, int KB, int VB, int NW, bool PROD = false, bool FUSE = false, bool SPLIT = false, int MODE = kModeTq>
__global__ void __launch_bounds__(32 * NW, 1) decode_h16_kernel(const DecodeKernelArgs a) {
  using Lay = H16Layout<D, KB, VB, NW, PROD, SPLIT, MODE>;
  static_assert(Lay::kFits, "block shared memory");
  constexpr bool F8 = Lay::F8, RVQ = Lay::RVQ, KIVI = Lay::KIVI, PVQ = Lay::PVQ, RVQ2 = Lay::RVQ2;
  constexpr bool PAIR = Lay::PAIR, QJL = Lay::QJL;
  constexpr int DR = PAIR ? D / 2 : D;  // the sequences' head_dim (PAIR: the step spans two rows of D / 2)
  static_assert(!KIVI || Lay::kBulk, "kivi: dense rows (bulk copies)");
  constexpr int H = Lay::H;
  constexpr int TILE = Lay::kTileT, NT = 32 * NW;
  constexpr int KSPAN = Lay::cbM / 4;   // bytes of a key row's MSE codes per lane (D/4 dims)
  constexpr int SSPAN = D / 32;         // PROD: bytes of a key row's sign bits per lane (D/4 rows of S; whole
                                        // bytes at 64, 128, 256 only: 80, 96, 112 load D/4 bits by BitSpan)
  constexpr int VSPAN = Lay::cbV / 8;   // bytes of a value row per lane (D/8 dims)
  // The same in bits (lane spans of D * KB / 4 and D * VB / 8 bits): not whole bytes at head_dim 80
  // and 112 (keys at 1 and 3 bits, values at 1, 2 and 3 bits) and 96 (values at 1 and 3 bits).
  constexpr int KBITS = 2 * Lay::cbM, VBITS = Lay::cbV;
  // head_dim 80, 96, 112 (not a power of two): dense (Haar) rotations; Pi q is a dense product in
  // the set-up (a.krot_t; QJL keys: q itself) and Pi^T is applied by the combine kernel (no FUSE instance).
  constexpr bool kDenseRot = (D & (D - 1)) != 0;
  static_assert(!kDenseRot || (!SPLIT && !FUSE), "dense rotations: integer widths, combine");
  static_assert(!PVQ || !FUSE, "product VQ: the combine kernel applies the value smoothing");
  extern __shared__ __align__(16) std::uint8_t smem[];
  // The combine kernel is a programmatic dependent launch (decode.cu): let it be scheduled now; it
  // waits for this grid's completion in griddepcontrol.wait.
  asm volatile("griddepcontrol.launch_dependents;");
#ifdef TURBOKV_H16_TRACE
  // Stamps of this block (nullptr: off); recomputed from the arguments at each use, so nothing is
  // live across the main loop. Block-uniform, so the extra barriers below run only when tracing.
  auto gtime = [] { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; };
  auto trace_at = [&a]() -> unsigned long long* {
    const unsigned blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    return a.trace && blk < kH16TraceBlocks ? a.trace + blk * kH16TraceWords : nullptr;
  };
  if (unsigned long long* trace = trace_at(); trace && threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    trace[0] = sm, trace[1] = gtime();
  }
#endif
  const bool share = a.vtab_shared != 0 && KB == VB;
  std::uint32_t* s_tab = reinterpret_cast<std::uint32_t*>(smem);
  std::uint8_t* rest = smem + Lay::tab;
  float* s_qrot = reinterpret_cast<float*>(rest + Lay::off_qrot);
  std::uint8_t* stages = rest + Lay::off_stage;

  const int split = blockIdx.x;
  // PAIR: blockIdx.y = (sequence pair, KV head); b is the pair's first sequence, b + 1 its second
  // (has1 false: an odd batch's last block, whose second sequence does not exist).
  const int b = PAIR ? 2 * (blockIdx.y / a.num_kv_heads) : blockIdx.y / a.num_kv_heads,
            g = blockIdx.y % a.num_kv_heads;
  const bool has1 = PAIR && b + 1 < a.batch;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int gid = lane >> 2, tig = lane & 3;
  // Score row gid (gid + 8) of a step is token kr (kr + 8) of it: the token that k-slot gid of the value
  // mma holds (r0, R1 below: 2 tig + {0, 1} are tokens tig, tig + 4 with kBulk's dense rows, 2 tig, 2 tig + 1
  // otherwise), so the P fragments are the score fragments transposed (movm_trans), no shared memory.
  // With bitsel's one-LOP3 index merges and slots taken from the bits of it: 326 -> 312 instructions per
  // 4-bit d128 step (static count, tools/sass_loopstat.py); H200 run s22-2 (A/B in one run, b16 x 64k,
  // two passes): 4-bit 291.2 / 289.6 -> 282.6 / 282.9 us, 3-bit 327.8 / 327.0 -> 303.5 / 304.2, 2-bit
  // 247.0 / 247.0 -> 232.4 / 232.2.
  const int kr = Lay::kBulk ? (gid >> 1) + 4 * (gid & 1) : gid;
  float* s_p = reinterpret_cast<float*>(rest + Lay::off_p) + warp * kPWarpFloats;
  (void)s_p;

  // Split chunks start at multiples of 16 (absolute positions), and so does every warp step;
  // tokens before `start` (sliding window) are masked.
  const int L = a.seq_lens[b];
  const int start = (a.window > 0 && L > a.window) ? L - a.window : 0;
  const int start_al = start & ~15;
  const int len = L - start_al;
  int chunk = (len + a.num_splits - 1) / a.num_splits;
  chunk = (chunk + TILE - 1) / TILE * TILE;
  const int t_begin = start_al + split * chunk;
  const int t_end = min(L, t_begin + chunk);

  // This warp's steps: it -> positions p0(it) = t_begin + 16 (warp + NW it), while < t_end.
  const int wbeg = t_begin + 16 * warp;
  const int ntw = wbeg < t_end ? (t_end - wbeg + TILE - 1) / TILE : 0;
  // PAIR: sequence b + 1's split and steps by the same rules. Its token at step it, row r is valid when
  // lo1r <= TILE it + r < hi1r (offsets from its warp's first position); ptab1: its page-table entry of
  // step 0 (step it: + it TILE / 16); ntw1 its step count. The loop runs max(ntw, ntw1) steps.
  int ntw1 = 0, lo1r = 0, hi1r = 0;
  const std::int32_t* ptab1 = a.pages;
  if constexpr (PAIR) {
    if (has1) {
      const int L1 = a.seq_lens[b + 1];
      const int start1 = (a.window > 0 && L1 > a.window) ? L1 - a.window : 0;
      const int sal1 = start1 & ~15;
      int chunk1 = (L1 - sal1 + a.num_splits - 1) / a.num_splits;
      chunk1 = (chunk1 + TILE - 1) / TILE * TILE;
      const int tb1 = sal1 + split * chunk1, te1 = min(L1, tb1 + chunk1);
      const int wb1 = tb1 + 16 * warp;
      ntw1 = wb1 < te1 ? (te1 - wb1 + TILE - 1) / TILE : 0;
      lo1r = start1 - wb1, hi1r = te1 - wb1;
      if (ntw1 > 0) ptab1 = a.pages + static_cast<std::size_t>(b + 1) * a.max_pages + (wb1 >> 4);
    }
    // warp-uniform copies (uniform registers in the main loop)
    ntw1 = __shfl_sync(0xffffffffu, ntw1, 0);
    lo1r = __shfl_sync(0xffffffffu, lo1r, 0);
    hi1r = __shfl_sync(0xffffffffu, hi1r, 0);
  }
  const int nsteps = PAIR ? max(ntw, ntw1) : ntw;
  const std::int32_t* ptab = a.pages + static_cast<std::size_t>(b) * a.max_pages;
  const std::uint8_t* kpool_g = a.kpool + static_cast<std::size_t>(g) * a.kstride;
  const std::uint8_t* vpool_g = a.vpool + static_cast<std::size_t>(g) * a.vstride;
  constexpr int NBK = Lay::NBK;
  // Page strides fit 32 bits (checked by the host: page_stride * num_kv_heads < 4 GiB).
  const unsigned kps = static_cast<unsigned>(a.num_kv_heads * a.kstride);
  const unsigned vps = static_cast<unsigned>(a.num_kv_heads * a.vstride);
  // page_size >= 16: a step lies in one page (one page id per warp, whole-range copies).
  const bool fast = a.page_shift >= 4;
  const bool page16 = a.page_shift == 4;
  std::uint8_t* wst = stages + warp * (Lay::kStages * Lay::wstep);  // this warp's steps
  // The page id(s) of step it (0 past the warp's last step or the split's end; see warp_copy).
  auto page_of = [&](int it) -> unsigned {
    const int pos = wbeg + TILE * it + (fast ? 0 : (lane & 15));
    return (it < ntw && pos < t_end) ? static_cast<unsigned>(__ldg(ptab + (pos >> a.page_shift))) : 0u;
  };
  // kPageBlocks (cp.async copies, page_size >= 16): lane l holds the page id of this warp's step
  // 32 blk + l for the block of steps being issued (pgc) and the next one (pgn, loaded a block
  // ahead), so a step's page id is one shuffle, not a global load with its address arithmetic (0 past
  // the warp's last step). H200 run s5-4 (A/B, b16 x 64k): 3-bit d128 409 -> 388 us; on the bulk
  // path 4-bit d128 was 1% slower (345 -> 348 us), so kBulk keeps page_of.
  constexpr bool kPageBlocks = !Lay::kBulk;
  auto pages_of_block = [&](int blk) -> unsigned {
    const int st = 32 * blk + lane;
    return st < ntw ? static_cast<unsigned>(__ldg(ptab + ((wbeg + TILE * st) >> a.page_shift))) : 0u;
  };
  unsigned pgc = 0, pgn = 0;
  if (kPageBlocks && fast) pgc = pages_of_block(0), pgn = pages_of_block(1);
  // The page id(s) of step st; called once per step, st ascending from kStages.
  auto page_at = [&](int st) -> unsigned {
    if (!kPageBlocks || !fast) return page_of(st);
    if ((st & 31) == 0) {
      pgc = pgn;
      pgn = pages_of_block((st >> 5) + 1);
    }
    return __shfl_sync(0xffffffffu, pgc, st & 31);
  };
  // kBulk: this warp's mbarriers, one per slot (expected arrivals: lane 0 with the transaction bytes
  // of a bulk-copied step; all 32 lanes with cp.async.mbarrier.arrive when pages are < 16 tokens).
  const std::uint32_t wbar = static_cast<std::uint32_t>(__cvta_generic_to_shared(rest + Lay::off_mbar)) + warp * 32;
  // Warp-uniform copies (one shuffle each at set-up) of the warp's mbarrier base, stage base and
  // first position, for the bulk copies' operands (see issue).
  const std::uint32_t wbar_u = __shfl_sync(0xffffffffu, wbar, 0);
  const std::uint32_t wst_u = __shfl_sync(0xffffffffu, static_cast<std::uint32_t>(__cvta_generic_to_shared(wst)), 0);
  const int wbeg_u = __shfl_sync(0xffffffffu, wbeg, 0);
  if constexpr (Lay::kBulk) {
    if (lane == 0)
      for (int sl = 0; sl < Lay::kStages; ++sl) mbar_init(wbar + 8 * sl, fast ? 1 : 32);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
  }
  // kBulk with page_size 16: a step is a whole page, whose codes and norms of a pool are one range:
  // two bulk copies onto slot sl's mbarrier. The pools' bases of this KV head are opaque 64-bit
  // values (keeps the compiler from splitting them into pool + g * stride and re-adding the parts at
  // every step of the main loop); pgu: the page id, warp-uniform.
  std::uint64_t kbase16, vbase16;
  asm("mov.b64 %0, %1;" : "=l"(kbase16) : "l"(reinterpret_cast<std::uint64_t>(kpool_g)));
  asm("mov.b64 %0, %1;" : "=l"(vbase16) : "l"(reinterpret_cast<std::uint64_t>(vpool_g)));
  // KIVI: bytes of a step's value scalars (16 tokens x head_dim / G_v (min, scale) words) and the key
  // group shift (groups of G_k tokens, a power of two >= 16), warp-uniform.
  const unsigned kivi_vsb = KIVI ? 64u * static_cast<unsigned>(D / a.vside.group) : 0u;
  const int kivi_gshift = KIVI ? __ffs(a.kside.group) - 1 : 0;
  (void)kivi_vsb, (void)kivi_gshift;
  auto copy_page16 = [&](int sl, unsigned pgu) {
    constexpr unsigned K = 16 * Lay::cbK, V = 16 * Lay::cbV;
    const std::uint32_t du = wst_u + sl * Lay::wstep;
    const auto* ksrc = reinterpret_cast<const void*>(kbase16 + std::uint64_t(pgu) * kps);
    const auto* vsrc = reinterpret_cast<const void*>(vbase16 + std::uint64_t(pgu) * vps);
    if constexpr (KIVI) {  // a page of 16 tokens is one key group: codes then the group's scalars
      elect_bulk2(wbar_u + 8 * sl, K + V + Lay::KSB + kivi_vsb, du, ksrc, K + Lay::KSB, du + Lay::off_vc, vsrc,
                  V + kivi_vsb);
    } else if constexpr (Lay::PVQ) {  // codes only
      elect_bulk2(wbar_u + 8 * sl, K + V, du, ksrc, K, du + Lay::off_vc, vsrc, V);
    } else {  // codes then norms (NBK, NBV bytes per token: KSB, VSB per step), as in the page
      elect_bulk2(wbar_u + 8 * sl, K + V + Lay::KSB + Lay::VSB, du, ksrc, K + Lay::KSB, du + K + Lay::KSB, vsrc,
                  V + Lay::VSB);
    }
  };
  // PAIR (page_size 16, checked by the host): a step of each sequence is its page's key block and value
  // block (K = kH1, V = vH1 bytes: codes then norms, as in the pool; sequence 1's at kO1 / off_vc + vO1); c0 /
  // c1 whether sequence 0 / 1 has the step (a sequence without it leaves its half of the slot stale: its logits are masked).
  // Exactly one arrival on slot sl's mbarrier either way. All operands warp-uniform.
  auto copy_pair = [&](int sl, bool c0, bool c1, unsigned pg0u, unsigned pg1u) {
    constexpr unsigned K = Lay::kH1, V = Lay::vH1;
    const std::uint32_t du = wst_u + sl * Lay::wstep, baru = wbar_u + 8 * sl;
    const auto* k0 = reinterpret_cast<const void*>(kbase16 + std::uint64_t(pg0u) * kps);
    const auto* v0 = reinterpret_cast<const void*>(vbase16 + std::uint64_t(pg0u) * vps);
    const auto* k1 = reinterpret_cast<const void*>(kbase16 + std::uint64_t(pg1u) * kps);
    const auto* v1 = reinterpret_cast<const void*>(vbase16 + std::uint64_t(pg1u) * vps);
    if (c0 && c1) {
      elect_bulk4(baru, 2 * (K + V), du, k0, K, du + Lay::off_vc, v0, V, du + Lay::kO1, k1, K, du + Lay::off_vc + Lay::vO1,
                  v1, V);
    } else if (c0) {
      elect_bulk2(baru, K + V, du, k0, K, du + Lay::off_vc, v0, V);
    } else if (c1) {
      elect_bulk2(baru, K + V, du + Lay::kO1, k1, K, du + Lay::off_vc + Lay::vO1, v1, V);
    } else {
      elect_arrive(baru);
    }
  };
  (void)copy_pair;
  auto issue = [&](int it, int sl, unsigned page) {
    std::uint8_t* sp = wst + sl * Lay::wstep;
    const int p0 = wbeg + TILE * it, n = min(16, t_end - p0), lo = max(start - p0, 0);
    if constexpr (Lay::kBulk) {
      const std::uint32_t bar = wbar + 8 * sl;
      if (fast) {
        // Every operand from warp-uniform values (the warp's stage, mbarrier and first position
        // broadcast once at set-up, the slot and step from the loop counter, the page id broadcast
        // from lane 0), so ptxas keeps them in uniform registers, and the copies issued under one
        // elect.sync predicate by all 32 (converged) lanes: no per-lane issue loop.
        const unsigned pgu = __shfl_sync(0xffffffffu, page, 0);
        const int p0u = wbeg_u + TILE * it, nu = min(16, t_end - p0u), lou = max(start - p0u, 0);
        constexpr unsigned K = 16 * Lay::cbK, V = 16 * Lay::cbV;
        static_assert(PAIR || (Lay::off_vc == K + Lay::KSB && Lay::off_vn == K + Lay::KSB + V),
                      "kBulk stage = the page's K and V blocks");
        const std::uint8_t* kb = kpool_g + static_cast<std::uint64_t>(pgu) * kps;
        const std::uint8_t* vb = vpool_g + static_cast<std::uint64_t>(pgu) * vps;
        const std::uint32_t baru = wbar_u + 8 * sl, du = wst_u + sl * Lay::wstep;
        if (lou >= nu) {
          elect_arrive(baru);  // no token of the window: complete the phase, copy nothing
        } else if (page16) {
          copy_page16(sl, pgu);
        } else {
          const unsigned pmask = (1u << a.page_shift) - 1u, slot = static_cast<unsigned>(p0u) & pmask;
          if constexpr (KIVI) {  // the step's key group (slot >> log2 G_k) and the 16 tokens' value scalars
            elect_bulk2(baru, K + V + Lay::KSB + kivi_vsb, du, kb + slot * Lay::cbK, K, du + Lay::off_vc,
                        vb + slot * Lay::cbV, V);
            elect_bulk2(baru, 0, du + Lay::off_kn,
                        kb + ((pmask + 1u) * Lay::cbK + (slot >> kivi_gshift) * Lay::KSB), Lay::KSB,
                        du + Lay::off_vn, vb + ((pmask + 1u) * Lay::cbV + slot * (kivi_vsb / 16)), kivi_vsb);
          } else if constexpr (Lay::PVQ) {  // codes only
            elect_bulk2(baru, K + V, du, kb + slot * Lay::cbK, K, du + Lay::off_vc, vb + slot * Lay::cbV, V);
          } else {
            elect_bulk2(baru, K + V + Lay::KSB + Lay::VSB, du, kb + slot * Lay::cbK, K, du + K + Lay::KSB,
                        vb + slot * Lay::cbV, V);
            elect_bulk2(baru, 0, du + K, kb + ((pmask + 1u) * Lay::cbK + slot * NBK), Lay::KSB,
                        du + K + Lay::KSB + V, vb + ((pmask + 1u) * Lay::cbV + slot * Lay::NBV), Lay::VSB);
          }
        }
        return;
      }
      if (lo < n) {
        warp_copy<Lay::cbK, Lay::rsK, NBK>(sp, sp + Lay::off_kn, kpool_g, kps, a.page_shift, false, page, p0, lo, n,
                                           lane);
        warp_copy<Lay::cbV, Lay::rsV, Lay::NBV>(sp + Lay::off_vc, sp + Lay::off_vn, vpool_g, vps, a.page_shift, false, page,
                                         p0, lo, n, lane);
      }
      mbar_arrive_cp_async(bar);
      return;
    }
    if (lo >= n) return;  // no token of the window (warp-uniform): nothing to copy or compute
    warp_copy<Lay::cbK, Lay::rsK, NBK>(sp, sp + Lay::off_kn, kpool_g, kps, a.page_shift, fast, page, p0, lo, n, lane);
    warp_copy<Lay::cbV, Lay::rsV, Lay::NBV>(sp + Lay::off_vc, sp + Lay::off_vn, vpool_g, vps, a.page_shift, fast, page, p0,
                                     lo, n, lane);
  };
  // Set-up loads first (page ids of the first steps, centroids, this warp's query head), so their
  // latencies overlap: at batch 1 the set-up is a third of the kernel.
  unsigned pg0[Lay::kStages];
#pragma unroll
  for (int it = 0; it < Lay::kStages; ++it)
    pg0[it] = kPageBlocks && fast ? __shfl_sync(0xffffffffu, pgc, it) : page_of(it);
  const float kc = (!F8 && !KIVI && !PVQ && KB > 0 && lane < (1 << KB)) ? __ldg(a.kcent + lane) : 0.0f;
  const float vc = (!F8 && !KIVI && !PVQ && lane < (1 << VB)) ? __ldg(a.vcent + lane) : 0.0f;
  // RVQ2: the stage-2 codebooks (kc, vc: stage 1's)
  const float kc2 = (RVQ2 && lane < (1 << KB)) ? __ldg(a.kcent2 + lane) : 0.0f;
  const float vc2 = (RVQ2 && lane < (1 << VB)) ? __ldg(a.vcent2 + lane) : 0.0f;
  (void)kc2, (void)vc2;
  // Warp n < 8 rotates query head n of the block: lane L holds dims [E L, E L + E).
  constexpr int E = kDenseRot ? 1 : D / 32;
  float qv[E];
  if constexpr (!kDenseRot) {
    // PAIR: warp n < 2 G holds column n: query head n mod G of sequence b + (n >= G), its D / 2 dims in
    // lanes 0-15 (sequence b) or 16-31 (b + 1), zeros in the other half (the block-diagonal queries).
    const int mq = PAIR && warp >= a.group ? 1 : 0;
    const int hg = PAIR ? warp - mq * a.group : blockIdx.z * kMmaHeads + warp;
    const bool has = warp < kMmaHeads && hg < a.group && (!PAIR || ((lane >> 4) == mq && (mq == 0 || has1)));
    const float* qh =
        a.q + (static_cast<std::size_t>(b + (has ? mq : 0)) * a.num_heads + g * a.group + (has ? hg : 0)) * DR;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int il = PAIR ? E * (lane & 15) + e : E * lane + e;  // the lane's dims of its row
      const int i = SPLIT ? __ldg(a.kchan + il) : il;             // SPLIT: the parts' channels
      // (PVQ: the key smoothing first, Pi_k (lambda_k * q), as the reference's prepare_query)
      const float qi = PVQ ? __ldg(qh + i) * __ldg(a.klambda + i) : __ldg(qh + i);
      qv[e] = has ? (F8 || KIVI || QJL ? qi : qi * __ldg(a.ksigns + il)) : 0.0f;
    }
  }

  // Pipeline, private to each warp (no block barrier in the main loop): up to kStages - 1 steps in
  // flight while one is computed; page ids are loaded one step ahead of their copies.
  // PAIR: sequence b + 1's page ids of the first steps, and the first steps' copies (a sequence's
  // step is copied when it holds a token of its window, as issue()).
  unsigned pg1[Lay::kStages];
#pragma unroll
  for (int it = 0; it < Lay::kStages; ++it)
    pg1[it] = PAIR && it < ntw1 ? static_cast<unsigned>(__ldg(ptab1 + it * (TILE / 16))) : 0u;
  if constexpr (PAIR) {
#pragma unroll
    for (int it = 0; it < Lay::kStages - 1; ++it) {
      if (it < nsteps) {
        const int p0 = wbeg + TILE * it, u0 = TILE * it;
        const bool c0 = it < ntw && max(start - p0, 0) < min(16, t_end - p0);
        const bool c1 = it < ntw1 && max(lo1r - u0, 0) < min(16, hi1r - u0);
        copy_pair(it, c0, c1, __shfl_sync(0xffffffffu, pg0[it], 0), __shfl_sync(0xffffffffu, pg1[it], 0));
      }
    }
  } else {
#pragma unroll
    for (int it = 0; it < Lay::kStages - 1; ++it) {
      if (it < ntw) issue(it, it, pg0[it]);
      if constexpr (!Lay::kBulk) cp_async_commit();
    }
  }
  unsigned pnext = pg0[Lay::kStages - 1], pnext1 = pg1[Lay::kStages - 1];
  (void)pnext1;
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at(); trace && threadIdx.x == 0) trace[21] = gtime();
#endif

  // Pair tables (H16Layout::tab), one copy per lane: entry e = (code lo) | (code hi) << B ->
  // half2(c[lo], c[hi]). Lane j < 16 of each warp holds centroid j; entries are gathered by shuffles.
  {
    constexpr int KE = Lay::KE, VE = Lay::VE, R = KE > VE ? KE : VE;
    if constexpr (F8 || KIVI) {
      (void)kc, (void)vc;  // no tables
    } else if constexpr (PVQ) {
      // A side's tables are PvqTables::centroids() ([D/g][2^c][g] fp32) rounded to fp16 in the same
      // order, word i = half2(element 2 i, element 2 i + 1) (the key tables, then the value tables
      // unless shared).
      (void)kc, (void)vc;
      constexpr int W = Lay::kPvqV / 4;
      const float2* kpairs = reinterpret_cast<const float2*>(a.kcent);
      const float2* vpairs = reinterpret_cast<const float2*>(a.vcent);
      for (int i = tid; i < (share ? W : 2 * W); i += NT) {
        const float2 c = i < W ? __ldg(kpairs + i) : __ldg(vpairs + (i - W));
        s_tab[i] = pack_h2(c.x, c.y);
      }
    } else if constexpr (RVQ2) {
      // Each stage's pair tables as TurboQuant's at KB bits (the generic fill below): stage 1 from
      // (kc, vc) at byte 0, stage 2 from (kc2, vc2) at kRvq2S.
      auto fill = [&](std::uint32_t* t, float ck, float cv) {
        for (int i = tid; i < R * 64; i += NT) {
          const int e = i >> 6;
          const bool val = (i & 32) != 0;
          const int lo = e & ((1 << KB) - 1), hi = e >> KB;
          const float clo = __shfl_sync(0xffffffffu, val ? cv : ck, lo & 15);
          const float chi = __shfl_sync(0xffffffffu, val ? cv : ck, hi & 15);
          if (val ? (!share && e < VE) : e < KE) {
            const std::uint32_t h = pack_h2(clo, chi);
            t[i] = h;
            if (Lay::kWideK) {  // 64-entry table: rows e + 64, e + 128, e + 192 repeat it
#pragma unroll
              for (int r = 1; r < 4; ++r) t[i + r * 64 * 64] = h;
            }
          }
        }
      };
      fill(s_tab, kc, vc);
      fill(s_tab + Lay::kRvq2S / 4, kc2, vc2);
    } else if constexpr (Lay::kQuad) {
      // Quad tables: 2 x 256 rows x 32 lanes of uint2; thread i writes the 16-byte unit i (two lanes'
      // identical entries) for i < 2 x 256 x 16 (the key table only when values share its codebook:
      // at batch 1 the 128 KB fill cost ~1.5 us, H200 run s7-4). Centroids 0..3 by shuffles, once.
      const float k0 = __shfl_sync(0xffffffffu, kc, 0), k1 = __shfl_sync(0xffffffffu, kc, 1);
      const float k2 = __shfl_sync(0xffffffffu, kc, 2), k3 = __shfl_sync(0xffffffffu, kc, 3);
      const float w0 = __shfl_sync(0xffffffffu, vc, 0), w1 = __shfl_sync(0xffffffffu, vc, 1);
      const float w2 = __shfl_sync(0xffffffffu, vc, 2), w3 = __shfl_sync(0xffffffffu, vc, 3);
      uint4* t4 = reinterpret_cast<uint4*>(smem);
      const int units = share ? 256 * 16 : 2 * 256 * 16;
      for (int i = tid; i < units; i += NT) {
        const bool val = i >= 256 * 16;
        const int e = (i >> 4) & 255;
        auto c = [&](int code) {
          const float c0 = val ? w0 : k0, c1 = val ? w1 : k1, c2 = val ? w2 : k2, c3 = val ? w3 : k3;
          return code == 0 ? c0 : code == 1 ? c1 : code == 2 ? c2 : c3;
        };
        const std::uint32_t x = pack_h2(c(e & 3), c((e >> 2) & 3)), y = pack_h2(c((e >> 4) & 3), c(e >> 6));
        t4[i] = make_uint4(x, y, x, y);
      }
    } else
    for (int i = tid; i < R * 64; i += NT) {  // warp-uniform trip counts (R * 64 is a multiple of 64)
      const int e = i >> 6;
      const bool val = (i & 32) != 0;  // words 32..63 of a row: the value table
      // RVQ: entry e = p1a | p1b << 2 | p2a << 4 | p2b << 6; code k of sum_centroids is p1 | p2 << 2.
      const int lo = RVQ ? (e & 3) | ((e >> 2) & 12) : val ? e & ((1 << VB) - 1) : e & ((1 << (KB > 0 ? KB : 1)) - 1);
      const int hi = RVQ ? ((e >> 2) & 3) | ((e >> 4) & 12) : val ? e >> VB : e >> (KB > 0 ? KB : 1);
      const float clo = __shfl_sync(0xffffffffu, val ? vc : kc, lo & 15);
      const float chi = __shfl_sync(0xffffffffu, val ? vc : kc, hi & 15);
      if (val ? (!share && e < VE) : e < KE) {
        const std::uint32_t h = pack_h2(clo, chi);
        s_tab[i] = h;
        if (val ? Lay::kWideV : Lay::kWideK) {  // 64-entry table: rows e + 64, e + 128, e + 192 repeat it
#pragma unroll
          for (int r = 1; r < 4; ++r) s_tab[i + r * 64 * 64] = h;
        }
      }
    }
    if constexpr (PROD) {  // sign pairs: bit 1 -> +1, bit 0 -> -1
      std::uint32_t* s_stab = reinterpret_cast<std::uint32_t*>(rest + Lay::off_stab);
      for (int i = tid; i < 4 * 64; i += NT) {
        const int e = i >> 6;
        if ((i & 32) == 0) s_stab[i] = pack_h2((e & 1) ? 1.0f : -1.0f, (e & 2) ? 1.0f : -1.0f);
      }
    }
  }
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at(); trace && threadIdx.x == 0) trace[22] = gtime();
#endif
  // Rotated queries of the block's (up to) 8 heads: the Hadamard butterflies (u, w) -> (u + w, u - w)
  // for h = 1, 2, 4, ... as in the reference (same operands, same rounding), h < E in registers,
  // the rest across lanes; then Pi q to shared memory for the fragments below.
  // kDenseRot: y_i = sum_j Pi[i][j] q_j (a.krot_t = Pi^T, row j contiguous in i), one (head, i) per
  // thread.
  if constexpr (kDenseRot) {
    (void)qv;
    for (int idx = tid; idx < kMmaHeads * D; idx += NT) {
      const int h = idx / D, i = idx - h * D, hg = blockIdx.z * kMmaHeads + h;
      float y = 0.0f;
      if (hg < a.group) {
        const float* qh = a.q + (static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg) * D;
        if constexpr (F8 || QJL)
          y = __ldg(qh + i);  // fp8, QJL keys: no rotation
        else
          for (int j = 0; j < D; ++j) y = fmaf(__ldg(a.krot_t + j * D + i), __ldg(qh + j), y);
      }
      s_qrot[idx] = y;
    }
  } else if (F8 || KIVI || QJL) {
    if (warp < kMmaHeads)
#pragma unroll
      for (int e = 0; e < E; ++e) s_qrot[warp * D + E * lane + e] = qv[e];  // q itself (no rotation)
  } else if (warp < kMmaHeads) {
#pragma unroll
    for (int h = 1; h < E; h <<= 1)
#pragma unroll
      for (int e = 0; e < E; ++e)
        if ((e & h) == 0) {
          const float u = qv[e], w = qv[e + h];
          qv[e] = u + w;
          qv[e + h] = u - w;
        }
#pragma unroll
    for (int h = 1; h < (SPLIT || PAIR ? 16 : 32); h <<= 1) {  // SPLIT, PAIR: each half (D/2 = 16 E) on its own
      const bool upper = (lane & h) != 0;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float o = __shfl_xor_sync(0xffffffffu, qv[e], h);
        qv[e] = upper ? o - qv[e] : qv[e] + o;
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) s_qrot[warp * D + E * lane + e] = qv[e];
  }
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at(); trace && threadIdx.x == 0) trace[23] = gtime();
#endif
  __syncthreads();
  // This lane's B fragments of Pi q (head gid): k-slots 2tig+{0,1} -> dims D/4*tig + 4kk + {0,1},
  // k-slots 2tig+8+{0,1} -> dims D/4*tig + 4kk + {2,3}.
  // SPLIT: the same per part: kk < H/16 -> dims H/4*tig + 4kk + {0..3} of part 0, kk >= H/16 -> dims
  // H + H/4*tig + 4(kk - H/16) + {0..3} of part 1.
  std::uint32_t qb[D / 16][2];
  {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const float* qr = SPLIT ? s_qrot + gid * D + (kk < H / 16 ? (H / 4) * tig + 4 * kk : H + (H / 4) * tig + 4 * (kk - H / 16))
                              : s_qrot + gid * D + (D / 4) * tig + 4 * kk;
      qb[kk][0] = pack_h2(qr[0] * a.qscale, qr[1] * a.qscale);
      qb[kk][1] = pack_h2(qr[2] * a.qscale, qr[3] * a.qscale);
    }
  }
  // PROD: (S Pi q) * qscale * kappa of the 8 heads (fp32 in smem), then this lane's B fragments in the
  // same permutation as qb (sketch rows D/4 * tig + 4 kk + {0..3}).
  const uint2* s_qs = reinterpret_cast<const uint2*>(rest + Lay::off_qs);
  if constexpr (PROD) {
    float* s_qsk = reinterpret_cast<float*>(rest + Lay::off_qsk);
    const float f = a.qscale * a.kappa;
    if constexpr (D == 256) {
      // head_dim 256: S read once per block for all the block's heads (the per-thread form below reads it once
      // per head: 8 x 256 KB per block from L2). Thread (column quad c4, j-slice js) sums its slice for every
      // head; the slices' partial sums are added into s_qsk in slice order (deterministic), then * f. H100 run
      // s38-4 (b1 / b16 x 4k / 32k / 128k, 4/1 heads, 3 and 4 bits): 1.03-1.48x faster; at head_dim 64 / 128
      // the same form was 0.81-1.01x (run s38-3: its reduction rounds cost more than the per-thread loads), so
      // they keep the per-thread form (docs/RESULTS.md "Session 38").
      constexpr int CQ = D / 4, JS = NT / CQ, JL = (D + JS - 1) / JS;
      static_assert(NT % CQ == 0 && NT >= CQ, "every thread owns one (column quad, j-slice)");
      const int nh = min(kMmaHeads, a.group - static_cast<int>(blockIdx.z) * kMmaHeads);
      for (int idx = tid; idx < kMmaHeads * D; idx += NT) s_qsk[idx] = 0.0f;
      float acc[kMmaHeads][4] = {};
      const int c4 = tid % CQ, js = tid / CQ;
      if (js < JS) {
        const int j1 = min(D, js * JL + JL);
        for (int j = js * JL; j < j1; ++j) {
          const float4 sv = __ldg(reinterpret_cast<const float4*>(a.sketch + static_cast<std::size_t>(j) * D) + c4);
#pragma unroll
          for (int n = 0; n < kMmaHeads; ++n)
            if (n < nh) {
              const float y = s_qrot[n * D + j];
              acc[n][0] = fmaf(sv.x, y, acc[n][0]);
              acc[n][1] = fmaf(sv.y, y, acc[n][1]);
              acc[n][2] = fmaf(sv.z, y, acc[n][2]);
              acc[n][3] = fmaf(sv.w, y, acc[n][3]);
            }
        }
      }
      for (int r = 0; r < JS; ++r) {
        __syncthreads();
        if (js == r)
#pragma unroll
          for (int n = 0; n < kMmaHeads; ++n)
            if (n < nh)
#pragma unroll
              for (int e = 0; e < 4; ++e) s_qsk[n * D + 4 * c4 + e] += acc[n][e];
      }
      __syncthreads();
      for (int idx = tid; idx < kMmaHeads * D; idx += NT) s_qsk[idx] *= f;
    } else {
      // Heads past the GQA group (their Pi q is zero) are skipped: a warp's idx range lies in one head (D >= 64).
      // H100 run s38-5: d128 32/8 1.03-1.14x at batch 1, 1.00-1.06x at batch 16.
      for (int idx = tid; idx < kMmaHeads * D; idx += NT) {  // a.sketch = S^T [D][m]: lanes read consecutive i
        const int n = idx / D, i = idx % D;
        float acc = 0.0f;
        if (static_cast<int>(blockIdx.z) * kMmaHeads + n < a.group) {
          const float* qn = s_qrot + n * D;
          for (int j = 0; j < D; ++j) acc = fmaf(__ldg(a.sketch + static_cast<std::size_t>(j) * D + i), qn[j], acc);
        }
        s_qsk[idx] = acc * f;
      }
    }
    __syncthreads();
    uint2* qs_w = reinterpret_cast<uint2*>(rest + Lay::off_qs);
    for (int idx = tid; idx < (D / 16) * 32; idx += NT) {
      const int kk = idx / 32, ln = idx % 32, g2 = ln >> 2, t2 = ln & 3;
      const float* qr = s_qsk + g2 * D + (D / 4) * t2 + 4 * kk;
      qs_w[idx] = make_uint2(pack_h2(qr[0], qr[1]), pack_h2(qr[2], qr[3]));
    }
  }
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at()) {
    __syncthreads();
    if (threadIdx.x == 0) trace[2] = gtime();
  }
#endif
  __syncthreads();  // every read of Pi q is done (its space held the warps' P buffers, unused since session 32)
  // Table bases (warp-uniform) and this lane's byte in a table row (values: + 128 with their own codebook).
  const std::uint32_t stab = static_cast<std::uint32_t>(__cvta_generic_to_shared(rest + Lay::off_stab));
  (void)stab;
  const std::uint32_t tabs = static_cast<std::uint32_t>(__cvta_generic_to_shared(s_tab));
  const std::uint32_t klane = 4u * lane, vlane = klane + (share ? 0u : 128u);
  // kQuad: this lane's byte in a quad-table row, and the value table (the key table when shared).
  const std::uint32_t qlane = 8u * lane, tabv = tabs + (share ? 0u : static_cast<std::uint32_t>(Lay::kQuadV));
  (void)qlane, (void)tabv;
  // This lane's span of a key row (dims D/4 tig + ..) and of a value row (dims 2 (gid D/16 + j) + ..) in
  // a stage. PAIR: lanes tig 0, 1 (gid 0-3) read sequence b's rows, tig 2, 3 (gid 4-7) sequence b + 1's,
  // whose blocks start kO1 / vO1 bytes later.
  const int koff = PAIR ? (tig >> 1) * Lay::kO1 + (tig & 1) * KSPAN : KSPAN * tig;
  const int voff = PAIR ? (gid >> 2) * Lay::vO1 + (gid & 3) * VSPAN : VSPAN * gid;
  // PAIR: the stage offsets of the key / value norm blocks of the sequence of this lane's score columns
  // 2 tig (o0) and 2 tig + 1 (o1); c0m / c1m: that sequence is b + 1.
  const bool c0m = PAIR && 2 * tig >= a.group, c1m = PAIR && 2 * tig + 1 >= a.group;
  // PAIR: the token offsets u = TILE it + row of the columns' sequences: [ulo0, uhi0) for column 2 tig,
  // [ulo1, uhi1) for 2 tig + 1 (sequence b: start - wbeg, t_end - wbeg; b + 1: lo1r, hi1r)
  const int ulo0 = c0m ? lo1r : start - wbeg, uhi0 = c0m ? hi1r : t_end - wbeg;
  const int ulo1 = c1m ? lo1r : start - wbeg, uhi1 = c1m ? hi1r : t_end - wbeg;
  (void)ulo0, (void)uhi0, (void)ulo1, (void)uhi1;
  const int kno0 = Lay::off_kn + (c0m ? Lay::kO1 : 0), kno1 = Lay::off_kn + (c1m ? Lay::kO1 : 0);
  const int vno0 = Lay::off_vn + (c0m ? Lay::vO1 : 0), vno1 = Lay::off_vn + (c1m ? Lay::vO1 : 0);
  (void)kno0, (void)kno1, (void)vno0, (void)vno1;

  // Per-thread state: heads 2*tig, 2*tig+1; acc[j] = O^T[rows gid, gid+8 of block j][heads 2tig + {0,1}],
  // row gid <-> dim 2 * (gid * D/16 + j), row gid + 8 <-> that + 1.
  float m[2] = {PAIR ? kPairMaxFloor : -INFINITY, PAIR ? kPairMaxFloor : -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[D / 16][4];
#pragma unroll
  for (int j = 0; j < D / 16; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  // Prod keys copy after the compute (run s30-3 measured copy-first again: d256 at 12 and 8 warps 0.96-0.99x,
  // d128 b16 x 64k 2 / 3 bits 1.01x, 4 bits 0.93-0.94x).
  constexpr bool kCopyFirst = !PROD;
  // page16 && kBulk: the page-table index of step it + kStages, clamped to the warp's last step.
  int pi16 = (wbeg + TILE * Lay::kStages) >> 4;
  // (PAIR: the loop may run past this sequence's steps, even with none: index 0 keeps the loads in its row)
  const int plast16 = PAIR && ntw == 0 ? 0 : (wbeg + TILE * max(ntw - 1, 0)) >> 4;
  // PAIR: the same for sequence b + 1 (indices from ptab1, its step 0)
  int pi1 = Lay::kStages * (TILE / 16);
  const int plast1 = max(ntw1 - 1, 0) * (TILE / 16);
  (void)pi1, (void)plast1;
  const std::int32_t* ptab16;
  asm("mov.b64 %0, %1;" : "=l"(ptab16) : "l"(ptab));
  // kStages 4 or 2: slot and parity are bits of it (fewer instructions per step than the counters).
  constexpr int S = Lay::kStages;
  constexpr bool kPow2 = (S & (S - 1)) == 0;
  int cur_c = 0;              // !kPow2: stage slot of step it (= it % kStages)
  std::uint32_t phase_c = 0;  // !kPow2, kBulk: parity of slot cur's current use (= (it / kStages) & 1)
  for (int it = 0; it < nsteps; ++it) {
    const int cur = kPow2 ? (it & (S - 1)) : cur_c;
    const std::uint32_t phase = kPow2 ? static_cast<std::uint32_t>(it / S) & 1u : phase_c;
    // slot of step it + kStages - 1
    const int ahead = kPow2 ? ((it + S - 1) & (S - 1)) : (cur == 0 ? S - 1 : cur - 1);
    if constexpr (Lay::kBulk) {
      mbar_wait(wbar + 8 * cur, phase);  // step it has landed
    } else {
      cp_async_wait<Lay::kStages - 2>();  // step it has landed (step it + 1 may still be in flight)
    }
    // Publishes step it to the warp's lanes, and orders every lane's reads of step it - 1, whose
    // slot the copy of step it + kStages - 1 reuses. That copy is issued before this step's compute
    // (kCopyFirst: one more step of lead; H200 run s4-5, b16 x 64k: 4-bit 392.3 vs 394.0 us, 3-bit
    // 408.8 vs 429.8) except for Prod keys (4-bit: 546.2 vs 518.8 us after the compute).
    __syncwarp();
    const std::uint8_t* s_kc = wst + cur * Lay::wstep;
    const std::uint8_t* s_kn = s_kc + Lay::off_kn;
    const std::uint8_t* s_vc = s_kc + Lay::off_vc;
    const __half* s_vn = reinterpret_cast<const __half*>(s_kc + Lay::off_vn);
    const int p0 = wbeg + TILE * it, n = min(16, t_end - p0), lo = max(start - p0, 0);
    // PAIR: sequence b + 1's rows [lo1, n1) of the step are its tokens
    const int n1 = PAIR ? min(16, hi1r - TILE * it) : 0, lo1 = PAIR ? max(lo1r - TILE * it, 0) : 0;
    constexpr int tb = 0;
    if constexpr (PAIR) {  // the lean path below for both sequences
      const int st = it + Lay::kStages - 1;
      if (st < nsteps)
        copy_pair(ahead, st < ntw, st < ntw1, __shfl_sync(0xffffffffu, pnext, 0), __shfl_sync(0xffffffffu, pnext1, 0));
      pnext = static_cast<unsigned>(__ldg(ptab16 + min(pi16, plast16)));
      pi16 += TILE / 16;
      pnext1 = static_cast<unsigned>(__ldg(ptab1 + min(pi1, plast1)));
      pi1 += TILE / 16;
    } else if constexpr (kCopyFirst) {
      if (Lay::kBulk && page16) {
        // Lean path (page_size 16, bulk copies): the copies issued here are of steps >= kStages - 1,
        // whose tokens are all past `start` (p0 >= start_al + 16 > start) and before t_end, so the
        // window test of issue() is not needed; the next page id is one load at an index that
        // advances TILE / 16 entries per step; the pool bases stay whole 64-bit values, so the
        // addresses are two wide multiply-adds in uniform registers. ncu of the generic path
        // (run s7-1): ~89 of 356 instructions per step were the wait, the copy issue and the next
        // page id; here ~47. H200 run s7-2 (A/B, b16 x 64k, two passes): 4-bit d128 312.9 -> 292.2
        // us, 3-bit 358.0 -> 330.6, 2-bit 319.7 -> 286.0, d64 4-bit 123.1 -> 108.9.
        if (it + Lay::kStages - 1 < ntw) copy_page16(ahead, __shfl_sync(0xffffffffu, pnext, 0));
        // Past the warp's last step the id is never used: clamp the index instead of branching.
        pnext = static_cast<unsigned>(__ldg(ptab16 + min(pi16, plast16)));
        pi16 += TILE / 16;
      } else {
        if (it + Lay::kStages - 1 < ntw) issue(it + Lay::kStages - 1, ahead, pnext);
        if constexpr (!Lay::kBulk) cp_async_commit();
        pnext = page_at(it + Lay::kStages);
      }
    }
    if (lo < n || (PAIR && lo1 < n1)) {
      // ---- scores: S[token tb + {gid, gid+8}][head 2tig + {0,1}]
      float s[4];
      if constexpr (SPLIT) {
        // Each part as the integer kernel's generic path, into its own accumulator chain (the two
        // chains are independent, as the integer path's even / odd k-steps); then
        // S = ||k_0|| S_0 + ||k_1|| S_1 (fp32).
        float so[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        float sr[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        split_key_part<H * KB / 32, 2 * KB, Lay::kWideK, H / 16, true>(s_kc + (tb + kr) * Lay::rsK,
                                                                      s_kc + (tb + kr + 8) * Lay::rsK, tig, tabs,
                                                                      klane, qb, so);
        split_key_part<H * VB / 32, 2 * VB, Lay::kWideV, H / 16, true>(s_kc + (tb + kr) * Lay::rsK + Lay::cbO,
                                                                      s_kc + (tb + kr + 8) * Lay::rsK + Lay::cbO, tig,
                                                                      tabs, vlane, qb + H / 16, sr);
        const __half2* s_kw = reinterpret_cast<const __half2*>(s_kn);  // [||x_0||, ||x_1||] per token
        const float2 na = __half22float2(s_kw[tb + kr]), nc = __half22float2(s_kw[tb + kr + 8]);
        s[0] = so[0][0] * na.x + sr[0][0] * na.y;
        s[1] = so[0][1] * na.x + sr[0][1] * na.y;
        s[2] = so[0][2] * nc.x + sr[0][2] * nc.y;
        s[3] = so[0][3] * nc.x + sr[0][3] * nc.y;
      } else {
        // Two accumulator chains (even / odd kk) halve the dependent-mma latency.
        float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        if constexpr (KB > 0) {
          LaneSpan<KBITS, Lay::rsK % 4 == 0 ? 4 : 2, kDenseRot> k0, k1;
          if constexpr (RVQ || RVQ2) {
            // planes loaded below
          } else if constexpr (std::is_same_v<decltype(k0), CodeSpan<KBITS / 8>>) {
            k0.load(s_kc + (tb + kr) * Lay::rsK + (PAIR ? koff : KSPAN * tig));
            k1.load(s_kc + (tb + kr + 8) * Lay::rsK + (PAIR ? koff : KSPAN * tig));
          } else {
            k0.load_bits(s_kc + (tb + kr) * Lay::rsK, KBITS * tig);
            k1.load_bits(s_kc + (tb + kr + 8) * Lay::rsK, KBITS * tig);
          }
          if constexpr (RVQ2) {
            // Stage 1, then stage 2 (plane offset D KB / 8, its tables at kRvq2S): each as TurboQuant's
            // generic KB-bit key path (split_key_part over all D / 16 k-steps), into the same accumulators.
            // head_dim 80, 96, 112: the lane's D KB / 4 bits of a stage by LaneSpan (BitSpan where they are not
            // an even number of bytes: 3-bit stages; stage 2 from bit 8 PL of the row).
            (void)k0, (void)k1;
            constexpr int PL = D * KB / 8, SB = D * KB / 4;  // stage bytes; the lane's bits of a stage
            const std::uint8_t* ra = s_kc + (tb + kr) * Lay::rsK;
            const std::uint8_t* rc = s_kc + (tb + kr + 8) * Lay::rsK;
            using SSpan = LaneSpan<SB, Lay::rsK % 4 == 0 ? 4 : 2, kDenseRot>;
            if constexpr (std::is_same_v<SSpan, CodeSpan<SB / 8>>) {
              split_key_part<SB / 8, 2 * KB, Lay::kWideK, D / 16>(ra, rc, tig, tabs, klane, qb, s2);
              split_key_part<SB / 8, 2 * KB, Lay::kWideK, D / 16>(ra + PL, rc + PL, tig, tabs + Lay::kRvq2S, klane,
                                                                 qb, s2);
            } else {
              SSpan a1, c1, a2, c2;
              a1.load_bits(ra, SB * tig), c1.load_bits(rc, SB * tig);
              a2.load_bits(ra, 8 * PL + SB * tig), c2.load_bits(rc, 8 * PL + SB * tig);
              key_part_lookups<2 * KB, Lay::kWideK, D / 16>(a1, c1, tabs, klane, qb, s2);
              key_part_lookups<2 * KB, Lay::kWideK, D / 16>(a2, c2, tabs + Lay::kRvq2S, klane, qb, s2);
            }
          } else if constexpr (RVQ) {
            // The lane's D/4 dims in each plane (D/16 bytes at plane offset + D/16 tig): nibble n of a
            // plane word holds dims 2n, 2n + 1 of its 16; the stage-1 nibble | stage-2 nibble << 4 of
            // dims (4k, 4k + 1) of word i is byte k of e (a0 / a1 of kk = 4i + k), of (4k + 2, 4k + 3)
            // byte k of o (a2 / a3).
            // head_dim 80, 96, 112: the lane's D / 2 bits of a plane by LaneSpan (odd byte counts at 80 / 112:
            // BitSpan's unit loads; the planes start at D / 4 bytes, a multiple of 4).
            (void)k0, (void)k1;
            constexpr int PS = D / 16;  // plane bytes per lane
            using PSpan = LaneSpan<8 * PS, Lay::rsK % 4 == 0 ? 4 : 2, kDenseRot>;
            PSpan p10, p20, p11, p21;
            if constexpr (!kDenseRot) {
              // (the addresses as written before bit spans: the power-of-two instances' PTX is unchanged)
              const std::uint8_t* ra = s_kc + (tb + kr) * Lay::rsK + PS * tig;
              const std::uint8_t* rc = s_kc + (tb + kr + 8) * Lay::rsK + PS * tig;
              p10.load(ra), p20.load(ra + D / 4), p11.load(rc), p21.load(rc + D / 4);
            } else {
              const std::uint8_t* ra = s_kc + (tb + kr) * Lay::rsK;
              const std::uint8_t* rc = s_kc + (tb + kr + 8) * Lay::rsK;
              if constexpr (std::is_same_v<PSpan, CodeSpan<PS>>) {  // d96: 6-byte spans
                p10.load(ra + PS * tig), p20.load(ra + D / 4 + PS * tig);
                p11.load(rc + PS * tig), p21.load(rc + D / 4 + PS * tig);
              } else {
                p10.load_bits(ra, 8 * PS * tig), p20.load_bits(ra + D / 4, 8 * PS * tig);
                p11.load_bits(rc, 8 * PS * tig), p21.load_bits(rc + D / 4, 8 * PS * tig);
              }
            }
            constexpr std::uint32_t m4 = 0x0F0F0F0Fu;
#pragma unroll
            for (int i = 0; i < (PS + 3) / 4; ++i) {
              const std::uint32_t e0 = bitsel(p10.w[i], p20.w[i] << 4, m4);
              const std::uint32_t o0 = bitsel(p10.w[i] >> 4, p20.w[i], m4);
              const std::uint32_t e1 = bitsel(p11.w[i], p21.w[i] << 4, m4);
              const std::uint32_t o1 = bitsel(p11.w[i] >> 4, p21.w[i], m4);
#pragma unroll
              for (int k = 0; k < 4 && 4 * i + k < D / 16; ++k) {
                const int kk = 4 * i + k;
                std::uint32_t af[4];
                af[0] = lds_at(tabs, byte_addr(e0, k, klane));
                af[1] = lds_at(tabs, byte_addr(e1, k, klane));
                af[2] = lds_at(tabs, byte_addr(o0, k, klane));
                af[3] = lds_at(tabs, byte_addr(o1, k, klane));
                mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
              }
            }
          } else if constexpr (PVQ) {
            // The lane's dims D/4 tig + [0, D/4) are its (D/4) / g sub-vectors of g dims (g = 2, 2, 4, 8):
            // entry word h of sub-vector i is dims D/4 tig + g i + {2 h, 2 h + 1}, i.e. register a0 (h even)
            // or a2 (h odd) of kk = (g i + 2 h) / 4 for row gid (a1 / a3 for row gid + 8). The sub-vector's
            // table offset (compile time) folds into the load's immediate.
            constexpr int EB = Lay::kPvqE, NE = EB / 4, C = Lay::kPvqC;
            const std::uint32_t kbase = tabs + static_cast<std::uint32_t>((D / 4) / (EB / 2) * (EB << C)) * tig;
            auto entry = [&](const CodeSpan<KSPAN>& k, int i, std::uint32_t (&w)[NE]) {
              lds_entry<EB>(pvq_addr<EB, C>(k, i, kbase), w);
            };
            if constexpr (NE == 1) {  // 4 and 3 bits: sub-vectors 2 kk (a0, a1) and 2 kk + 1 (a2, a3)
#pragma unroll
              for (int kk = 0; kk < D / 16; ++kk) {
                std::uint32_t af[4][1];
                entry(k0, 2 * kk, af[0]), entry(k1, 2 * kk, af[1]);
                entry(k0, 2 * kk + 1, af[2]), entry(k1, 2 * kk + 1, af[3]);
                const std::uint32_t a4[4] = {af[0][0], af[1][0], af[2][0], af[3][0]};
                mma_f16(s2[kk & 1], a4, qb[kk][0], qb[kk][1]);
              }
            } else {  // 2 / 1 bits: one sub-vector is 1 / 2 kk
#pragma unroll
              for (int i = 0; i < (D / 4) / (EB / 2); ++i) {
                std::uint32_t ra[NE], rc[NE];
                entry(k0, i, ra), entry(k1, i, rc);
#pragma unroll
                for (int h = 0; h < NE / 2; ++h) {
                  const int kk = (NE / 2) * i + h;
                  const std::uint32_t af[4] = {ra[2 * h], rc[2 * h], ra[2 * h + 1], rc[2 * h + 1]};
                  mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
                }
              }
            }
          } else if constexpr (KIVI) {
            // Dims D/4 tig + 4 kk + {0..3}: their group's (min, scale) words (one 16-byte load), the
            // codes of rows gid / gid + 8 as fp16 integer pairs, dequantized into the A registers.
            const uint4* s_ks = reinterpret_cast<const uint4*>(s_kn) + (D / 16) * tig;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
              const uint4 w = s_ks[kk];
              const std::uint32_t mn01 = __byte_perm(w.x, w.y, 0x5410), sc01 = __byte_perm(w.x, w.y, 0x7632);
              const std::uint32_t mn23 = __byte_perm(w.z, w.w, 0x5410), sc23 = __byte_perm(w.z, w.w, 0x7632);
              std::uint32_t af[4];
              if constexpr (KB == 3) {
                // The four 3-bit fields from bit 12 kk on (straddling bytes and words): one funnel shift
                // puts them at bits 0, 3, 6, 9, and shifts by 3 bring each pair's second field to bit 0.
                const int b = 12 * kk, wi = b / 32, sh = b % 32;
                const std::uint32_t x0 = sh == 0 ? k0.w[wi] : __funnelshift_r(k0.w[wi], k0.w[wi + 1], sh);
                const std::uint32_t x1 = sh == 0 ? k1.w[wi] : __funnelshift_r(k1.w[wi], k1.w[wi + 1], sh);
                af[0] = kivi_dequant(kivi_int_pair<3>(x0, x0 >> 3, 0), sc01, mn01);
                af[1] = kivi_dequant(kivi_int_pair<3>(x1, x1 >> 3, 0), sc01, mn01);
                af[2] = kivi_dequant(kivi_int_pair<3>(x0 >> 6, x0 >> 9, 0), sc23, mn23);
                af[3] = kivi_dequant(kivi_int_pair<3>(x1 >> 6, x1 >> 9, 0), sc23, mn23);
              } else {
                // (field offsets compile-time per kk: dims 4 kk, 4 kk + 1 at bit b, 4 kk + 2, 4 kk + 3 at b2)
                const int b = 4 * kk * KB, wi = b / 32, by = (b % 32) / 8, oa = b % 8, ob = oa + KB;
                const int b2 = b + 2 * KB, by2 = (b2 % 32) / 8, oc = b2 % 8, od = oc + KB;
                af[0] = kivi_dequant(kivi_int_pair<KB>(k0.w[wi] >> oa, k0.w[wi] >> ob, by), sc01, mn01);
                af[1] = kivi_dequant(kivi_int_pair<KB>(k1.w[wi] >> oa, k1.w[wi] >> ob, by), sc01, mn01);
                af[2] = kivi_dequant(kivi_int_pair<KB>(k0.w[wi] >> oc, k0.w[wi] >> od, by2), sc23, mn23);
                af[3] = kivi_dequant(kivi_int_pair<KB>(k1.w[wi] >> oc, k1.w[wi] >> od, by2), sc23, mn23);
              }
              mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
            }
          } else if constexpr (F8) {
            // Word kk of a lane's span: the e4m3 codes of dims D/4 tig + 4 kk + {0..3}, so its low
            // half is (a0 | a1: k-slots 2tig + {0, 1}) and its high half (a2 | a3: 2tig + 8 + {0, 1}).
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
              const std::uint32_t af[4] = {e4m3x2_h2(k0.w[kk]), e4m3x2_h2(k1.w[kk]), e4m3x2_h2<1>(k0.w[kk]),
                                           e4m3x2_h2<1>(k1.w[kk])};
              mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
            }
          } else if constexpr (Lay::kQuad) {
            // Index bytes of two rows' 4-bit pair fields: x = (k0 field 2b) | (k1 field 2b) << 4 gives
            // (a0, a1) of kk = 4i + b (tokens gid, gid + 8 at dims 4kk + {0, 1}), y the same for
            // fields 2b + 1 (a2, a3): one 64-bit look-up per register pair.
            constexpr std::uint32_t m4 = 0x0F0F0F0Fu;
#pragma unroll
            for (int i = 0; i < (D / 16 + 3) / 4; ++i) {
              const std::uint32_t x = bitsel(k0.w[i], k1.w[i] << 4, m4);
              const std::uint32_t y = bitsel(k0.w[i] >> 4, k1.w[i], m4);
#pragma unroll
              for (int bq = 0; bq < 4 && 4 * i + bq < D / 16; ++bq) {
                const int kk = 4 * i + bq;
                const uint2 ra = lds64_at(tabs, byte_addr(x, bq, qlane)), rc = lds64_at(tabs, byte_addr(y, bq, qlane));
                const std::uint32_t af[4] = {ra.x, ra.y, rc.x, rc.y};
                mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
              }
            }
          } else if constexpr (KB == 2) {  // 4-bit pair fields: spread to bytes, then one PRMT per address
            NibbleBytes<(KBITS + 31) / 32> n0, n1;
            n0.spread(k0.w);
            n1.spread(k1.w);
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
              std::uint32_t af[4];
              af[0] = lds_at(tabs, n0.addr(2 * kk, klane));
              af[1] = lds_at(tabs, n1.addr(2 * kk, klane));
              af[2] = lds_at(tabs, n0.addr(2 * kk + 1, klane));
              af[3] = lds_at(tabs, n1.addr(2 * kk + 1, klane));
              mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
            }
          } else {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
              std::uint32_t af[4];
              af[0] = lds_at(tabs, k0.template row_addr<2 * KB, Lay::kWideK>(2 * kk, klane));
              af[1] = lds_at(tabs, k1.template row_addr<2 * KB, Lay::kWideK>(2 * kk, klane));
              af[2] = lds_at(tabs, k0.template row_addr<2 * KB, Lay::kWideK>(2 * kk + 1, klane));
              af[3] = lds_at(tabs, k1.template row_addr<2 * KB, Lay::kWideK>(2 * kk + 1, klane));
              mma_f16(s2[kk & 1], af, qb[kk][0], qb[kk][1]);
            }
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) s[i] = s2[0][i] + s2[1][i];
        if constexpr (PROD) {
          // + gamma_t * kappa * <S Pi q, signs_t>: sign pairs (+-1, +-1) against the (S Pi q) fragments.
          float sg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          // head_dim 80, 96, 112: the lane's D/4 sign bits from bit D/4 tig of the sign stream (rows padded to
          // 16-byte multiples; the stream starts at cbM, a multiple of 2 or 4).
          using GSpan = std::conditional_t<kDenseRot, BitSpan<D / 4, Lay::cbM % 4 == 0 ? 4 : 2>, CodeSpan<SSPAN>>;
          GSpan g0, g1;
          if constexpr (kDenseRot) {
            static_assert(Lay::rsK % 16 == 0, "dense rotations: Prod key rows padded (16-byte aligned)");
            g0.load_bits(s_kc + (tb + kr) * Lay::rsK + Lay::cbM, (D / 4) * tig);
            g1.load_bits(s_kc + (tb + kr + 8) * Lay::rsK + Lay::cbM, (D / 4) * tig);
          } else {
            g0.load(s_kc + (tb + kr) * Lay::rsK + Lay::cbM + SSPAN * tig);
            g1.load(s_kc + (tb + kr + 8) * Lay::rsK + Lay::cbM + SSPAN * tig);
          }
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            std::uint32_t af[4];
            af[0] = lds_at(stab, g0.template row_addr<2>(2 * kk, klane));
            af[1] = lds_at(stab, g1.template row_addr<2>(2 * kk, klane));
            af[2] = lds_at(stab, g0.template row_addr<2>(2 * kk + 1, klane));
            af[3] = lds_at(stab, g1.template row_addr<2>(2 * kk + 1, klane));
            const uint2 qf = s_qs[kk * 32 + lane];
            mma_f16(sg, af, qf.x, qf.y);
          }
          if constexpr (QJL) {  // no MSE part (s is zero) and gamma 1
#pragma unroll
            for (int i = 0; i < 4; ++i) s[i] = sg[i];
          } else {
            const __half* s_kw = reinterpret_cast<const __half*>(s_kn);  // [||x||, gamma] per token
            const float ga = __half2float(s_kw[2 * (tb + kr) + 1]);
            const float gc = __half2float(s_kw[2 * (tb + kr + 8) + 1]);
            s[0] += ga * sg[0];
            s[1] += ga * sg[1];
            s[2] += gc * sg[2];
            s[3] += gc * sg[3];
          }
        }
      }
      float pw[4];  // p * ||v|| of score rows gid / gid + 8 (tokens ta / tc), heads 2 tig + {0, 1}
      std::uint32_t spb[4];  // SPLIT: the B fragments of part 0 (spb[0], spb[1]) and part 1 (spb[2], spb[3])
      (void)spb;
      {
        const int ta = tb + kr, tc = ta + 8;  // tile rows (tokens) of s[0..1] and s[2..3]
        const bool va = ta >= lo && ta < n, vc = tc >= lo && tc < n;
        if constexpr (SPLIT || KIVI || PVQ) {  // SPLIT: norms in S, value norms in the P fragments; KIVI, PVQ: none
          softmax_weights(a, s, va, vc, 1.0f, 1.0f, 1.0f, 1.0f, m, l, acc, pw);
        } else if constexpr (PAIR) {  // per element: each column's sequence, its tokens and norms
          const int ua = TILE * it + ta, uc = ua + 8;  // the rows' offsets from the warp's first positions
          const bool ok[4] = {ua >= ulo0 && ua < uhi0, ua >= ulo1 && ua < uhi1, uc >= ulo0 && uc < uhi0,
                              uc >= ulo1 && uc < uhi1};
          const __half* k0n = reinterpret_cast<const __half*>(s_kc + kno0);
          const __half* k1n = reinterpret_cast<const __half*>(s_kc + kno1);
          const __half* v0n = reinterpret_cast<const __half*>(s_kc + vno0);
          const __half* v1n = reinterpret_cast<const __half*>(s_kc + vno1);
          const float nk[4] = {__half2float(k0n[ta]), __half2float(k1n[ta]), __half2float(k0n[tc]),
                               __half2float(k1n[tc])};
          const float nv[4] = {__half2float(v0n[ta]), __half2float(v1n[ta]), __half2float(v0n[tc]),
                               __half2float(v1n[tc])};
          softmax_elems<D / 16>(a, s, ok, nk, nv, m, l, acc, pw);
        } else {
          const __half* s_kh = reinterpret_cast<const __half*>(s_kn);
          constexpr bool kPairK = PROD && !QJL;  // Prod: [||x||, gamma] per token; qjl and the others: ||x||
          const float nka = __half2float(s_kh[kPairK ? 2 * ta : ta]), nkc = __half2float(s_kh[kPairK ? 2 * tc : tc]);
          softmax_weights(a, s, va, vc, nka, nkc, __half2float(s_vn[ta]), __half2float(s_vn[tc]), m, l, acc, pw);
        }
        if constexpr (SPLIT) {
          // P fragments per part, transposed in registers as the integer path's (movm_trans): the weight
          // of rows ta / tc times that part's value norm, rounded once to fp16; rows that are not tokens
          // get norm 0 (their stale norms may be NaN; their weight is 0). Until session 32 P went through
          // the warp's s_p and each lane multiplied the norms of its k-slot tokens: the same products.
          const __half2* s_vw = reinterpret_cast<const __half2*>(s_vn);  // [||v_0||, ||v_1||] per token
          const float2 na = __half22float2(s_vw[ta]), nc = __half22float2(s_vw[tc]);
          const float na0 = va ? na.x : 0.0f, na1 = va ? na.y : 0.0f, nc0 = vc ? nc.x : 0.0f, nc1 = vc ? nc.y : 0.0f;
          spb[0] = movm_trans(pack_h2(pw[0] * na0, pw[1] * na0));
          spb[1] = movm_trans(pack_h2(pw[2] * nc0, pw[3] * nc0));
          spb[2] = movm_trans(pack_h2(pw[0] * na1, pw[1] * na1));
          spb[3] = movm_trans(pack_h2(pw[2] * nc1, pw[3] * nc1));
        }
      }
      // ---- values: B = P[tokens 2tig + {0,1}, 2tig + 8 + {0,1}][head gid] (rows past n or before lo are zero
      // weights, and their staged codes, possibly stale, are finite look-ups). Looking the value
      // fragments up before the softmax (they do not depend on P) was measured slower: 614.7 vs 594.0 us
      // at batch 16 x 65,536, 4-bit (docs/CUDA_NOTES.md, run s3-4).
      // k-slots 2tig, 2tig+1, 2tig+8, 2tig+9 of the value mma are tokens r0..r3: 2tig + {0, 1, 8, 9}
      // (padded rows), or tig + {0, 4, 8, 12} (kBulk's dense rows: each load reads 4 consecutive rows).
      constexpr int R1 = Lay::kBulk ? 4 : 1, R2 = 8, R3 = Lay::kBulk ? 12 : 9;
      const int r0 = Lay::kBulk ? tig : 2 * tig;
      if constexpr (SPLIT) {
        const std::uint8_t* vrow = s_vc + (tb + r0) * Lay::rsV;
        split_value_cross<H * KB / 64, KB, H / 16, Lay::rsV, R1, R2, R3>(vrow + (H * KB / 64) * gid, tabs, klane,
                                                                       spb[0], spb[1], acc);
        split_value_cross<H * VB / 64, VB, H / 16, Lay::rsV, R1, R2, R3>(vrow + Lay::cbO + (H * VB / 64) * gid, tabs,
                                                                       vlane, spb[2], spb[3], acc + H / 16);
      } else {
      // The B fragments straight from the score fragments: score row r is token r0 .. r3 of k-slot r
      // (kr above), so the transpose of the 8 x 8 fp16 blocks (rows 0-7 | 8-15) x heads is b0 | b1.
      const std::uint32_t pb0 = movm_trans(pack_h2(pw[0], pw[1]));
      const std::uint32_t pb1 = movm_trans(pack_h2(pw[2], pw[3]));
      using VSpan = LaneSpan<VBITS, Lay::rsV % 4 == 0 ? 4 : 2, kDenseRot>;
      VSpan v0, v1, v2, v3;
      const std::uint8_t* vr = s_vc + (tb + r0) * Lay::rsV + (PAIR ? voff : VSPAN * gid);
      if constexpr (!std::is_same_v<VSpan, CodeSpan<VBITS / 8>>) {
        const std::uint8_t* vrow = s_vc + (tb + r0) * Lay::rsV;
        v0.load_bits(vrow, VBITS * gid);
        v1.load_bits(vrow + R1 * Lay::rsV, VBITS * gid);
        v2.load_bits(vrow + R2 * Lay::rsV, VBITS * gid);
        v3.load_bits(vrow + R3 * Lay::rsV, VBITS * gid);
      } else if constexpr (Lay::kBulk && VSPAN == 8 && Lay::rsV == 64) {
        // Dense 64-byte rows: a 64-bit load's half-warp (gid 0..3, rows tig + 4k) would hit the
        // same 8 banks in rows tig and tig + 2 (2-way conflict). Two 32-bit loads per row instead,
        // lanes tig 2, 3 taking their second word first, cover 32 distinct banks per load; the
        // words are then put back in order (H200 run s7-2, b16 x 64k, 4-bit d128: 291.4 / 293.1 ->
        // 290.6 / 291.8 us in two passes; 8 of the step's ~103 shared wavefronts were excess).
        const bool sw = (tig & 2) != 0;
        const std::uint8_t* vfirst = vr + (sw ? 4 : 0);
        const std::uint8_t* vsecond = vr + (sw ? 0 : 4);
        auto ld = [&](VSpan& v, int off) {
          const std::uint32_t x = *reinterpret_cast<const std::uint32_t*>(vfirst + off);
          const std::uint32_t y = *reinterpret_cast<const std::uint32_t*>(vsecond + off);
          v.w[0] = sw ? y : x;
          v.w[1] = sw ? x : y;
          v.w[2] = 0;
        };
        ld(v0, 0);
        ld(v1, R1 * Lay::rsV);
        ld(v2, R2 * Lay::rsV);
        ld(v3, R3 * Lay::rsV);
      } else {
        v0.load(vr);
        v1.load(vr + R1 * Lay::rsV);
        v2.load(vr + R2 * Lay::rsV);
        v3.load(vr + R3 * Lay::rsV);
      }
      if constexpr (RVQ2) {
        // Stage 1, then stage 2: each as the generic value path (split_value_part), into the same acc. head_dim
        // 80, 96, 112: the lane's D VB / 8 bits of a stage by LaneSpan (BitSpan at 3 bits, and at 4 bits at 80 /
        // 112; stage 2 from bit 8 PL).
        (void)v0, (void)v1, (void)v2, (void)v3;
        constexpr int PL = D * VB / 8, VSB = D * VB / 8;  // plane bytes; the lane's bits in a plane
        using SSpan = LaneSpan<VSB, Lay::rsV % 4 == 0 ? 4 : 2, kDenseRot>;
        if constexpr (std::is_same_v<SSpan, CodeSpan<VSB / 8>>) {
          constexpr int VS = VSB / 8;
          const std::uint8_t* vrow = s_vc + (tb + r0) * Lay::rsV + VS * gid;
          split_value_part<VS, 2 * VB, Lay::kWideV, D / 16, Lay::rsV, R1, R2, R3>(vrow, tabs, vlane, pb0, pb1, acc);
          split_value_part<VS, 2 * VB, Lay::kWideV, D / 16, Lay::rsV, R1, R2, R3>(vrow + PL, tabs + Lay::kRvq2S,
                                                                                vlane, pb0, pb1, acc);
        } else {
          const std::uint8_t* vrow = s_vc + (tb + r0) * Lay::rsV;
          const int roff[4] = {0, R1 * Lay::rsV, R2 * Lay::rsV, R3 * Lay::rsV};
#pragma unroll
          for (int st = 0; st < 2; ++st) {
            SSpan q[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) q[r].load_bits(vrow + roff[r], 8 * PL * st + VSB * gid);
            value_part_lookups<2 * VB, Lay::kWideV, D / 16>(q[0], q[1], q[2], q[3], tabs + st * Lay::kRvq2S, vlane,
                                                            pb0, pb1, acc);
          }
        }
      } else if constexpr (RVQ) {
        // Each plane's D/4 bits of the lane's dims (D/8 of them) in rows r0, r0 + R1, r0 + R2, r0 + R3;
        // per plane the cross-token 2-bit fields (nibble n: (row x, row y) at dim 2n: lo; 2n + 1: hi), then
        // stage-1 nibble | stage-2 nibble << 4 as bytes (even nibbles: E, odd: O): the table entry of
        // (row x, row y) at that dim is the A register. Powers of two: D/32 whole bytes (CodeSpan); head_dim
        // 80, 96, 112: 20, 24, 28 bits by LaneSpan (BitSpan).
        (void)v0, (void)v1, (void)v2, (void)v3;
        constexpr int PVB = D / 4, PW = (PVB + 31) / 32;  // plane bits of the lane; their words
        using PSpan = LaneSpan<PVB, Lay::rsV % 4 == 0 ? 4 : 2, kDenseRot>;
        constexpr bool kBytes = std::is_same_v<PSpan, CodeSpan<PVB / 8>>;
        // (whole bytes: the row pointer at the lane's span as before bit spans, so those instances' PTX is
        // unchanged)
        const std::uint8_t* vrow = s_vc + (tb + r0) * Lay::rsV + (kBytes ? (PVB / 8) * gid : 0);
        PSpan q1[4], q2[4];
        const int roff[4] = {0, R1 * Lay::rsV, R2 * Lay::rsV, R3 * Lay::rsV};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          if constexpr (kBytes) {
            q1[r].load(vrow + roff[r]), q2[r].load(vrow + roff[r] + D / 4);
          } else {
            q1[r].load_bits(vrow + roff[r], PVB * gid), q2[r].load_bits(vrow + roff[r] + D / 4, PVB * gid);
          }
        }
        constexpr std::uint32_t m2 = 0x33333333u, m4 = 0x0F0F0F0Fu;
        auto cross = [&](std::uint32_t x, std::uint32_t y, std::uint32_t& lo, std::uint32_t& hi) {
          lo = bitsel(x, y << 2, m2);
          hi = bitsel(x >> 2, y, m2);
        };
        auto bytes = [&](std::uint32_t l1, std::uint32_t l2, std::uint32_t& e, std::uint32_t& o) {
          e = bitsel(l1, l2 << 4, m4);
          o = bitsel(l1 >> 4, l2, m4);
        };
#pragma unroll
        for (int wq = 0; wq < PW; ++wq) {
          std::uint32_t l1a, h1a, l2a, h2a, l1c, h1c, l2c, h2c;
          cross(q1[0].w[wq], q1[1].w[wq], l1a, h1a), cross(q2[0].w[wq], q2[1].w[wq], l2a, h2a);
          cross(q1[2].w[wq], q1[3].w[wq], l1c, h1c), cross(q2[2].w[wq], q2[3].w[wq], l2c, h2c);
          std::uint32_t ela, ola, eha, oha, elc, olc, ehc, ohc;
          bytes(l1a, l2a, ela, ola), bytes(h1a, h2a, eha, oha), bytes(l1c, l2c, elc, olc), bytes(h1c, h2c, ehc, ohc);
#pragma unroll
          for (int jj = 0; jj < 8 && 8 * wq + jj < D / 16; ++jj) {
            const bool odd = (jj & 1) != 0;
            std::uint32_t af[4];
            af[0] = lds_at(tabs, byte_addr(odd ? ola : ela, jj / 2, vlane));  // (rows r0, r0 + R1) at d0
            af[1] = lds_at(tabs, byte_addr(odd ? oha : eha, jj / 2, vlane));  // same rows at d1
            af[2] = lds_at(tabs, byte_addr(odd ? olc : elc, jj / 2, vlane));  // (r0 + R2, r0 + R3) at d0
            af[3] = lds_at(tabs, byte_addr(odd ? ohc : ehc, jj / 2, vlane));
            mma_f16(acc[8 * wq + jj], af, pb0, pb1);
          }
        }
      } else if constexpr (PVQ) {
        // Block j's dims 2 (gid D/16 + j) + {0, 1} are word j % (g / 2) of sub-vector (gid D/16 + j) / (g / 2),
        // code byte j / (g / 2) of the lane's span: each row's word is (d0, d1) of that token; a byte permute
        // with the neighbouring row's word gives the A registers (rows r0, r0 + R1 at d0, and at d1), as
        // the generic path below.
        constexpr int EB = Lay::kPvqE, NE = EB / 4, C = Lay::kPvqC, NS = (D / 8) / (EB / 2);  // NS: sub-vectors per lane
        const std::uint32_t vbase = tabs + (share ? 0u : static_cast<std::uint32_t>(Lay::kPvqV)) +
                                    static_cast<std::uint32_t>(NS * (EB << C)) * gid;
#pragma unroll
        for (int i = 0; i < NS; ++i) {
          std::uint32_t c0[NE], c1[NE], c2[NE], c3[NE];
          lds_entry<EB>(pvq_addr<EB, C>(v0, i, vbase), c0);
          lds_entry<EB>(pvq_addr<EB, C>(v1, i, vbase), c1);
          lds_entry<EB>(pvq_addr<EB, C>(v2, i, vbase), c2);
          lds_entry<EB>(pvq_addr<EB, C>(v3, i, vbase), c3);
#pragma unroll
          for (int h = 0; h < NE; ++h) {
            std::uint32_t af[4];
            af[0] = __byte_perm(c0[h], c1[h], 0x5410);  // (rows r0, r0 + R1) at d0
            af[1] = __byte_perm(c0[h], c1[h], 0x7632);  // same rows at d1
            af[2] = __byte_perm(c2[h], c3[h], 0x5410);  // (r0 + R2, r0 + R3) at d0
            af[3] = __byte_perm(c2[h], c3[h], 0x7632);
            mma_f16(acc[NE * i + h], af, pb0, pb1);
          }
        }
      } else if constexpr (KIVI) {
        // The lane's dims 2 (gid D/16 + j) + {0, 1} lie in one value group (G_v a multiple of D/8, checked
        // by the host; at head_dim 256 also G_v = 16: two groups): its (min, scale) words of rows r0, r0 + R1, r0 + R2, r0 + R3 (zero for rows that
        // are not tokens: stale scalars may be NaN, and 0 x NaN is NaN in the mma), then per block j the
        // two rows' codes at d0 and at d1 as fp16 integer pairs, dequantized into the A registers.
        const std::uint32_t* s_vw = reinterpret_cast<const std::uint32_t*>(s_kc + Lay::off_vn);
        const int npt = D >> (__ffs(a.vside.group) - 1);               // words per token
        const int grp = (gid * (D / 8)) >> (__ffs(a.vside.group) - 1);  // the lane's (first) value group
        // head_dim 256 with value groups of 16 channels: the lane's 32 dims are two groups (blocks j < 8 and
        // j >= 8; the host allows no smaller groups); otherwise both sets are the one group.
        const int grp2 = D == 256 && a.vside.group < D / 8 ? grp + 1 : grp;
        std::uint32_t sw[4], sw2[4];
        const int rr[4] = {r0, r0 + R1, r0 + R2, r0 + R3};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sw[i] = s_vw[(tb + rr[i]) * npt + grp];
          sw2[i] = D == 256 ? s_vw[(tb + rr[i]) * npt + grp2] : sw[i];
          if (lo > 0 || n < 16) {
            const bool ok = rr[i] >= lo && rr[i] < n;
            sw[i] = ok ? sw[i] : 0u, sw2[i] = ok ? sw2[i] : 0u;
          }
        }
        const std::uint32_t mn01 = __byte_perm(sw[0], sw[1], 0x5410), sc01 = __byte_perm(sw[0], sw[1], 0x7632);
        const std::uint32_t mn23 = __byte_perm(sw[2], sw[3], 0x5410), sc23 = __byte_perm(sw[2], sw[3], 0x7632);
        const std::uint32_t mn01b = __byte_perm(sw2[0], sw2[1], 0x5410), sc01b = __byte_perm(sw2[0], sw2[1], 0x7632);
        const std::uint32_t mn23b = __byte_perm(sw2[2], sw2[3], 0x5410), sc23b = __byte_perm(sw2[2], sw2[3], 0x7632);
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          const bool hi = D == 256 && j >= 8;  // the second group's blocks (compile time)
          const std::uint32_t m01 = hi ? mn01b : mn01, s01 = hi ? sc01b : sc01;
          const std::uint32_t m23 = hi ? mn23b : mn23, s23 = hi ? sc23b : sc23;
          std::uint32_t af[4];
          if constexpr (VB == 3) {  // fields d0, d1 from bit 6 j on: one funnel shift per row, as the keys
            const int b = 6 * j, wi = b / 32, sh = b % 32;
            auto at = [&](const VSpan& v) { return sh == 0 ? v.w[wi] : __funnelshift_r(v.w[wi], v.w[wi + 1], sh); };
            const std::uint32_t x0 = at(v0), x1 = at(v1), x2 = at(v2), x3 = at(v3);
            af[0] = kivi_dequant(kivi_int_pair<3>(x0, x1, 0), s01, m01);            // d0
            af[1] = kivi_dequant(kivi_int_pair<3>(x0 >> 3, x1 >> 3, 0), s01, m01);  // d1
            af[2] = kivi_dequant(kivi_int_pair<3>(x2, x3, 0), s23, m23);
            af[3] = kivi_dequant(kivi_int_pair<3>(x2 >> 3, x3 >> 3, 0), s23, m23);
          } else {
            const int b = 2 * j * VB, wi = b / 32, by = (b % 32) / 8, oa = b % 8, ob = oa + VB;
            af[0] = kivi_dequant(kivi_int_pair<VB>(v0.w[wi] >> oa, v1.w[wi] >> oa, by), s01, m01);  // d0
            af[1] = kivi_dequant(kivi_int_pair<VB>(v0.w[wi] >> ob, v1.w[wi] >> ob, by), s01, m01);  // d1
            af[2] = kivi_dequant(kivi_int_pair<VB>(v2.w[wi] >> oa, v3.w[wi] >> oa, by), s23, m23);
            af[3] = kivi_dequant(kivi_int_pair<VB>(v2.w[wi] >> ob, v3.w[wi] >> ob, by), s23, m23);
          }
          mma_f16(acc[j], af, pb0, pb1);
        }
      } else if constexpr (F8) {
        // Rows past n or before lo hold stale or unwritten bytes (possibly e4m3's NaN, which times a
        // zero weight is still NaN in the mma): their codes become 0 on such steps (warp-uniform test).
        if (lo > 0 || n < 16) {
          const bool ok0 = r0 >= lo && r0 < n, ok1 = r0 + R1 >= lo && r0 + R1 < n;
          const bool ok2 = r0 + R2 >= lo && r0 + R2 < n, ok3 = r0 + R3 >= lo && r0 + R3 < n;
#pragma unroll
          for (int i = 0; i < (VSPAN + 3) / 4; ++i) {  // (head_dim 80, 112: the last word partly)
            v0.w[i] = ok0 ? v0.w[i] : 0u, v1.w[i] = ok1 ? v1.w[i] : 0u;
            v2.w[i] = ok2 ? v2.w[i] : 0u, v3.w[i] = ok3 ? v3.w[i] : 0u;
          }
        }
        // Block j's dims d0, d1 are bytes 2j, 2j + 1 of the lane's span (word j / 2, half j % 2): one
        // PRMT interleaves two rows' pairs, (r0 d0 | r0+R1 d0 | r0 d1 | r0+R1 d1), and its halves are
        // the A registers of d0 and d1.
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          const std::uint32_t sel = (j & 1) ? 0x7362u : 0x5140u;
          const std::uint32_t x01 = __byte_perm(v0.w[j / 2], v1.w[j / 2], sel);
          const std::uint32_t x23 = __byte_perm(v2.w[j / 2], v3.w[j / 2], sel);
          const std::uint32_t af[4] = {e4m3x2_h2(x01), e4m3x2_h2<1>(x01), e4m3x2_h2(x23), e4m3x2_h2<1>(x23)};
          mma_f16(acc[j], af, pb0, pb1);
        }
      } else if constexpr (VB == 4) {
        // Cross-token pair indices: for a byte of two tokens' rows (dims d0, d1 of block j), the
        // index (token 2tig's code) | (token 2tig+1's code) << 4 of dim d0 (d1) is a table entry whose
        // half2 is the A register (tokens 2tig, 2tig + 1) at that dim: four bytes per LOP3.
        constexpr std::uint32_t m = 0x0F0F0F0Fu;
#pragma unroll
        for (int wq = 0; wq < (VSPAN + 3) / 4; ++wq) {  // (head_dim 80, 96, 112: the last word partly)
          const std::uint32_t lo01 = bitsel(v0.w[wq], v1.w[wq] << 4, m);
          const std::uint32_t hi01 = bitsel(v0.w[wq] >> 4, v1.w[wq], m);
          const std::uint32_t lo23 = bitsel(v2.w[wq], v3.w[wq] << 4, m);
          const std::uint32_t hi23 = bitsel(v2.w[wq] >> 4, v3.w[wq], m);
#pragma unroll
          for (int k = 0; k < 4 && 4 * wq + k < VSPAN; ++k) {
            std::uint32_t af[4];
            af[0] = lds_at(tabs, byte_addr(lo01, k, vlane));  // (tok 2tig, 2tig+1) at dim d0
            af[1] = lds_at(tabs, byte_addr(hi01, k, vlane));  // same tokens at dim d1
            af[2] = lds_at(tabs, byte_addr(lo23, k, vlane));  // (tok 2tig+8, 2tig+9) at d0
            af[3] = lds_at(tabs, byte_addr(hi23, k, vlane));
            mma_f16(acc[4 * wq + k], af, pb0, pb1);
          }
        }
      } else if constexpr (VB == 2) {
        // The same with 2-bit codes: a pair field (dims d0, d1) is 4 bits, the cross-token index of
        // dim d0 is (token 2tig's code) | (token 2tig+1's code) << 2; indices spread to bytes.
        constexpr std::uint32_t m = 0x33333333u;
        constexpr int NWV = (VBITS + 31) / 32;
        std::uint32_t lo01[NWV], hi01[NWV], lo23[NWV], hi23[NWV];
#pragma unroll
        for (int wq = 0; wq < NWV; ++wq) {
          lo01[wq] = bitsel(v0.w[wq], v1.w[wq] << 2, m);
          hi01[wq] = bitsel(v0.w[wq] >> 2, v1.w[wq], m);
          lo23[wq] = bitsel(v2.w[wq], v3.w[wq] << 2, m);
          hi23[wq] = bitsel(v2.w[wq] >> 2, v3.w[wq], m);
        }
        if constexpr (Lay::kQuad) {
          // Index bytes (e01 = lo01 field j | hi01 field j << 4: tokens r0, r0 + R1 at dims d0, d1 of
          // block j) give (a0, a1) with one 64-bit look-up, e23 the same for (a2, a3).
          constexpr std::uint32_t m4 = 0x0F0F0F0Fu;
#pragma unroll
          for (int wq = 0; wq < NWV; ++wq) {
            const std::uint32_t e01 = bitsel(lo01[wq], hi01[wq] << 4, m4);  // even j
            const std::uint32_t o01 = bitsel(lo01[wq] >> 4, hi01[wq], m4);  // odd j
            const std::uint32_t e23 = bitsel(lo23[wq], hi23[wq] << 4, m4);
            const std::uint32_t o23 = bitsel(lo23[wq] >> 4, hi23[wq], m4);
#pragma unroll
            for (int jj = 0; jj < 8 && 8 * wq + jj < D / 16; ++jj) {
              const uint2 ra = lds64_at(tabv, byte_addr((jj & 1) ? o01 : e01, jj / 2, qlane));
              const uint2 rc = lds64_at(tabv, byte_addr((jj & 1) ? o23 : e23, jj / 2, qlane));
              const std::uint32_t af[4] = {ra.x, ra.y, rc.x, rc.y};
              mma_f16(acc[8 * wq + jj], af, pb0, pb1);
            }
          }
        } else {
        NibbleBytes<NWV> a0, a1, a2, a3;
        a0.spread(lo01), a1.spread(hi01), a2.spread(lo23), a3.spread(hi23);
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          std::uint32_t af[4];
          af[0] = lds_at(tabs, a0.addr(j, vlane));
          af[1] = lds_at(tabs, a1.addr(j, vlane));
          af[2] = lds_at(tabs, a2.addr(j, vlane));
          af[3] = lds_at(tabs, a3.addr(j, vlane));
          mma_f16(acc[j], af, pb0, pb1);
        }
        }
      } else if constexpr (VB == 3 && std::is_same_v<VSpan, CodeSpan<VBITS / 8>>) {
        // Cross-token 6-bit fields (cross3): one look-up per A register, no byte permute of two rows'
        // entries; the WIDE windows address the fields.
        VSpan e01, o01, e23, o23;
        cross3(v0, v1, e01, o01);
        cross3(v2, v3, e23, o23);
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          std::uint32_t af[4];
          af[0] = lds_at(tabs, e01.template row_addr<6, true>(j, vlane));  // (rows r0, r0 + R1) at dim d0
          af[1] = lds_at(tabs, o01.template row_addr<6, true>(j, vlane));  // same rows at d1
          af[2] = lds_at(tabs, e23.template row_addr<6, true>(j, vlane));  // (r0 + R2, r0 + R3) at d0
          af[3] = lds_at(tabs, o23.template row_addr<6, true>(j, vlane));
          mma_f16(acc[j], af, pb0, pb1);
        }
      } else {
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          const std::uint32_t c0 = lds_at(tabs, v0.template row_addr<2 * VB, Lay::kWideV>(j, vlane));
          const std::uint32_t c1 = lds_at(tabs, v1.template row_addr<2 * VB, Lay::kWideV>(j, vlane));
          const std::uint32_t c2 = lds_at(tabs, v2.template row_addr<2 * VB, Lay::kWideV>(j, vlane));
          const std::uint32_t c3 = lds_at(tabs, v3.template row_addr<2 * VB, Lay::kWideV>(j, vlane));
          std::uint32_t af[4];
          af[0] = __byte_perm(c0, c1, 0x5410);  // (tok 2tig, 2tig+1) at dim d0
          af[1] = __byte_perm(c0, c1, 0x7632);  // same tokens at dim d1
          af[2] = __byte_perm(c2, c3, 0x5410);  // (tok 2tig+8, 2tig+9) at d0
          af[3] = __byte_perm(c2, c3, 0x7632);
          mma_f16(acc[j], af, pb0, pb1);
        }
      }
      }  // !SPLIT
    }
    if constexpr (!kCopyFirst) {
      if (it + Lay::kStages - 1 < ntw) issue(it + Lay::kStages - 1, ahead, pnext);
      if constexpr (!Lay::kBulk) cp_async_commit();
      pnext = page_at(it + Lay::kStages);
    }
    if constexpr (!kPow2) {
      cur_c = cur_c + 1 == S ? 0 : cur_c + 1;
      phase_c ^= cur_c == 0 ? 1u : 0u;
    }
  }
  cp_async_wait<0>();
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at(); trace && lane == 0) trace[3 + warp] = gtime();
#endif
  __syncthreads();
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at(); trace && threadIdx.x == 0) trace[19] = gtime();
#endif

  // Merge the NW warps: per warp m, l (reduced over its rows) and acc into shared memory. Dim d of a head's
  // row is at column d + 2 (d / (D/8)) of kAccRow = D + 20 floats: each lane writes its block j's dims
  // (d0, d0 + 1) as one float2, and with rows 2 kAccRow = 8 mod 32 words apart and a lane's D/8 dims 2
  // words apart from the next lane's, a half-warp's 16 float2 stores hit 32 distinct banks at head_dim
  // 64, 96, 128, 256 (2-way at 80, 112). Rows of D floats made every store 8- to 16-way conflicted:
  // ncu at batch 1 x 4k (run s20-6) counted 77% of the kernel's shared wavefronts as excess.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
  constexpr int AR = Lay::kAccRow;
  auto merge_col = [](int d) { return d + 2 * (d / (D / 8)); };  // d0 even: d0 + 1 is in d0's block
  // [NW warps][8 heads][AR]: over the tables where they hold it (Lay::kMergeInTab), else over the stages
  float* s_acc = reinterpret_cast<float*>(Lay::kMergeInTab ? smem : stages);
  float* s_ml = s_acc + NW * kMmaHeads * AR;        // [NW warps][8 heads][2]
#pragma unroll
  for (int j = 0; j < D / 16; ++j) {
    const int d0 = !SPLIT ? 2 * (gid * (D / 16) + j)
                          : (j < H / 16 ? 2 * (gid * (H / 16) + j) : H + 2 * (gid * (H / 16) + j - H / 16));
    *reinterpret_cast<float2*>(s_acc + (warp * kMmaHeads + 2 * tig) * AR + merge_col(d0)) =
        make_float2(acc[j][0], acc[j][2]);
    *reinterpret_cast<float2*>(s_acc + (warp * kMmaHeads + 2 * tig + 1) * AR + merge_col(d0)) =
        make_float2(acc[j][1], acc[j][3]);
  }
  if (gid == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s_ml[(warp * kMmaHeads + 2 * tig + h) * 2] = m[h];
      s_ml[(warp * kMmaHeads + 2 * tig + h) * 2 + 1] = l[h];
    }
  }
  __syncthreads();
  // PAIR: column h < G is query head h of sequence b (dims 0..DR-1 of the step), G <= h < 2 G head h - G of
  // sequence b + 1 (dims DR..D-1); rows of DR = D / 2 dims.
  for (int idx = tid; idx < kMmaHeads * DR; idx += NT) {
    const int h = idx / DR, d = idx % DR;
    const int mh = PAIR && h >= a.group ? 1 : 0;
    const int hg = PAIR ? h - mh * a.group : blockIdx.z * kMmaHeads + h;
    if (hg >= a.group || (PAIR && mh && !has1)) continue;
    const int dv = d + mh * DR;  // the column's dims in the step
    float mw[NW], M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, mw[w] = s_ml[(w * kMmaHeads + h) * 2]);
    float sum = 0.0f, lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float fw = mw[w] == -INFINITY ? 0.0f : exp2f(mw[w] - M);
      sum += fw * s_acc[(w * kMmaHeads + h) * AR + merge_col(dv)];
      lsum += fw * s_ml[(w * kMmaHeads + h) * 2 + 1];
    }
    if constexpr (FUSE) {  // the row's result (combine_kernel's y = acc / l with one split)
      s_qrot[idx] = sum / lsum;
      continue;
    }
    const std::size_t bh = static_cast<std::size_t>(b + mh) * a.num_heads + g * a.group + hg;
    a.ws_acc[(bh * a.num_splits + split) * DR + d] = sum;
    if (d == 0) {
      a.ws_ml[(bh * a.num_splits + split) * 2] = M;
      a.ws_ml[(bh * a.num_splits + split) * 2 + 1] = lsum;
    }
  }
  if constexpr (FUSE && PAIR) {  // each sequence's G rows (rows G .. 2 G - 1 of s_qrot: sequence b + 1)
    const std::size_t row0 = static_cast<std::size_t>(b) * a.num_heads + g * a.group;
    fused_epilogue<DR, NT, true>(s_qrot, a.group, a.out, a.io, row0, a.vsigns, a.vscale, nullptr);
    if (has1)
      fused_epilogue<DR, NT, true>(s_qrot + a.group * DR, a.group, a.out, a.io, row0 + a.num_heads, a.vsigns,
                                   a.vscale, nullptr);
  } else if constexpr (FUSE) {
    const int heads = min(kMmaHeads, a.group - static_cast<int>(blockIdx.z) * kMmaHeads);
    const std::size_t row0 = static_cast<std::size_t>(b) * a.num_heads + g * a.group + blockIdx.z * kMmaHeads;
    fused_epilogue<D, NT, !F8 && !KIVI>(s_qrot, heads, a.out, a.io, row0, a.vsigns, a.vscale, SPLIT ? a.vchan : nullptr);
  }
#ifdef TURBOKV_H16_TRACE
  if (unsigned long long* trace = trace_at()) {
    __syncthreads();
    if (threadIdx.x == 0) trace[20] = gtime();
  }
#endif
}

/// Launch (or occupancy query) of decode_h16_kernel<D, KB, VB>; grid z = ceil(group / 8); the FUSE
/// instance when a.fuse_out (one split).
template <int D, int KB, int VB, int NW, bool PROD = false, bool SPLIT = false, int MODE = kModeTq>
void launch_h16_nw(const LaunchShape& shape, cudaStream_t stream, const DecodeKernelArgs& a) {
  // No FUSE instance for dense rotations (the combine kernel rotates back) or product VQ (the combine
  // kernel applies the value smoothing after the rotation).
  constexpr bool kDenseRot = (D & (D - 1)) != 0;
  auto kernel = decode_h16_kernel<D, KB, VB, NW, PROD, false, SPLIT, MODE>;
  auto fused = decode_h16_kernel<D, KB, VB, NW, PROD, !kDenseRot && MODE != kModePvq, SPLIT, MODE>;
  using Lay = H16Layout<D, KB, VB, NW, PROD, SPLIT, MODE>;
  const int smem = Lay::bytes();
  // Driver calls once per instance (and device: the process uses one), not per launch: at batch 1
  // the decode itself takes tens of microseconds.
  static const bool attr_set = [&] {
    TKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    TKV_CUDA_CHECK(cudaFuncSetAttribute(fused, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)attr_set;
  static_assert(Lay::kTileT == 128 || Lay::kTileT == 192 || Lay::kTileT == 256,
                "decode_workspace_bytes bounds block steps of 64, 128, 192, 256");
  if (shape.occupancy) {
    static int o = -1;
    if (o < 0) TKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, kernel, 32 * NW, smem));
    *shape.occupancy = o;
    if (shape.tile_tokens) *shape.tile_tokens = Lay::kTileT;
    return;
  }
  if (a.fuse_out) fused<<<shape.grid, dim3(32 * NW), smem, stream>>>(a);
  else kernel<<<shape.grid, dim3(32 * NW), smem, stream>>>(a);
  TKV_CHECK_LAUNCH();
}

/// 16 warps per block (one block per SM: the 64 KB 4-bit pair table is shared by all 16 warps);
/// 8 at head_dim 256 (ptxas gives that instance ~220 registers when it may), or 12 there with
/// shape.wide (DecodeArgs::block_warps; ptxas then fits it in 168 registers, no spill but 8 bytes at
/// 4 bits). H200 runs s29-1 .. s29-5 (docs/CUDA_NOTES.md "Session 29"): 12 warps 1.03-1.33x faster
/// at batch 16 / 64 x 32k-128k (4/1 heads, 3 and 4 bits), 0.92-0.98x at batch 1, even at batch 4; 20
/// warps at head_dim 128 (96 registers) measured 0.90-1.00x; 24 at 64 (80) 0.94-1.18x, losing at the small
/// shapes where the one-sequence kernel runs by default (sequence pairs take the large ones): not built.
/// History (docs/CUDA_NOTES.md): 8 warps against 4 in v8 (704 vs 781 us at batch 16 x 65,536,
/// 4-bit, 32/8 heads); v11 moved d64/d128 from two blocks of 8 warps to one of 16.
template <int D, int KB, int VB, bool PROD = false, int MODE = kModeTq>
void launch_h16(const LaunchShape& shape, cudaStream_t stream, const DecodeKernelArgs& a) {
  // shape.wide (DecodeArgs::block_warps): 12 warps at head_dim 256 (TurboQuant-MSE keys, or Prod keys: PROD;
  // since session 30 also fp8 (KB = VB = 8), KIVI and 2 + 2-bit RVQ) where the block's shared memory fits:
  // every instance here. 2-bit keys with 2-bit values fit since session 30 (their 128 KB of quad tables hold
  // the warps' merge, H16Layout::kMergeInTab: 3 stages); in session 29 they kept 8 warps (with pair tables
  // instead of quad tables 12 warps measured 0.96-1.01x, run s29-4). Sequence pairs at head_dim 128 (kModePair
  // on this D = 256 step, decode_h16_pair128.cu) choose the same way (session 34).
  constexpr bool kWideMode =
      MODE == kModeTq || MODE == kModeKivi || MODE == kModeRvq || MODE == kModePair || MODE == kModeQjl;
  if constexpr (D == 256 && kWideMode && H16Layout<D, KB, VB, 12, PROD, false, MODE>::kFits)
    if (shape.wide) return launch_h16_nw<D, KB, VB, 12, PROD, false, MODE>(shape, stream, a);
  // Sketch keys (Prod, QJL) at head_dim 112 with 3-bit values: 12 warps (168 registers). At 16 warps (128
  // registers) ptxas gives the sketch instances at 80 and 112 stack frames of up to 144 bytes; H100, b16 x 32k,
  // 32/8 heads, 16 warps (run s42-2) / 12 warps for every 80 / 112 instance (run s42-3), us: d112 3-bit values
  // Prod 514.2 / 378.1, QJL 433.8 / 327.9; but d112 2- and 4-bit Prod 246.5 / 254.1 and 269.7 / 266.9, QJL 218.3
  // / 256.9 and 225.9 / 264.1, and d80 2 / 3 / 4-bit Prod 197.5 / 207.6, 302.9 / 330.5, 215.6 / 218.0 (QJL 188.7 /
  // 215.2, 246.1 / 294.3, 195.7 / 220.8): elsewhere 16 warps win, spills and all.
  constexpr bool kDense12 = PROD && D == 112 && VB == 3 && H16Layout<D, KB, VB, 12, PROD, false, MODE>::kFits;
  launch_h16_nw<D, KB, VB, (D == 256 ? 8 : kDense12 ? 12 : 16), PROD, false, MODE>(shape, stream, a);
}

/// The runtime head_dim and value width -> instance dispatch of the TurboQuant-key families (MODE kModeTq:
/// MSE keys at KB bits, or Prod keys with a KB-bit MSE part; kModeQjl: QJL keys, KB = 0, PROD).
template <int KB, bool PROD = false, int MODE = kModeTq>
void launch_h16_kb(int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  auto by_d = [&](auto vbc) {
    constexpr int VB = decltype(vbc)::value;
    switch (d) {
      case 64: return launch_h16<64, KB, VB, PROD, MODE>(shape, s, a);
      case 128: return launch_h16<128, KB, VB, PROD, MODE>(shape, s, a);
      case 256: return launch_h16<256, KB, VB, PROD, MODE>(shape, s, a);
    }
    switch (d) {  // dense rotations (h16_dense_head_dim)
      case 80: return launch_h16<80, KB, VB, PROD, MODE>(shape, s, a);
      case 96: return launch_h16<96, KB, VB, PROD, MODE>(shape, s, a);
      case 112: return launch_h16<112, KB, VB, PROD, MODE>(shape, s, a);
    }
    throw std::logic_error("launch_h16: head_dim out of range");
  };
  switch (vb) {
    case 1: return by_d(std::integral_constant<int, 1>{});
    case 2: return by_d(std::integral_constant<int, 2>{});
    case 3: return by_d(std::integral_constant<int, 3>{});
    case 4: return by_d(std::integral_constant<int, 4>{});
  }
  throw std::logic_error("launch_h16: value bits out of range");
}

/// Fractional widths b + 0.5 (decode_h16s.cu; warps per block as launch_h16: 16, 8 or 12 at head_dim 256).
void launch_h16s(int d, int b, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// Two sequences per block at head_dim d = 64 or 128 (H16Layout::PAIR; kb, vb 2..4), with run_mma's
/// launcher signature: decode_h16_pair.cu. The grid's y is (sequence pair, KV head).
void launch_h16_pair(int kb, int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// Its head_dim-128 instances (the head_dim-256 step; 12 or 8 warps, shape.wide): decode_h16_pair128.cu.
void launch_h16_pair128(int kb, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16_k1(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16_k2(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16_k3(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16_k4(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
// The other methods' instances, each in its method's file, with run_mma's launcher signature (decode.cu:
// kb, head_dim d, vb, shape, stream, arguments); kb is the method's bits (keys and values alike).
/// fp8 e4m3 keys and values (KB = VB = 8) at head_dim 64, 80, 96, 112, 128, 256 (kb, vb unused): decode_fp8.cu.
void launch_fp8_h16(int kb, int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// RVQ keys and values at kb bits per stage: 2 (H16Layout::RVQ, head_dim 64 / 80 / 96 / 112 / 128 / 256) or 3, 4
/// (H16Layout::RVQ2, head_dim 64 / 80 / 96 / 112 / 128): rvq.cu.
void launch_rvq_h16(int kb, int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// KIVI keys and values at kb = 2, 3 or 4 bits (H16Layout::KIVI) at head_dim 64 / 128 / 256: kivi.cu.
void launch_kivi_h16(int kb, int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// Product-VQ keys and values at kb = 1..4 bits (H16Layout::PVQ) at head_dim 64 / 128: pvq.cu.
void launch_pvq_h16(int kb, int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// TurboQuant-Prod keys with MSE part of kmb bits (0..3): instances in decode_h16p_k{0..3}.cu.
void launch_h16p_k0(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16p_k1(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16p_k2(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_h16p_k3(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
/// QJL keys (H16Layout::QJL; m = head_dim 64 / 80 / 96 / 112 / 128 / 256) with TurboQuant-MSE values at vb =
/// 1..4 bits (kb unused): qjl.cu.
void launch_qjl_h16(int kb, int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);

}  // namespace turbokv::cuda::detail
