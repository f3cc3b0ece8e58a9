// Host side of decode attention: validation, split choice, workspace, launch of
// the split kernel (decode.cuh) and of the log-sum-exp merge + inverse rotation (not with one split
// on the fp16 tensor-core kernel, whose FUSE instance finishes the rows itself).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "decode_h16.cuh"
#include "splitk.cuh"
#include "staged.cuh"
#include "turbokv/cuda_vq.h"
#include "turbokv/cuda_kivi.h"
#include "turbokv/cuda_qjl.h"
#include "turbokv/error.h"

namespace turbokv::cuda {
namespace detail {
namespace {

/// One block per (sequence, query head): merges the splits by log-sum-exp and,
/// for rotated values, applies Pi^T = D H / sqrt(d) once.
template <class T>
__device__ __forceinline__ void store_out(void* out, std::size_t i, float v) {
  if constexpr (std::is_same_v<T, float>) static_cast<float*>(out)[i] = v;
  else if constexpr (std::is_same_v<T, __half>) static_cast<__half*>(out)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
}

/// 16-bit queries -> fp32 (exact) for the decode kernels.
template <class T>
__global__ void widen_kernel(const T* __restrict__ x, std::size_t n, float* __restrict__ y) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = static_cast<float>(x[i]);
}

/// Log-sum-exp merge of one (sequence, head)'s splits, then the inverse value rotation. Thread
/// (lane l, column c) of the block (blockDim.x a multiple of d / 4) folds splits l, l + SL, ... of
/// the float4 column c into a running (m, l, acc) with its loads issued eight splits at a time (one
/// round trip to L2 for up to 8 SL splits: at batch 1 the merge is latency-bound), then the SL lanes
/// are merged through shared memory: part[SL][d], pm[SL], pl[SL], y[d].
/// chan (fractional widths): the rotation is per half (blk = d / 2, signs of both halves in vsigns) and
/// dim i of the result is output channel chan[i]; otherwise blk = d and chan = nullptr.
/// vrot (dense rotations, head_dim not a power of two): Pi [d][d] row-major, out_j = sum_i Pi[i][j] y_i.
template <class T>
__global__ void combine_kernel(const float* __restrict__ ws_acc, const float* __restrict__ ws_ml, int splits,
                               int d, const float* __restrict__ vsigns, float vscale, void* __restrict__ out,
                               const std::int32_t* __restrict__ chan, int blk, const float* __restrict__ vrot,
                               const float* __restrict__ vlambda) {
  extern __shared__ float part[];
  const int C = d / 4, SL = blockDim.x / C;
  const int lane = threadIdx.x / C, c = threadIdx.x % C;
  float* pm = part + SL * d;
  float* pl = pm + SL;
  float* y = pl + SL;
  // Launched as a programmatic dependent of the split kernel (launch_combine): wait until that grid
  // has completed and its workspace writes are visible (a no-op for an ordinary launch).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const std::size_t bh = blockIdx.x;
  const float2* ml = reinterpret_cast<const float2*>(ws_ml) + bh * splits;
  const float4* acc = reinterpret_cast<const float4*>(ws_acc) + bh * splits * static_cast<std::size_t>(C);
  float m = -INFINITY, l = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (lane < SL) {
    for (int s0 = lane; s0 < splits; s0 += 8 * SL) {
      float2 mv[8];
      float4 av[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int s = s0 + k * SL;
        mv[k] = s < splits ? ml[s] : make_float2(-INFINITY, 0.0f);
        av[k] = s < splits ? acc[static_cast<std::size_t>(s) * C + c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (mv[k].x == -INFINITY) continue;  // an empty split (or past the last)
        const float mn = fmaxf(m, mv[k].x);
        const float f0 = exp2f(m - mn), f1 = exp2f(mv[k].x - mn);  // m = -inf: f0 = 0
        l = l * f0 + mv[k].y * f1;
        o.x = o.x * f0 + av[k].x * f1;
        o.y = o.y * f0 + av[k].y * f1;
        o.z = o.z * f0 + av[k].z * f1;
        o.w = o.w * f0 + av[k].w * f1;
        m = mn;
      }
    }
    reinterpret_cast<float4*>(part)[lane * C + c] = o;
    if (c == 0) pm[lane] = m, pl[lane] = l;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float M = -INFINITY;
    for (int k = 0; k < SL; ++k) M = fmaxf(M, pm[k]);
    float sum = 0.0f, L = 0.0f;
    for (int k = 0; k < SL; ++k) {
      const float w = pm[k] == -INFINITY ? 0.0f : exp2f(pm[k] - M);
      sum += w * part[k * d + i];
      L += w * pl[k];
    }
    y[i] = sum / L;
  }
  if (vrot != nullptr) {
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      float o = 0.0f;
      for (int i = 0; i < d; ++i) o = fmaf(vrot[static_cast<std::size_t>(i) * d + j], y[i], o);
      store_out<T>(out, bh * d + j, vlambda ? vlambda[j] * o : o);
    }
    return;
  }
  if (vsigns == nullptr) {
    for (int i = threadIdx.x; i < d; i += blockDim.x) store_out<T>(out, bh * d + i, y[i]);
    return;
  }
  __syncthreads();
  for (int h = 1; h < blk; h <<= 1) {
    for (int p = threadIdx.x; p < d / 2; p += blockDim.x) {
      const int j = (p / h) * 2 * h + p % h;
      const float u = y[j], v = y[j + h];
      y[j] = u + v;
      y[j + h] = u - v;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float o = y[i] * (vscale * vsigns[i]);
    store_out<T>(out, bh * d + (chan ? chan[i] : i), vlambda ? vlambda[i] * o : o);
  }
}

/// The staged decodes' query preparation (StagedCall): row blockIdx.x of in [rows][d] (fp32) -> out = Pi q
/// (fp32): rot_t nullptr: rotate_shared (* signs, FWHT, * scale), d floats of dynamic shared memory; else
/// the dense rotation (head_dim not a power of two) by rot_t = Pi^T [d][d] (rotate_dense_shared: fp32
/// multiply-adds in ascending j), 2 d floats. in == out allowed (the row is read whole before it is written).
__global__ void rotate_query_kernel(const float* in, float* out, int d, const float* __restrict__ signs, float scale,
                                    const float* __restrict__ rot_t) {
  extern __shared__ float rq[];
  const std::size_t row = blockIdx.x;
  for (int j = threadIdx.x; j < d; j += blockDim.x) rq[j] = in[row * d + j];
  if (rot_t)
    splitk::rotate_dense_shared(rq, rq + d, d, rot_t);
  else
    splitk::rotate_shared(rq, d, signs, scale, false);  // its first step touches only this thread's j
  for (int j = threadIdx.x; j < d; j += blockDim.x) out[row * d + j] = rq[j];
}

/// The fp32 query the kernels read: args.q itself, or its widened copy at the workspace's end.
const float* query_f32(const DecodeArgs& args, float* ws_q, cudaStream_t s) {
  const std::size_t n = std::size_t(args.batch) * args.num_heads * args.head_dim;
  if (args.io == IoType::kF32) return static_cast<const float*>(args.q);
  const unsigned grid = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 1024));
  if (args.io == IoType::kF16)
    widen_kernel<<<grid, 256, 0, s>>>(static_cast<const __half*>(args.q), n, ws_q);
  else
    widen_kernel<<<grid, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(args.q), n, ws_q);
  TKV_CHECK_LAUNCH();
  return ws_q;
}

