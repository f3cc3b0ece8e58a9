// turbokv — KIVI-style asymmetric integer groups on the GPU (src/cuda/kivi.cu; kivi_decode's host
// side in src/cuda/decode.cu):
// append straight into pages, byte-identical to the reference codec
// (src/ref/kivi.cpp, formats.h "kivi"), and split-K decode attention on the
// paged codes (the baseline KIVI paper's quantizer, Liu et al., arXiv
// 2402.02750; its full-precision residual window belongs to the cache).
//
// Paged layout: each (page, KV head) block is the reference's encoding of a
// block of page_size tokens (formats.h), so a page of n <= page_size tokens
// holds exactly the bytes the reference writes for those tokens at their slots:
//   keys   [codes: page_size x packed(head_dim, b)][page_size / G groups x head_dim x (min, scale) fp16]
//   values [codes: page_size x packed(head_dim, b)][page_size x head_dim / G x (min, scale) fp16]
// rounded up to 32 bytes (kivi_page_stride). Key groups are G consecutive
// tokens of a channel, so G must divide page_size and an append of keys must
// cover whole groups (start and num_new multiples of G); values are grouped
// over G channels of a token (G divides head_dim) and append token by token.
#pragma once

#include <cstddef>
#include <cstdint>

#include "turbokv/codec.h"
#include "turbokv/cuda.h"

namespace turbokv::cuda {

/// Bytes of one (page, KV head) block of a KIVI codec (cfg: method kivi, its role, bits 1, 2, 3, 4
/// or 8, group_size G, head_dim a multiple of 16 in 64..256): page_size * packed(head_dim, bits) +
/// 4 * (keys: page_size / G * head_dim; values: page_size * head_dim / G), rounded up to 32.
/// Throws std::invalid_argument naming the field (including page_size not a multiple of a key G).
std::size_t kivi_page_stride(const CodecConfig& cfg, int page_size);

/**
 * Encodes num_new tokens of every sequence into pages, byte-identical to the reference codec's
 * encode of each page's tokens (cfg.role picks key or value groups). x: device
 * [batch][num_new][num_kv_heads][head_dim] of type x_type (fp16 / bf16 widened exactly); start:
 * device int32 [batch], each sequence's first new position. Keys: start and num_new must be
 * multiples of G (whole groups; num_new is checked on the host; a group whose start is not a
 * multiple of G is skipped on the device, its page left unchanged) and G * head_dim must be at most
 * 49152 (a group's codes are staged in shared memory; kivi_page_stride and kivi_decode take larger G).
 * Bad input (the reference throws on a NaN or Inf, a norm >= 32768, or a group scale (max - min) /
 * (2^b - 1) above 32768, the last reachable only at 1 bit): with `bad` (optional device int32, nullptr =
 * no check) it sets *bad to 1, as tq_mse_append's flag (never cleared by the call; a flagged call's
 * tokens must not be counted); two check kernels read x before the encode (fp64 norms and scales).
 * Throws std::invalid_argument naming the argument.
 */
void kivi_append(const CodecConfig& cfg, const void* x, int batch, int num_new, int num_kv_heads,
                 const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                 IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/**
 * Split-K decode attention on paged KIVI keys and values: logit_t = softmax_scale * <q, k_hat_t>,
 * k_hat = min16 + scale16 * code (fp32, rounded as the reference's decode), values likewise; per step
 * the block dequantizes keys and values once into shared memory (all query heads of the block's GQA
 * group read them), online softmax, split partials merged by log-sum-exp. args.kernel 0 (default):
 * 64-token steps staged as fp16 (each element min16 + scale16 * code by one fp16 fma, rounded once),
 * scores and value sums by fp16 tensor-core MMAs, fp32 accumulation (the staged elements, the scaled
 * query and the softmax weights rounded to fp16): within 3e-3 relative
 * of the fp64 reference; 1: 32-token steps on CUDA cores, one warp per query head, fp32: within 2e-5
 * (tests/cuda/test_cuda_kivi.cpp). Kernel 0 at head_dim 64 / 128 / 256 with keys and values both at 2,
 * both at 3 or both at 4 bits (3 bits, and 4 bits at 256, since session 19), pages of >= 16 tokens, key groups a multiple of 16 tokens and value
 * groups a multiple of head_dim / 8 channels (or 16 at 256): TurboQuant-MSE's fp16 tensor-core kernel (decode_h16.cuh)
 * instead, codes dequantized straight into the mma fragments (min16 + scale16 * code, one fp16 fma,
 * rounded once as the staged tile), same tolerance; H200 b16 x 65,536, 32/8 heads, d128: about 500 us,
 * 1.85x cuDNN SDPA (docs/RESULTS.md "Session 18"). Shapes, GQA, windows, soft-cap, io types, splits and
 * workspace as tq_mse_decode (decode_workspace_bytes).
 * Throws std::invalid_argument naming the argument.
 */
void kivi_decode(const CodecConfig& kcfg, const CodecConfig& vcfg, PagedPool kpool, PagedPool vpool,
                 const PageTable& table, const DecodeArgs& args, Stream stream);

}  // namespace turbokv::cuda
