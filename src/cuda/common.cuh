// Shared helpers of the CUDA backend (not public API).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "turbokv/cuda.h"
#include "turbokv/error.h"
#include "turbokv/fastdiv.h"
#include "turbokv/rotation.h"

namespace turbokv::cuda::detail {

#ifdef TURBOKV_H16_TRACE
/// Diagnostic build only (-DTURBOKV_H16_TRACE): device buffer of kH16TraceBlocks x kH16TraceWords
/// words that decode_h16_kernel fills per block with %globaltimer stamps (ns): [0] smid, [1] entry,
/// [2] set-up done, [3 .. 3 + NW) each warp's main-loop end, [19] merge start, [20] end; thread 0's
/// set-up: [21] first copies issued, [22] tables filled, [23] query rotated. Set by the
/// caller (the bench); nullptr: nothing written.
inline unsigned long long* h16_trace_buf = nullptr;
constexpr int kH16TraceBlocks = 4096, kH16TraceWords = 24;
#endif

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* expr, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + expr + " -> " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace turbokv::cuda::detail

/// Checks a CUDA runtime call; throws std::runtime_error naming it.
#define TKV_CUDA_CHECK(expr)                                                                 \
  do {                                                                                       \
    const cudaError_t tkv_e_ = (expr);                                                       \
    if (tkv_e_ != cudaSuccess) ::turbokv::cuda::detail::cuda_fail(tkv_e_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Checks the last launch.
#define TKV_CHECK_LAUNCH() TKV_CUDA_CHECK(cudaGetLastError())

namespace turbokv::cuda::detail {

inline cudaStream_t stream_of(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

/// head_dim values the TurboQuant-MSE and fp8 paths take on the GPU: multiples of 16 in 64..256 (the
/// CUDA-core decode's 16-dimension lanes). Powers of two rotate by the FWHT, the others (80, 96, 112,
/// ...) by the reference's dense Haar matrix (rotation.h).
inline bool gpu_head_dim(int d) { return d >= 64 && d <= 256 && d % 16 == 0; }
/// head_dim values of the tuned kernels (Hadamard encode, tensor-core decodes): 64, 128, 256.
inline bool pow2_head_dim(int d) { return d == 64 || d == 128 || d == 256; }
/// The argument checks of the contiguous-block encoders and decoders (rvq, pvq, qjl, tq-prod and
/// polar encode, pvq_dequantize): n <= 2^36 vectors; when n > 0, the input (named in_name) and out
/// non-null. Throws std::invalid_argument naming `where` and the argument. Returns n > 0 (n == 0:
/// nothing to do, null pointers allowed).
inline bool check_block_io(const char* where, std::size_t n, const void* in, const char* in_name, const void* out) {
  check_arg(n <= (static_cast<std::size_t>(1) << 36), where, "n", n, "must be <= 2^36");
  if (n == 0) return false;
  check_arg(in != nullptr, where, in_name, in, "must be a non-null device pointer");
  check_arg(out != nullptr, where, "out", out, "must be a non-null device pointer");
  return true;
}

/// Grid of a grid-stride kernel over n items, per_block items per block: ceil(n / per_block)
/// blocks, at most 2^20.
inline unsigned capped_grid(std::size_t n, int per_block) {
  const std::size_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < (1u << 20) ? blocks : (1u << 20));
}

/// head_dim values that are not powers of two with fp16 tensor-core decode instances (dense
/// rotations, decode_h16.cuh): 80, 96, 112. Other multiples of 16 run the CUDA-core kernel.
inline bool h16_dense_head_dim(int d) { return d == 80 || d == 96 || d == 112; }

/// True when the environment variable `name` is set to "0": the A/B switches that turn a path off
/// (TURBOKV_STAGED_RAW, TURBOKV_RVQ_H16, TURBOKV_KIVI_H16, TURBOKV_PVQ_H16). Read once per call site
/// (callers keep the result in a static).
inline bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

/// The paged layout's page size rule (cuda.h): throws std::invalid_argument naming `where` and the
/// value unless page_size is a power of two in 1..4096.
inline void check_page_size(const char* where, int page_size) {
  check_arg(page_size >= 1 && page_size <= 4096 && (page_size & (page_size - 1)) == 0, where, "page_size", page_size,
            "must be a power of two in 1..4096");
}

/// The argument checks shared by the append entry points (tq_mse_append, fp8_append, kivi_append):
/// shapes, page size, the pool's page stride (must equal `stride`, the layout's; `stride_rule` says
/// which), x_type, the vector count and, when there is work, the pointers. Returns the vector count
/// batch * num_new * num_kv_heads (0: nothing to do). Throws std::invalid_argument naming `where`
/// and the argument. The kernels' grid-stride loops step int vector indices past the count, so it
/// must stay at most 2^31 - 2^20.
inline long long check_append(const char* where, const void* x, int batch, int num_new, int num_kv_heads,
                              const std::int32_t* start, const PageTable& table, const PagedPool& pool,
                              IoType x_type, std::size_t stride, const char* stride_rule) {
  check_arg(batch >= 0 && num_new >= 0, where, "batch/num_new", batch, "must be >= 0");
  check_arg(num_kv_heads > 0, where, "num_kv_heads", num_kv_heads, "must be positive");
  check_page_size(where, table.page_size);
  check_arg(pool.page_stride == stride, where, "pool.page_stride", pool.page_stride, stride_rule);
  check_arg(x_type == IoType::kF32 || x_type == IoType::kF16 || x_type == IoType::kBf16, where, "x_type",
            static_cast<int>(x_type), "must be kF32, kF16 or kBf16");
  const long long total = 1LL * batch * num_new * num_kv_heads;
  check_arg(total <= (1LL << 31) - (1LL << 20), where, "batch*num_new*num_kv_heads", total,
            "must be at most 2^31 - 2^20");
  if (total > 0)
    check_arg(x && start && table.pages && pool.data, where, "pointers", 0, "must be non-null device pointers");
  return total;
}

/// A new device array holding a copy of v (max(v.size(), 1) elements, so an empty v still
/// gets a non-null pointer); throws std::runtime_error (TKV_CUDA_CHECK) if either call fails,
/// freeing what it allocated.
template <class T>
DeviceArray<T> upload(const std::vector<T>& v) {
  T* p = nullptr;
  TKV_CUDA_CHECK(cudaMalloc(&p, sizeof(T) * (v.empty() ? 1 : v.size())));
  DeviceArray<T> owner(p);
  TKV_CUDA_CHECK(cudaMemcpy(p, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
  return owner;
}

/// Uploads the reference's dense rotation m = Pi ([dim][dim] row-major, Rotation::matrix()) as rot = Pi
/// and rot_t = Pi^T (both row-major): the tables of head_dims that are not powers of two.
inline void upload_dense_rotation(const std::vector<float>& m, int dim, DeviceArray<float>& rot,
                                  DeviceArray<float>& rot_t) {
  std::vector<float> mt(m.size());
  for (int i = 0; i < dim; ++i)
    for (int j = 0; j < dim; ++j) mt[std::size_t(j) * dim + i] = m[std::size_t(i) * dim + j];
  rot = upload(m);
  rot_t = upload(mt);
}

/// The device copy of a reference rotation (rotation.h) for the tables of every rotated method: its dense Haar
/// matrix where it has one (kHaar: the Hadamard kind at a head_dim that is not a power of two) as rot = Pi and
/// rot_t = Pi^T (upload_dense_rotation), else its random signs D into signs. Returns the scale the kernels apply
/// after the unnormalised FWHT: 1 / sqrt(dim), or 1 for the dense matrix.
inline float upload_rotation(const Rotation& r, DeviceArray<float>& signs, DeviceArray<float>& rot,
                             DeviceArray<float>& rot_t) {
  if (r.kind() == RotationKind::kHaar) {
    upload_dense_rotation(r.matrix(), r.dim(), rot, rot_t);
    return 1.0f;
  }
  signs = upload(r.signs());
  return Rotation::hadamard_scale(r.dim());
}

inline int num_sms() {
  static int n = [] {
    int dev = 0, v = 0;
    TKV_CUDA_CHECK(cudaGetDevice(&dev));
    TKV_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}


template <int N>
__device__ __forceinline__ void cp_async_n(void* smem, const void* gmem) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async size");
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(N));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Where an append kernel writes vector v of x [batch][num_new][num_kv_heads][...]:
/// v = (b * num_new + j) * num_kv_heads + g is token start[b] + j of sequence b, KV head g; its page id
/// (page table row b of max_pages entries, pages of 2^page_shift tokens) and slot in that page.
/// Multiply-high divisions (FastDiv): as integer divisions by runtime values they cost ~20
/// instructions each.
struct AppendSlot {
  int g, page, off;
};
__device__ __forceinline__ AppendSlot append_slot(int v, const FastDiv& div_heads, const FastDiv& div_new,
                                                  const std::int32_t* start, const std::int32_t* pages,
                                                  int max_pages, int page_shift) {
  const unsigned bj = div_heads.div(static_cast<unsigned>(v));
  const int g = static_cast<int>(static_cast<unsigned>(v) - bj * div_heads.d);
  const int b = static_cast<int>(div_new.div(bj));
  const int j = static_cast<int>(bj - static_cast<unsigned>(b) * div_new.d);
  const int pos = __ldg(start + b) + j;
  const int page = __ldg(pages + static_cast<std::size_t>(b) * max_pages + (pos >> page_shift));
  return {g, page, pos & ((1 << page_shift) - 1)};
}

/// Where an encoder writes token t's codes and per-token scalars (norms, radii), cb and sb bytes each.
struct TokenDst {
  std::uint8_t* codes;
  std::uint8_t* scalars;
};

/// A contiguous block of n tokens (formats.h: [n x codes][n x scalars]), as the reference's encode writes it.
struct BlockDst {
  std::uint8_t* out;
  std::size_t n, cb, sb;
  __device__ TokenDst at(std::size_t t) const { return {out + t * cb, out + n * cb + t * sb}; }
};

/// Pages (cuda.h's paged layout): vector t of x [batch][num_new][num_kv_heads][head_dim] (append_slot)
/// goes to slot `off` of its (page, KV head) block, a formats.h block of page_size tokens: codes at
/// off * cb, scalars at page_size * cb + off * sb.
struct PagedDst {
  std::uint8_t* pool;
  std::size_t stride, cb, sb;
  int num_kv_heads, max_pages, page_shift;
  FastDiv div_heads, div_new;
  const std::int32_t* start;
  const std::int32_t* pages;
  __device__ TokenDst at(std::size_t t) const {
    const AppendSlot sl = append_slot(static_cast<int>(t), div_heads, div_new, start, pages, max_pages, page_shift);
    std::uint8_t* blk = pool + (static_cast<std::size_t>(sl.page) * num_kv_heads + sl.g) * stride;
    return {blk + sl.off * cb, blk + (cb << page_shift) + sl.off * sb};
  }
};

/// Bytes of one (page, KV head) block of a per-token layout (cb code bytes and sb scalar bytes per
/// token): page_size * (cb + sb) rounded up to 32 (blocks start on 32-byte L2 sectors, as tq_page_stride).
inline std::size_t token_page_stride(int page_size, std::size_t cb, std::size_t sb) {
  return (static_cast<std::size_t>(page_size) * (cb + sb) + 31) / 32 * 32;
}

/// The checks of an append into pages of a per-token layout (check_append; pool.page_stride must equal
/// token_page_stride(page_size, cb, sb), the rule `stride_rule` names) and its PagedDst. total: set to
/// the vector count batch * num_new * num_kv_heads (0: nothing to do).
inline PagedDst paged_dst(const char* where, const void* x, int batch, int num_new, int num_kv_heads,
                          const std::int32_t* start, const PageTable& table, const PagedPool& pool, IoType x_type,
                          std::size_t cb, std::size_t sb, const char* stride_rule, long long& total) {
  check_page_size(where, table.page_size);
  total = check_append(where, x, batch, num_new, num_kv_heads, start, table, pool, x_type,
                       token_page_stride(table.page_size, cb, sb), stride_rule);
  PagedDst d{};
  d.pool = pool.data, d.stride = pool.page_stride, d.cb = cb, d.sb = sb;
  d.num_kv_heads = num_kv_heads, d.max_pages = table.max_pages;
  d.page_shift = __builtin_ctz(static_cast<unsigned>(table.page_size));
  if (total > 0) d.div_heads = FastDiv(num_kv_heads), d.div_new = FastDiv(num_new);
  d.start = start, d.pages = table.pages;
  return d;
}

/// The runtime -> compile-time head_dim dispatch of the block encoders (rvq, pvq, polar): calls
/// f(std::integral_constant<int, D>{}) for d = 64, 128 or 256 (their tables admit no other size).
template <class F>
void with_pow2_head_dim(int d, F&& f) {
  switch (d) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
  }
}

/// The same with the dense-rotation case of the block encoders (rvq, pvq, polar): dense (head_dim not a
/// power of two, the tables' dense()) calls f(std::integral_constant<int, 0>{}), the instances that read d
/// at run time and rotate by the tables' dense matrix.
template <class F>
void with_head_dim_or_dense(int d, bool dense, F&& f) {
  if (dense) return f(std::integral_constant<int, 0>{});
  with_pow2_head_dim(d, f);
}

/// The input-type dispatch of the encoders: calls f(std::type_identity<XT>{}) with XT = float, __half
/// or __nv_bfloat16 for x_type kF32, kF16, kBf16.
template <class F>
void with_io_type(IoType x_type, F&& f) {
  switch (x_type) {
    case IoType::kF32: return f(std::type_identity<float>{});
    case IoType::kF16: return f(std::type_identity<__half>{});
    case IoType::kBf16: return f(std::type_identity<__nv_bfloat16>{});
  }
}

/// Element i of an input of type XT (float, __half, __nv_bfloat16) widened to fp32 (exact).
template <class XT>
__device__ __forceinline__ float load_x(const void* x, std::size_t i) {
  return static_cast<float>(static_cast<const XT*>(x)[i]);
}

/// The reference's common input check (Codec::validate, src/ref/common.cpp: a NaN or Inf, or an fp64
/// norm >= 32768) on the GPU, for the appends whose kernels do not test it themselves (fp8, RVQ,
/// product VQ, PolarQuant, KIVI; tq_mse_append tests in its kernel): every rejected vector of x
/// ([n][d] of type x_type, widened exactly) sets *bad to 1 (atomicOr), one warp per vector, the norm
/// summed in fp64 (the reference's sum in another order: a norm within fp64 rounding of 32768 may be
/// judged differently). One launch on stream s; bad == nullptr or n == 0: nothing. bad_input.cu.
void flag_bad_vectors(const void* x, IoType x_type, long long n, int d, std::int32_t* bad, cudaStream_t s);
/// KIVI's own check (src/ref/kivi.cpp do_validate): a group scale (max - min) / (2^bits - 1) above 32768
/// (in fp64 from the fp32 values, as the reference) sets *bad. x: [batch][num_new][num_kv_heads][d];
/// key groups: each channel over G = group consecutive new tokens of a sequence (num_new a multiple of
/// G); value groups: G consecutive channels of one token. Reachable only at 1 bit (otherwise a norm
/// below 32768 bounds every scale below 65536 / 3); checked at every width. bad_input.cu.
void flag_bad_kivi_scales(const void* x, IoType x_type, int batch, int num_new, int num_kv_heads, int d, int bits,
                          bool key, int group, std::int32_t* bad, cudaStream_t s);

/// mbarrier and bulk-copy (TMA) primitives (PTX ISA 8.0, sm_90); bar, dst: shared-window addresses
/// (__cvta_generic_to_shared). mbar_init: count arrivals per phase.
__device__ __forceinline__ void mbar_init(std::uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/// Spins until the phase of bar with this parity has completed.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
/// One thread: expects `bytes` transaction bytes on bar and arrives (one arrival), then copies `bytes`
/// bytes src -> dst by one bulk copy completing on bar (16-byte aligned addresses, bytes a multiple of
/// 16). The proxy fence first orders this thread's (and, after a __syncwarp / barrier, its peers')
/// earlier generic-proxy accesses of dst before the async-proxy write.
__device__ __forceinline__ void bulk_load(std::uint32_t bar, std::uint32_t dst, const void* src, unsigned bytes) {
  asm volatile(
      "fence.proxy.async.shared::cta;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %1, [%0];" ::"r"(bar),
      "r"(bytes), "r"(dst), "l"(src)
      : "memory");
}

}  // namespace turbokv::cuda::detail