void launch_combine(const DecodeArgs& args, const DecodeKernelArgs& ka, int splits, const float* vsigns, float vscale,
                    cudaStream_t s) {
  const unsigned bh = static_cast<unsigned>(std::size_t(args.batch) * args.num_heads);
  const int threads = 256;  // 256 / (head_dim / 4) split lanes of head_dim / 4 threads (the rest idle)
  const int lanes = threads / (args.head_dim / 4);
  const std::size_t smem = (std::size_t(lanes) * args.head_dim + 2 * lanes + args.head_dim) * sizeof(float);
  // Programmatic dependent launch: the combine grid is launched while the split kernel still runs
  // (which signals griddepcontrol.launch_dependents) and waits in griddepcontrol.wait, so its launch
  // latency overlaps the decode (batch 1 is latency-bound).
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(bh);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  auto go = [&](auto kernel) {
    TKV_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<const float*>(ka.ws_acc),
                                      static_cast<const float*>(ka.ws_ml), splits, args.head_dim, vsigns, vscale,
                                      args.out, ka.vchan, ka.vchan ? args.head_dim / 2 : args.head_dim,
                                      ka.vrot, ka.vlambda));
  };
  switch (args.io) {
    case IoType::kF32: go(combine_kernel<float>); break;
    case IoType::kF16: go(combine_kernel<__half>); break;
    case IoType::kBf16: go(combine_kernel<__nv_bfloat16>); break;
  }
  TKV_CHECK_LAUNCH();
}

/// Soft-capping and scale fields shared by every decode family.
void set_softcap(const DecodeArgs& args, DecodeKernelArgs& ka) {
  ka.softcap_l2 = args.softcap > 0 ? static_cast<float>(M_LOG2E * args.softcap) : 0.0f;
  ka.softcap_inv = args.softcap > 0 ? 1.0f / ka.softcap_l2 : 0.0f;
}

struct Plan {
  int group, nsub, hpw, nsub_block, zdim, splits;
};

/// Setup of a block (tables, query rotation, pipeline fill, merge) in units of one tile step, for the
/// split-count model below: the batch-1 times of the fp16 kernel (d128, 4K to 128K tokens, one
/// wave; H200 run s6-10) fit ~19 us + ~1.2 us per tile step; the ~19 us include the launch and the
/// combine kernel (5.3 us in ncu run s4-2), so a block's own set-up is taken as ~8 tile steps (an
/// estimate, not a measurement).
constexpr int kSetupTiles = 8;

/// Split count for a kernel with `blocks_per_sm` resident blocks and `tile` tokens per block step:
/// the s in 1 .. min(256, eff / (2 kTile)) minimising waves(s) * (tiles per split + kSetupTiles),
/// waves(s) = ceil(base * s / (blocks_per_sm * SMs)) (the first such s). One full wave when the
/// blocks fit (base * s <= slots, the rule before session 7), but also more splits over several waves
/// when the last wave of one split per block would leave SMs idle: 48 (sequence, KV head) blocks of
/// d64 9/3 heads at batch 16 filled 96 of 132 SMs with two splits each.
int plan_splits(const DecodeArgs& a, long long base, int blocks_per_sm, int tile) {
  const int eff = a.window > 0 ? std::min(a.window, a.max_seq_len) : a.max_seq_len;
  const long long slots = 1LL * std::max(1, blocks_per_sm) * num_sms();
  const long long max_s = std::min<long long>(std::max(1, (eff + 2 * kTile - 1) / (2 * kTile)), 256);
  long long best = 1, best_cost = -1;
  for (long long s = 1; s <= max_s; ++s) {
    const long long waves = (base * s + slots - 1) / slots;
    if (best_cost >= 0 && waves * kSetupTiles >= best_cost) break;  // a lower bound of every later cost
    const long long tiles = ((eff + s - 1) / s + tile - 1) / tile;
    const long long cost = waves * (tiles + kSetupTiles);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return static_cast<int>(best);
}

Plan make_plan(const DecodeArgs& a, int blocks_per_sm = 2, int tile = kTile) {
  Plan p{};
  p.group = a.num_heads / a.num_kv_heads;
  p.nsub = (p.group + 3) / 4;
  p.hpw = (p.group + p.nsub - 1) / p.nsub;
  p.nsub_block = std::min(p.nsub, kMaxSubPerBlock);
  p.zdim = (p.nsub + kMaxSubPerBlock - 1) / kMaxSubPerBlock;
  if (a.num_splits > 0) {
    p.splits = a.num_splits;
  } else {
    p.splits = plan_splits(a, 1LL * a.batch * a.num_kv_heads * p.zdim, blocks_per_sm, tile);
  }
  return p;
}

void validate(const char* where, const DecodeArgs& a, bool pointers = true) {
  check_arg(a.batch >= 1, where, "batch", a.batch, "must be >= 1");
  check_arg(a.num_kv_heads >= 1, where, "num_kv_heads", a.num_kv_heads, "must be >= 1");
  check_arg(a.num_heads >= a.num_kv_heads && a.num_heads % a.num_kv_heads == 0, where, "num_heads", a.num_heads,
            "must be a positive multiple of num_kv_heads");
  check_arg(gpu_head_dim(a.head_dim), where, "head_dim", a.head_dim, "must be a multiple of 16 in 64..256");
  check_arg(a.max_seq_len >= 1, where, "max_seq_len", a.max_seq_len, "must be >= 1");
  check_arg(a.softmax_scale > 0 && std::isfinite(a.softmax_scale), where, "softmax_scale", a.softmax_scale,
            "must be positive and finite");
  check_arg(a.window >= 0, where, "window", a.window, "must be >= 0");
  check_arg(a.num_splits >= 0 && a.num_splits <= 1024, where, "num_splits", a.num_splits, "must be in 0..1024");
  check_arg(a.softcap >= 0 && std::isfinite(a.softcap), where, "softcap", a.softcap, "must be >= 0 and finite");
  check_arg(a.io == IoType::kF32 || a.io == IoType::kF16 || a.io == IoType::kBf16, where, "io", static_cast<int>(a.io),
            "must be kF32, kF16 or kBf16");
  check_arg(a.pair_sequences >= -1 && a.pair_sequences <= 1, where, "pair_sequences", a.pair_sequences,
            "must be -1 (automatic), 0 or 1");
  check_arg(a.block_warps == 0 || a.block_warps == 8 || a.block_warps == 12, where, "block_warps", a.block_warps,
            "must be 0 (chosen), 8 or 12");
  check_arg(!pointers || (a.q && a.out && a.seq_lens && a.workspace), where, "q/out/seq_lens/workspace", 0,
            "must be non-null device pointers");
}

/// Whether tq_mse_decode's kernel 0 may pair sequences for these arguments (DecodeArgs::pair_sequences),
/// before what only the codecs and the page table tell (widths 2..4, page_size 16) and the size rule.
bool pairs_possible(const DecodeArgs& a) {
  return a.pair_sequences != 0 && (a.head_dim == 64 || a.head_dim == 128) && a.batch >= 2 &&
         a.num_heads <= 4 * a.num_kv_heads;
}

/// DecodeArgs::pair_sequences -1: whether pairs run by default where they apply (kb, vb: key / value bits).
/// head_dim 64: batch >= 8 and batch * max_seq_len >= 2^19 (H200 run s28-4: below that one sequence per
/// block was faster). head_dim 128 (the head_dim-256 step, 12 warps): the same size rule and 3-bit keys and
/// values (run s34-1, b8 / b16 / b64 x 32k-128k: 1.00-1.21x the one-sequence kernel), or 2-bit keys and
/// values at batch * max_seq_len >= 2^21 (0.96-0.99x at b16 x 32k / 64k, 1.03-1.14x from 2^21 on);
/// 4-bit pairs lost (0.82-0.97x in s34-1; 0.88-0.98x with the block skews, run s34-2) and mixed widths were not
/// measured: one sequence per block. head_dim 128 pairs only where the device has at least
/// kPairMinDramBytesPerSmCycle DRAM bytes per SM cycle (an H200, not an H100: run s36-1, cuda.h).
bool pairs_by_default(const DecodeArgs& a, int kb, int vb) {
  const long long tokens = 1LL * a.batch * a.max_seq_len;
  if (a.batch < 8 || tokens < (1LL << 19)) return false;
  if (a.head_dim == 64) return true;
  if (dram_bytes_per_sm_cycle() < kPairMinDramBytesPerSmCycle) return false;
  return (kb == 3 && vb == 3) || (kb == 2 && vb == 2 && tokens >= (1LL << 21));
}

std::size_t smem_bytes(int d, int cbK, int cbV, int hpw, int nsub_block, int stages) {
  auto r16 = [](std::size_t x) { return (x + 15) / 16 * 16; };
  const std::size_t stage = r16(std::size_t(kTile) * cbK) + r16(std::size_t(kTile) * cbV) + 2 * kTile * 4;
  const std::size_t scratch = std::size_t(nsub_block) * 4 * hpw * (d + 2) * sizeof(float);
  return 128 + (stages * kMaxTilePages * 4 + 15) / 16 * 16 + stages * stage + scratch;
}

/// The kernel arguments every split-K decode path sets the same way once its plan is known: the
/// soft-cap, shapes, split count, window, the workspace carve-up ([batch * num_heads][splits][head_dim]
/// partial outputs, then [..][splits][2] (max, sum), then the fp32 query copy) and the query.
/// nsub: the kernel's sub-group count (CUDA-core kernel: sub-groups of 4 heads; tensor-core kernels:
/// blocks of 8 heads along grid z).
void fill_kernel_args(const DecodeArgs& args, const Plan& p, int nsub, DecodeKernelArgs& ka, cudaStream_t s) {
  set_softcap(args, ka);
  ka.seq_lens = args.seq_lens;
  ka.head_dim = args.head_dim;
  ka.num_heads = args.num_heads;
  ka.num_kv_heads = args.num_kv_heads;
  ka.batch = args.batch;
  ka.group = p.group;
  ka.nsub = nsub;
  ka.num_splits = p.splits;
  ka.window = args.window;
  float* ws = static_cast<float*>(args.workspace);
  const std::size_t bh = std::size_t(args.batch) * args.num_heads;
  ka.ws_acc = ws;
  ka.ws_ml = ws + bh * p.splits * args.head_dim;
  ka.q = query_f32(args, ka.ws_ml + bh * p.splits * 2, s);
}

/// The staged decodes' query preparation (StagedCall), after fill_kernel_args: q' = Pi_k q into the
/// workspace's query slot (ksigns or, for dense rotations, krot_t set), or the look-up tables of
/// look-up-table keys (prep set).
void prepare_staged_query(const DecodeArgs& args, int splits, const StagedCall& call, DecodeKernelArgs& ka,
                          cudaStream_t s) {
  const std::size_t rows = std::size_t(args.batch) * args.num_heads;
  if (call.ksigns || call.krot_t) {
    float* ws_q = ka.ws_ml + rows * splits * 2;  // fill_kernel_args' query slot
    const std::size_t smem = (call.krot_t ? 2 : 1) * sizeof(float) * args.head_dim;
    rotate_query_kernel<<<static_cast<unsigned>(rows), 128, smem, s>>>(ka.q, ws_q, args.head_dim, call.ksigns,
                                                                       call.kscale, call.krot_t);
    TKV_CHECK_LAUNCH();
    ka.q = ws_q;
  }
  if (call.prep) {
    // Look-up-table keys: the tables right after this call's carve-up (partials, then the query slot),
    // rounded up to 16 bytes. That end is at most decode_workspace_bytes(args) (an upper bound over
    // every split count), so the tables fit in the workspace sized by staged_lut_offset + tables.
    // (Computing staged_lut_offset here cost ~250 us of host time per call: decode_workspace_bytes
    // walks the split model for every occupancy.)
    const std::size_t end = reinterpret_cast<std::uintptr_t>(ka.ws_ml + rows * splits * 2 + rows * args.head_dim);
    float* lut = reinterpret_cast<float*>((end + 15) / 16 * 16);
    call.prep(call, ka.q, args.batch * args.num_heads, lut, s);
    ka.kside.tab1 = lut;
  }
}

/// The fp16 tensor-core staged decode (staged_tc_kernel): the plan of the tensor-core kernels (grid z =
/// ceil(group / 8), 128 threads, 64-token steps), the query preparation, the split kernel and the merge.
void run_staged_tc(const char* where, const DecodeArgs& args, DecodeKernelArgs& ka, const StagedCall& call,
                   cudaStream_t s) {
  validate(where, args);
  Plan p = make_plan(args);
  if (args.num_splits == 0) {
    int occ = 0, tile = kTcStep;
    LaunchShape query{dim3(1), dim3(32 * kTcWarps), 1, &occ, &tile};
    call.launch_tc(query, s, ka);
    p = make_plan(args, occ, tile);
  }
  fill_kernel_args(args, p, p.zdim, ka, s);
  prepare_staged_query(args, p.splits, call, ka, s);
  const LaunchShape shape{dim3(p.splits, args.batch * args.num_kv_heads, p.zdim), dim3(32 * kTcWarps), 1};
  call.launch_tc(shape, s, ka);
  launch_combine(args, ka, p.splits, call.vsigns, call.vscale, s);
}

/// qrot (the staged decodes): the query preparation q' = Pi_k q of StagedCall, written to
/// the workspace's query slot before the split kernel (nullptr or ksigns nullptr: none).
template <class Launch>
void run(const char* where, const DecodeArgs& args, int cbK, int cbV, int stages, DecodeKernelArgs& ka,
         const float* vsigns, float vscale, cudaStream_t s, Launch&& launch, const StagedCall* qrot = nullptr) {
  validate(where, args);
  Plan p = make_plan(args);
  const std::size_t smem = smem_bytes(args.head_dim, cbK, cbV, p.hpw, p.nsub_block, stages);
  if (args.num_splits == 0) {  // size the splits for this instance's occupancy (plan_splits)
    int occ = 0;
    LaunchShape query{dim3(1), dim3(kSubThreads * p.nsub_block), p.nsub_block, &occ};
    launch(p.hpw, query, smem, ka);
    p = make_plan(args, occ);
  }
  fill_kernel_args(args, p, p.nsub, ka, s);
  if (qrot) prepare_staged_query(args, p.splits, *qrot, ka, s);
  // Lanes per token: head_dim / 16 rounded up to a power of two (decode.cuh).
  ka.tpt_shift = 0;
  while ((1 << ka.tpt_shift) < args.head_dim / 16) ++ka.tpt_shift;
  LaunchShape shape{dim3(p.splits, args.batch * args.num_kv_heads, p.zdim), dim3(kSubThreads * p.nsub_block),
                    p.nsub_block};
  launch(p.hpw, shape, smem, ka);
  launch_combine(args, ka, p.splits, vsigns, vscale, s);
}

void launch_mma_any(int kb, int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (kb) {
    case 1: return launch_mma_k1(d, vb, shape, s, a);
    case 2: return launch_mma_k2(d, vb, shape, s, a);
    case 3: return launch_mma_k3(d, vb, shape, s, a);
    case 4: return launch_mma_k4(d, vb, shape, s, a);
  }
}

void launch_h16_any(int kb, int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (kb) {
    case 1: return launch_h16_k1(d, vb, shape, s, a);
    case 2: return launch_h16_k2(d, vb, shape, s, a);
    case 3: return launch_h16_k3(d, vb, shape, s, a);
    case 4: return launch_h16_k4(d, vb, shape, s, a);
  }
}

/// Fractional widths: kb = b + 1 (the outlier part), vb = b.
void launch_h16s_any(int /*kb*/, int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  launch_h16s(d, vb, shape, s, a);
}

void launch_h16p_any(int kmb, int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  switch (kmb) {
    case 0: return launch_h16p_k0(d, vb, shape, s, a);
    case 1: return launch_h16p_k1(d, vb, shape, s, a);
    case 2: return launch_h16p_k2(d, vb, shape, s, a);
    case 3: return launch_h16p_k3(d, vb, shape, s, a);
  }
}

using LaunchAny = void (*)(int, int, int, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);

/// Tensor-core paths (fp16 or 3xTF32): up to 8 query heads per block (grid z = ceil(group / 8)).
/// fuse: the kernel (decode_h16.cuh) can finish the rows itself when there is one split
/// (DecodeKernelArgs::fuse_out): no combine kernel then. pair: launch_any is launch_h16_pair (two
/// sequences per block): the plan and grid count ceil(batch / 2) sequence pairs.
void run_mma(const char* where, const DecodeArgs& args, int kb, int vb, DecodeKernelArgs& ka, const float* vsigns,
             float vscale, cudaStream_t s, LaunchAny launch_any, bool fuse, bool pair = false) {
  validate(where, args);
  check_arg(pow2_head_dim(args.head_dim) ||
                ((launch_any == launch_h16_any || launch_any == launch_fp8_h16 || launch_any == launch_h16p_any ||
                  launch_any == launch_qjl_h16 || launch_any == launch_rvq_h16) &&
                 h16_dense_head_dim(args.head_dim)),
            where,
            "head_dim", args.head_dim,
            "must be 64, 128 or 256 for the tensor-core kernels, or 80, 96, 112 for the fp16 one with TurboQuant-MSE, "
            "-Prod, QJL, fp8 or RVQ (2 + 2, 3 + 3, 4 + 4 bits) keys at integer widths (other multiples of 16 run the "
            "CUDA-core kernel)");
  DecodeArgs blocks = args;  // the plan's (sequence, KV head) blocks: pairs of sequences when pair
  if (pair) blocks.batch = (args.batch + 1) / 2;
  Plan p = make_plan(blocks);  // zdim = ceil(group / 8) here as well
  // head_dim 256: 12 warps per block instead of 8 (DecodeArgs::block_warps), by default where the blocks read
  // many tokens (the window's, as plan_splits counts them) for TurboQuant-MSE / -Prod keys and 2 + 2-bit RVQ;
  // fp8 and KIVI keep 8 unless asked (H200 run s30-4, b16 / b64 x 32k / 128k: fp8 0.99-1.00x, KIVI 0.96-1.19x,
  // losing at b16 x 32k; RVQ 1.02-1.10x)
  const long long rows = 1LL * blocks.batch * args.num_kv_heads;
  const long long eff = args.window > 0 ? std::min(args.window, args.max_seq_len) : args.max_seq_len;
  const bool rule = launch_any != launch_fp8_h16 && launch_any != launch_kivi_h16;
  const bool wide =
      args.block_warps == 12 || (args.block_warps == 0 && rule && rows >= 16 && rows * eff >= (1LL << 19));
  if (args.num_splits == 0) {
    int occ = 0, tile = kTile;
    LaunchShape query{dim3(1), dim3(128), 1, &occ, &tile, wide};
    launch_any(kb, args.head_dim, vb, query, s, ka);
    p = make_plan(blocks, occ, tile);
  }
  fill_kernel_args(args, p, p.zdim, ka, s);
  const LaunchShape shape{dim3(p.splits, blocks.batch * args.num_kv_heads, p.zdim), dim3(128), 1, nullptr, nullptr,
                          wide};
  // One split: the decode kernel's FUSE instance finishes the rows (H200 run s8-2, b16 x 64k d128,
  // two passes: 4-bit 298.3 -> 295.5 us, 2-bit 252.1 -> 250.5, 3-bit unchanged; docs/CUDA_NOTES.md).
  ka.fuse_out = fuse && p.splits == 1 ? 1 : 0;
#ifdef TURBOKV_H16_TRACE
  ka.trace = h16_trace_buf;
#endif
  ka.out = args.out;
  ka.io = args.io == IoType::kF32 ? 0 : args.io == IoType::kF16 ? 1 : 2;
  ka.vsigns = vsigns;
  ka.vscale = vscale;
  launch_any(kb, args.head_dim, vb, shape, s, ka);
  if (!ka.fuse_out) launch_combine(args, ka, p.splits, vsigns, vscale, s);
}

}  // namespace
}  // namespace detail

std::size_t decode_workspace_bytes(const DecodeArgs& args) {
  detail::validate("cuda::decode_workspace_bytes", args, false);
  // Upper bound over every instance's occupancy (1..64 blocks per SM) and block step (64, 128, 192 or 256
  // tokens): the split count of the cost model is not monotone in either.
  detail::Plan p = detail::make_plan(args, 1);
  // head_dim 64 / 128: tq_mse_decode's kernel 0 may plan ceil(batch / 2) blocks of sequence pairs (where
  // pair_sequences allows it and a KV head has at most 4 query heads; bits and page size are not known
  // here, so those calls get room for both plans)
  DecodeArgs pairs = args;
  pairs.batch = (args.batch + 1) / 2;
  const bool may_pair = detail::pairs_possible(args);
  if (args.num_splits == 0)
    for (int occ = 1; occ <= 64; ++occ)
      for (int tile : {detail::kTile, 128, 192, 256}) {
        p.splits = std::max(p.splits, detail::make_plan(args, occ, tile).splits);
        if (may_pair) p.splits = std::max(p.splits, detail::make_plan(pairs, occ, tile).splits);
      }
  return std::size_t(args.batch) * args.num_heads * (p.splits * (args.head_dim + 2) + args.head_dim) * sizeof(float);
}

namespace {
/// The checks and kernel arguments shared by the paged decodes: page table, pools (their page
/// strides must equal kstride / vstride, the layouts' values) and the pool pointers.
detail::DecodeKernelArgs paged_args(const char* where, PagedPool kpool, PagedPool vpool, const PageTable& table,
                                    const DecodeArgs& args, std::size_t kstride, const char* kstride_rule,
                                    std::size_t vstride,
                                    const char* vstride_rule = "must equal vcodec.page_stride(page_size) "
                                                               "(tq_page_stride(page_size, value code_bytes) for "
                                                               "integer widths)") {
  detail::check_page_size(where, table.page_size);
  check_arg(table.max_pages >= (args.max_seq_len + table.page_size - 1) / table.page_size, where, "max_pages",
            table.max_pages, "must cover max_seq_len");
  check_arg(kpool.page_stride == kstride, where, "kpool.page_stride", kpool.page_stride, kstride_rule);
  check_arg(vpool.page_stride == vstride, where, "vpool.page_stride", vpool.page_stride, vstride_rule);
  // The kernels form page offsets as 32 x 32 -> 64-bit products of a page id and the bytes between pages.
  const std::size_t between = std::max(kstride, vstride) * static_cast<std::size_t>(args.num_kv_heads);
  check_arg(between <= 0xffffffffu, where, "page_stride * num_kv_heads", between, "must be below 4 GiB");
  check_arg(table.pages && kpool.data && vpool.data, where, "pages/kpool/vpool", 0, "must be non-null");
  // Pages are copied by 16-byte cp.async and bulk copies (TMA): 16-byte aligned sources (page strides are
  // multiples of 16 by the checks above: the layouts' strides).
  for (const auto& [name, pool] : {std::pair{"kpool.data", kpool.data}, std::pair{"vpool.data", vpool.data}})
    check_arg(reinterpret_cast<std::uintptr_t>(pool) % 16 == 0, where, name, reinterpret_cast<std::uintptr_t>(pool),
              "must be 16-byte aligned");
  detail::DecodeKernelArgs ka{};
  ka.kpool = kpool.data;
  ka.vpool = vpool.data;
  ka.kstride = kpool.page_stride;
  ka.vstride = vpool.page_stride;
  ka.pages = table.pages;
  ka.max_pages = table.max_pages;
  ka.page_shift = __builtin_ctz(static_cast<unsigned>(table.page_size));
  return ka;
}
}  // namespace

void tq_mse_decode(const TqMseTables& kc, const TqMseTables& vc, PagedPool kpool, PagedPool vpool,
                   const PageTable& table, const DecodeArgs& args, Stream stream) {
  const char* where = "cuda::tq_mse_decode";
  check_arg(kc.head_dim() == args.head_dim && vc.head_dim() == args.head_dim, where, "codec head_dim",
            kc.head_dim(), "must equal args.head_dim for keys and values");
  detail::check_page_size(where, table.page_size);
  detail::DecodeKernelArgs ka =
      paged_args(where, kpool, vpool, table, args, kc.page_stride(table.page_size),
                 "must equal kcodec.page_stride(page_size) (tq_page_stride(page_size, key code_bytes) for integer widths)",
                 vc.page_stride(table.page_size));
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E * kc.hadamard_scale());
  ka.ksigns = kc.signs();
  ka.kcent = kc.centroids();
  ka.vcent = vc.centroids();
  ka.vtab_shared = (&kc.codebook() == &vc.codebook()) ? 1 : 0;
  const cudaStream_t s = detail::stream_of(stream);
  const int kb = kc.bits(), vb = vc.bits();
  check_arg(args.kernel >= 0 && args.kernel <= 2, where, "kernel", args.kernel,
            "must be 0 (fp16 tensor cores), 1 (CUDA cores) or 2 (3xTF32 tensor cores)");
  int kernel = args.kernel;
  const bool dense = kc.dense() || vc.dense();
  if (dense) {
    // head_dim not a power of two (dense rotations): kernel 0 is the fp16 tensor-core kernel at 80,
    // 96, 112 and the CUDA-core kernel at the other sizes; no 3xTF32 kernel.
    check_arg(args.kernel != 2, where, "kernel", args.kernel,
              "must be 0 or 1 at a head_dim that is not a power of two (the 3xTF32 kernel takes 64, 128, 256)");
    if (!detail::h16_dense_head_dim(args.head_dim)) kernel = 1;
    ka.ksigns = nullptr;
    ka.krot_t = kc.rotation_t();
    ka.vrot = vc.rotation();
  }
  if (kc.split() || vc.split()) {
    // Fractional widths: the fp16 tensor-core kernel's SPLIT instances. Both parts' pair tables are
    // shared by keys and values (part 0: the table's key slot, part 1: its value slot).
    check_arg(kc.split() && vc.split() && kb == vb, where, "key/value bits",
              turbokv::detail::concat(kc.nominal_bits(), "/", vc.nominal_bits()),
              "fractional widths need keys and values at the same fractional width on the GPU");
    check_arg(&kc.codebook() == &vc.codebook() && kc.codebook_lo() == vc.codebook_lo(), where, "codebook", 0,
              "fractional widths need keys and values with the same codebook kind on the GPU");
    check_arg(args.kernel == 0, where, "kernel", args.kernel,
              "must be 0 (the fp16 tensor-core kernel) for fractional widths");
    ka.vcent = kc.centroids_lo();
    ka.vtab_shared = 0;
    ka.kchan = kc.channels();
    ka.vchan = vc.channels();
    detail::run_mma(where, args, kb + 1, kb, ka, vc.signs(), vc.hadamard_scale(), s, detail::launch_h16s_any, true);
    return;
  }
  if (kernel != 1) {
    // fuse: the one-split epilogue rotates back by Hadamard butterflies; dense Pi^T is the combine
    // kernel's. pair: two sequences per block (DecodeArgs::pair_sequences).
    const bool pair = kernel == 0 && detail::pairs_possible(args) && table.page_size == 16 && kb >= 2 && vb >= 2 &&
                      (args.pair_sequences == 1 || detail::pairs_by_default(args, kb, vb));
    detail::run_mma(where, args, kb, vb, ka, vc.signs(), vc.hadamard_scale(), s,
                    pair ? detail::launch_h16_pair : kernel == 0 ? detail::launch_h16_any : detail::launch_mma_any,
                    kernel == 0 && !dense, pair);
    return;
  }
  auto launch = [&](int hpw, const detail::LaunchShape& shape, std::size_t smem, const detail::DecodeKernelArgs& a) {
    switch (kb) {
      case 1: return detail::launch_tq_decode_k1(vb, hpw, shape, smem, s, a);
      case 2: return detail::launch_tq_decode_k2(vb, hpw, shape, smem, s, a);
      case 3: return detail::launch_tq_decode_k3(vb, hpw, shape, smem, s, a);
      case 4: return detail::launch_tq_decode_k4(vb, hpw, shape, smem, s, a);
    }
  };
  detail::run(where, args, static_cast<int>(kc.code_bytes()), static_cast<int>(vc.code_bytes()),
              detail::TqFmt<4>::kStages, ka, vc.signs(),
              vc.hadamard_scale(), s, launch);
}

std::size_t tq_prod_page_stride(int page_size, std::size_t code_bytes) {
  return (static_cast<std::size_t>(page_size) * (code_bytes + 4) + 31) / 32 * 32;  // 32-byte sector aligned
}

namespace {
/// tq_prod_paged_decode and qjl_paged_decode: sketch keys (kc: tq-prod or qjl, m = head_dim) with
/// TurboQuant-MSE values on the fp16 tensor-core kernel's PROD instances (decode_h16.cuh; qjl: H16Layout::QJL,
/// no key rotation, one fp16 norm per token).
void sketch_paged_decode(const char* where, Method method, const QjlTables& kc, const TqMseTables& vc,
                         PagedPool kpool, PagedPool vpool, const PageTable& table, const DecodeArgs& args,
                         Stream stream) {
  const bool qjl = method == Method::kQjl;
  check_arg(kc.method() == method, where, "kcodec.method", method_name(kc.method()), qjl ? "must be qjl" : "must be tq-prod");
  check_arg(args.head_dim >= 64 && args.head_dim <= 256 && args.head_dim % 16 == 0, where, "head_dim", args.head_dim,
            "must be a multiple of 16 in 64..256 for sketch keys on the GPU decode");
  check_arg(kc.head_dim() == args.head_dim && vc.head_dim() == args.head_dim, where, "codec head_dim", kc.head_dim(),
            "must equal args.head_dim for keys and values");
  check_arg(kc.rows() == kc.head_dim(), where, "kcodec.rows", kc.rows(), "must equal head_dim (qjl_rows = 0)");
  check_arg(args.kernel == 0 || args.kernel == 1, where, "kernel", args.kernel,
            "must be 0 (fp16 tensor cores at head_dim 64, 80, 96, 112, 128, 256; the CUDA-core kernel elsewhere) or "
            "1 (CUDA cores)");
  check_arg(!vc.split(), where, "vcodec.bits", vc.nominal_bits(), "must be an integer width (1..4) here");
  detail::check_page_size(where, table.page_size);
  detail::DecodeKernelArgs ka =
      paged_args(where, kpool, vpool, table, args, kc.page_stride(table.page_size),
                 qjl ? "must equal kcodec.page_stride(page_size) (tq_page_stride(page_size, key code_bytes))"
                     : "must equal tq_prod_page_stride(page_size, key code_bytes)",
                 tq_page_stride(table.page_size, vc.code_bytes()));
  // Prod: Pi q by the unnormalised FWHT (the Hadamard scale in qscale); qjl: S q from q itself.
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E * (qjl ? 1.0 : kc.hadamard_scale()));
  ka.ksigns = qjl ? nullptr : kc.signs();
  ka.kcent = qjl ? nullptr : kc.centroids();
  ka.vcent = vc.centroids();
  ka.vtab_shared = 0;
  ka.sketch = kc.sketch_t();
  ka.kappa = static_cast<float>(kc.kappa());
  const cudaStream_t s = detail::stream_of(stream);
  // Dense rotations (head_dim not a power of two): Pi q by the keys' Pi^T in the set-up (Prod; QJL keys
  // are not rotated), Pi_v^T by the combine kernel.
  if (kc.dense()) {
    ka.ksigns = nullptr;
    ka.krot_t = kc.rotation_t();
  }
  ka.vrot = vc.rotation();
  if (args.kernel == 0 && (detail::pow2_head_dim(args.head_dim) || detail::h16_dense_head_dim(args.head_dim))) {
    // The fp16 tensor-core kernel: at 64, 128, 256 its one-split FUSE instance finishes the rows itself; 80,
    // 96, 112 have none (the combine kernel applies the dense Pi_v^T).
    detail::run_mma(where, args, kc.mse_bits(), vc.bits(), ka, vc.signs(), vc.hadamard_scale(), s,
                    qjl ? detail::launch_qjl_h16 : detail::launch_h16p_any, detail::pow2_head_dim(args.head_dim));
    return;
  }
  // The CUDA-core kernel (decode.cuh, SketchKeyFmt): fp32, any multiple of 16 in 64..256.
  const int kmb = kc.mse_bits(), vb = vc.bits();
  auto launch = [&](int hpw, const detail::LaunchShape& shape, std::size_t smem, const detail::DecodeKernelArgs& a) {
    if (qjl) return detail::launch_qjl_decode(vb, hpw, shape, smem, s, a);
    if (kmb < 2) return detail::launch_prod_decode_k01(kmb, vb, hpw, shape, smem, s, a);
    detail::launch_prod_decode_k23(kmb, vb, hpw, shape, smem, s, a);
  };
  detail::run(where, args, static_cast<int>(kc.code_bytes()), static_cast<int>(vc.code_bytes()),
              detail::TqFmt<4>::kStages, ka, vc.signs(), vc.hadamard_scale(), s, launch);
}
}  // namespace

void tq_prod_paged_decode(const QjlTables& kc, const TqMseTables& vc, PagedPool kpool, PagedPool vpool,
                          const PageTable& table, const DecodeArgs& args, Stream stream) {
  sketch_paged_decode("cuda::tq_prod_paged_decode", Method::kTurboProd, kc, vc, kpool, vpool, table, args, stream);
}

void qjl_paged_decode(const QjlTables& kc, const TqMseTables& vc, PagedPool kpool, PagedPool vpool,
                      const PageTable& table, const DecodeArgs& args, Stream stream) {
  sketch_paged_decode("cuda::qjl_paged_decode", Method::kQjl, kc, vc, kpool, vpool, table, args, stream);
}

void fp8_decode(PagedPool kpool, PagedPool vpool, const PageTable& table, const DecodeArgs& args, Stream stream) {
  const char* where = "cuda::fp8_decode";
  detail::check_page_size(where, table.page_size);
  check_arg(args.kernel == 0 || args.kernel == 1, where, "kernel", args.kernel,
            "must be 0 (fp16 tensor cores at head_dim 64, 128, 256) or 1 (CUDA cores)");
  const std::size_t stride = tq_page_stride(table.page_size, static_cast<std::size_t>(args.head_dim));
  detail::DecodeKernelArgs ka = paged_args(where, kpool, vpool, table, args, stride,
                                           "must equal tq_page_stride(page_size, head_dim)", stride,
                                           "must equal tq_page_stride(page_size, head_dim)");
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E);
  const cudaStream_t s = detail::stream_of(stream);
  if (args.kernel == 0 && (detail::pow2_head_dim(args.head_dim) || detail::h16_dense_head_dim(args.head_dim))) {
    // The fp16 tensor-core kernel (decode_h16.cuh, KB = VB = 8): no rotation (vsigns nullptr); with one
    // split it writes the output itself at 64, 128, 256 (80, 96, 112 have no FUSE instance: combine).
    detail::run_mma(where, args, 8, 8, ka, nullptr, 1.0f, s, detail::launch_fp8_h16,
                    detail::pow2_head_dim(args.head_dim));
    return;
  }
  auto launch = [&](int hpw, const detail::LaunchShape& shape, std::size_t smem, const detail::DecodeKernelArgs& a) {
    detail::launch_fp8_decode(hpw, shape, smem, s, a);
  };
  detail::run(where, args, args.head_dim, args.head_dim, detail::F8Fmt::kStages, ka, nullptr, 1.0f, s, launch);
}

namespace detail {

/// The set-up shared by the VQ tables' paged decodes on the fp16 kernel (RVQ, product VQ): both tables'
/// head_dim against args, the pools' page strides (the tables' page_stride), the key rotation's signs and
/// query scale, and whether keys and values share one table object (one set of tables in the kernel).
template <class Tables>
DecodeKernelArgs vq_h16_args(const char* where, const Tables& kt, const Tables& vt, PagedPool kpool, PagedPool vpool,
                             const PageTable& table, const DecodeArgs& args) {
  check_arg(kt.head_dim() == args.head_dim && vt.head_dim() == args.head_dim, where, "tables head_dim", kt.head_dim(),
            "must equal args.head_dim for keys and values");
  DecodeKernelArgs ka = paged_args(where, kpool, vpool, table, args, kt.page_stride(table.page_size),
                                   "must equal ktab.page_stride(page_size)", vt.page_stride(table.page_size),
                                   "must equal vtab.page_stride(page_size)");
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E * kt.hadamard_scale());
  ka.ksigns = kt.signs();
  ka.vtab_shared = &kt == &vt ? 1 : 0;
  return ka;
}

/// rvq_paged_decode's kernel 0 with 2, 3 or 4 bits per stage on both sides (rvq.cu checks where it
/// applies): the TurboQuant fp16 tensor-core kernel, as tq_mse_decode with the RVQ tables' rotation,
/// norms and page strides (dense rotations at head_dim 80 / 96 / 112 as tq_mse_decode's). 2 + 2 bits (head_dim
/// 64, 80, 96, 112, 128, 256): pair tables of c1 + c2 sums rounded to fp16 (H16Layout::RVQ); 3 + 3 and 4 + 4
/// (head_dim 64, 80, 96, 112, 128): one set of pair tables per stage, both stages accumulated in the
/// same fragments (H16Layout::RVQ2).
void rvq_paged_decode_h16(const RvqTables& kt, const RvqTables& vt, PagedPool kpool, PagedPool vpool,
                          const PageTable& table, const DecodeArgs& args, Stream stream) {
  const char* where = "cuda::rvq_paged_decode";
  DecodeKernelArgs ka = vq_h16_args(where, kt, vt, kpool, vpool, table, args);
  const bool two = kt.bits() != 2;
  ka.kcent = two ? kt.centroids1() : kt.sum_centroids();
  ka.vcent = two ? vt.centroids1() : vt.sum_centroids();
  ka.kcent2 = two ? kt.centroids2() : nullptr;
  ka.vcent2 = two ? vt.centroids2() : nullptr;
  // head_dim 80, 96, 112: Pi q by the keys' Pi^T in the set-up, Pi_v^T by the combine kernel.
  ka.krot_t = kt.rotation_t();
  ka.vrot = vt.rotation();
  run_mma(where, args, kt.bits(), vt.bits(), ka, vt.signs(), vt.hadamard_scale(), stream_of(stream), launch_rvq_h16,
          !kt.dense());
}

/// pvq_paged_decode's kernel 0 at 1..4 bits (keys and values alike), head_dim 64 / 128, and 3 bits at 256
/// (pvq.cu checks where it applies): the fp16
/// tensor-core kernel with per-sub-vector centroid tables (H16Layout::PVQ): q' = Pi_k (lambda_k q) in the
/// set-up, the codes' centroids looked up straight into the mma fragments, the plan and merge of
/// tq_mse_decode; the combine kernel rotates back and applies lambda_v (no fused epilogue).
void pvq_paged_decode_h16(const PvqTables& kt, const PvqTables& vt, PagedPool kpool, PagedPool vpool,
                          const PageTable& table, const DecodeArgs& args, Stream stream) {
  const char* where = "cuda::pvq_paged_decode";
  DecodeKernelArgs ka = vq_h16_args(where, kt, vt, kpool, vpool, table, args);
  ka.klambda = kt.lambda();
  ka.kcent = kt.centroids();
  ka.vcent = vt.centroids();
  ka.vlambda = vt.lambda();
  run_mma(where, args, kt.bits(), vt.bits(), ka, vt.signs(), vt.hadamard_scale(), stream_of(stream), launch_pvq_h16,
          false);
}

/// kivi_decode's kernel 0 on the fp16 tensor-core kernel (kivi.cu checks where it applies): unrotated q,
/// the codes dequantized into the mma fragments (H16Layout::KIVI), the plan and merge of tq_mse_decode.
void kivi_paged_decode_h16(const CodecConfig& kcfg, const CodecConfig& vcfg, PagedPool kpool, PagedPool vpool,
                           const PageTable& table, const DecodeArgs& args, std::size_t kstride, std::size_t vstride,
                           Stream stream) {
  const char* where = "cuda::kivi_decode";
  DecodeKernelArgs ka = paged_args(where, kpool, vpool, table, args, kstride,
                                   "must equal kivi_page_stride(kcodec, page_size)", vstride,
                                   "must equal kivi_page_stride(vcodec, page_size)");
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E);
  ka.kside.group = kcfg.group_size;
  ka.vside.group = vcfg.group_size;
  const int b = static_cast<int>(kcfg.bits);
  run_mma(where, args, b, b, ka, nullptr, 1.0f, stream_of(stream), launch_kivi_h16, true);
}

namespace {
/// The raw-row plan of one staged side (StagedSide::chunk, cpt, rs, sw) for blocks of `stride`
/// bytes from `pool`: cp.async pieces of the largest of 16, 8, 4 bytes dividing the code bytes, the
/// stride and the pool's address (the rows and the side words are then aligned to it); else the aligned
/// pieces holding each row: 16 bytes if 16 divides the stride and the address, 4 if 4 does; none (chunk 0: rows
/// read from global memory) otherwise, or for look-up-table keys (no staged rows).
/// TURBOKV_STAGED_RAW=0 in the environment turns raw rows off (for A/B runs and tests of both paths).
void plan_raw(StagedSide& s, const void* pool, std::size_t stride, bool lut) {
  static const bool off = env_off("TURBOKV_STAGED_RAW");
  s.chunk = 0;
  if (off || lut || s.cb <= 0) return;
  const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(pool);
  for (const int c : {16, 8, 4})
    if (s.cb % c == 0 && stride % c == 0 && addr % c == 0) {
      s.chunk = c;
      s.cpt = s.cb / c;
      break;
    }
  // Rows at any byte offset (PolarQuant d128: 23, 31 or 46 code bytes): the aligned pieces holding them. 16 bytes
  // where blocks start 16-byte aligned and span a multiple of 16 bytes (paged pools: page_stride is a multiple
  // of 32), so a row's pieces stay inside its block; else 4-byte words.
  if (s.chunk == 0 && stride % 16 == 0 && addr % 16 == 0) {
    s.chunk = 16;
    s.cpt = (s.cb + 30) / 16;
  } else if (s.chunk == 0 && stride % 4 == 0 && addr % 4 == 0) {
    s.chunk = 4;
    s.cpt = (s.cb + 6) / 4;
  }
  if (s.chunk == 0) return;
  s.sw = s.sb > 0 ? (s.sb + 6) / 4 : 0;                            // words holding sb bytes at any offset
  s.rs = (s.cpt * s.chunk + std::max(4 * s.sw, 8) + 15) / 16 * 16;  // >= 8 readable bytes after the codes
}
/// The kernel of a staged decode whose arguments are set: the fp16 tensor-core one (args.kernel 0,
/// formats with launch_tc), else the CUDA-core one through run (whose staged-tile shared memory size is
/// unused: launch_staged sizes its own).
void run_staged(const char* where, const DecodeArgs& args, DecodeKernelArgs& ka, const StagedCall& call,
                cudaStream_t s) {
  if (args.kernel == 0 && call.launch_tc) return run_staged_tc(where, args, ka, call, s);
  auto launch = [&](int hpw, const LaunchShape& shape, std::size_t smem, const DecodeKernelArgs& k) {
    call.launch(hpw, shape, smem, s, k);
  };
  run(where, args, 16, 16, 1, ka, call.vsigns, call.vscale, s, launch, &call);
}
}  // namespace

void run_staged_paged(const char* where, PagedPool kpool, PagedPool vpool, const PageTable& table,
                      const DecodeArgs& args, std::size_t kstride, const char* kstride_rule, std::size_t vstride,
                      const char* vstride_rule, const StagedCall& call, cudaStream_t s) {
  check_arg(args.kernel == 0 || args.kernel == 1, where, "kernel", args.kernel,
            "must be 0 (fp16 tensor cores) or 1 (CUDA cores, fp32)");
  DecodeKernelArgs ka = paged_args(where, kpool, vpool, table, args, kstride, kstride_rule, vstride, vstride_rule);
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E);
  ka.kside = call.kside;
  ka.vside = call.vside;
  plan_raw(ka.kside, kpool.data, kstride, call.prep != nullptr);
  plan_raw(ka.vside, vpool.data, vstride, false);
  ka.vlambda = call.vlambda;
  ka.vrot = call.vrot;
  ka.head_dim = args.head_dim;  // the launcher sizes shared memory and picks the instance from it (also
                                // for run's occupancy query, made before fill_kernel_args)
  run_staged(where, args, ka, call, s);
}

namespace {
DecodeArgs as_decode_args(const VqDecodeArgs& a, int head_dim) {
  DecodeArgs d;
  d.batch = a.batch, d.num_heads = a.num_heads, d.num_kv_heads = a.num_kv_heads, d.head_dim = head_dim;
  d.q = a.q, d.out = a.out, d.seq_lens = a.seq_lens, d.max_seq_len = a.max_seq_len;
  d.softmax_scale = a.softmax_scale, d.num_splits = a.num_splits, d.workspace = a.workspace;
  d.kernel = a.kernel;
  return d;
}
}  // namespace

void run_staged_blocks(const char* where, const VqDecodeArgs& a, int head_dim, std::size_t kblock,
                       std::size_t vblock, const StagedCall& call, cudaStream_t s) {
  if (splitk::check_decode_args(where, a) == 0) return;  // batch 0
  check_arg(a.kernel == 0 || a.kernel == 1, where, "kernel", a.kernel,
            "must be 0 (fp16 tensor cores) or 1 (CUDA cores, fp32)");
  const DecodeArgs args = as_decode_args(a, head_dim);
  const std::size_t between = std::max(kblock, vblock) * static_cast<std::size_t>(a.num_kv_heads);
  check_arg(between <= 0xffffffffu, where, "block bytes * num_kv_heads", between, "must be below 4 GiB");
  DecodeKernelArgs ka{};
  ka.kpool = a.keys;
  ka.vpool = a.values;
  ka.kstride = kblock;
  ka.vstride = vblock;
  ka.capacity = a.capacity;  // pages = nullptr: contiguous blocks
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E);
  ka.kside = call.kside;
  ka.vside = call.vside;
  plan_raw(ka.kside, a.keys, kblock, call.prep != nullptr);
  plan_raw(ka.vside, a.values, vblock, false);
  ka.vlambda = call.vlambda;
  ka.vrot = call.vrot;
  ka.head_dim = head_dim;
  run_staged(where, args, ka, call, s);
}

std::size_t staged_blocks_workspace(const char* where, const VqDecodeArgs& a, int head_dim, std::size_t lut_floats) {
  splitk::check_workspace_args(where, a);
  if (a.batch == 0) return 0;
  check_arg(a.max_seq_len >= 1, where, "max_seq_len", a.max_seq_len, "must be >= 1");
  const DecodeArgs d = as_decode_args(a, head_dim);
  if (lut_floats == 0) return decode_workspace_bytes(d);
  return staged_lut_offset(d) + sizeof(float) * lut_floats * a.batch * a.num_heads;
}

}  // namespace detail

void fp16_decode(const std::uint16_t* k, const std::uint16_t* v, int capacity, const DecodeArgs& args,
                 Stream stream) {
  const char* where = "cuda::fp16_decode";
  check_arg(capacity >= args.max_seq_len, where, "capacity", capacity, "must be >= max_seq_len");
  check_arg(k && v, where, "k/v", 0, "must be non-null device pointers");
  detail::DecodeKernelArgs ka{};
  ka.kpool = reinterpret_cast<const std::uint8_t*>(k);
  ka.vpool = reinterpret_cast<const std::uint8_t*>(v);
  ka.capacity = capacity;
  ka.qscale = static_cast<float>(args.softmax_scale * M_LOG2E);
  const cudaStream_t s = detail::stream_of(stream);
  auto launch = [&](int hpw, const detail::LaunchShape& shape, std::size_t smem, const detail::DecodeKernelArgs& a) {
    detail::launch_f16_decode(hpw, shape, smem, s, a);
  };
  detail::run(where, args, 2 * args.head_dim, 2 * args.head_dim, detail::F16Fmt::kStages, ka, nullptr, 1.0f, s,
              launch);
}

}  // namespace turbokv::cuda
