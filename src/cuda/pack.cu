// Bit pack / unpack kernels (LSB-first stream of turbokv/pack.h), the device
// query and the TurboQuant-MSE tables.
#include <cmath>
#include <vector>

#include "common.cuh"
#include "turbokv/codebook.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"
#include "turbokv/rotation.h"

namespace turbokv::cuda {
namespace {

// One thread per output byte: byte k holds stream bits [8k, 8k + 8).
__global__ void pack_kernel(const std::uint8_t* __restrict__ codes, std::size_t n, int bits,
                            std::uint8_t* __restrict__ out, std::size_t nbytes) {
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < nbytes;
       k += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t bit0 = 8 * k, i0 = bit0 / bits;
    std::size_t i1 = (bit0 + 8 + bits - 1) / bits;
    if (i1 > n) i1 = n;
    std::uint32_t v = 0;
    for (std::size_t i = i0; i < i1; ++i) {
      const long long off = static_cast<long long>(i * bits) - static_cast<long long>(bit0);
      const std::uint32_t c = codes[i];
      v |= off >= 0 ? (c << off) : (c >> -off);
    }
    out[k] = static_cast<std::uint8_t>(v & 0xffu);
  }
}

__global__ void unpack_kernel(const std::uint8_t* __restrict__ packed, std::size_t n, int bits,
                              std::uint8_t* __restrict__ codes) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    codes[i] = static_cast<std::uint8_t>(get_code(packed, i, bits));
}

unsigned grid_for(std::size_t n, int threads) {
  const std::size_t g = (n + threads - 1) / threads;
  const std::size_t cap = static_cast<std::size_t>(detail::num_sms()) * 32;
  return static_cast<unsigned>(g < 1 ? 1 : (g > cap ? cap : g));
}

}  // namespace

void DeviceFree::operator()(void* p) const noexcept { cudaFree(p); }

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount returned 0 devices";
  return n;
}

void pack_bits(const std::uint8_t* codes, std::size_t n, int bits, std::uint8_t* out, Stream stream) {
  check_arg(bits >= 1 && bits <= 8, "cuda::pack_bits", "bits", bits, "must be in 1..8");
  if (n == 0) return;
  check_arg(codes != nullptr && out != nullptr, "cuda::pack_bits", "codes/out", 0, "must be device pointers");
  const std::size_t nb = packed_bytes(n, bits);
  pack_kernel<<<grid_for(nb, 256), 256, 0, detail::stream_of(stream)>>>(codes, n, bits, out, nb);
  TKV_CHECK_LAUNCH();
}

void unpack_bits(const std::uint8_t* packed, std::size_t n, int bits, std::uint8_t* codes, Stream stream) {
  check_arg(bits >= 1 && bits <= 8, "cuda::unpack_bits", "bits", bits, "must be in 1..8");
  if (n == 0) return;
  check_arg(codes != nullptr && packed != nullptr, "cuda::unpack_bits", "codes/packed", 0,
            "must be device pointers");
  unpack_kernel<<<grid_for(n, 256), 256, 0, detail::stream_of(stream)>>>(packed, n, bits, codes);
  TKV_CHECK_LAUNCH();
}

std::size_t tq_page_stride(int page_size, std::size_t code_bytes) {
  check_arg(page_size >= 1 && page_size <= 4096 && (page_size & (page_size - 1)) == 0, "cuda::tq_page_stride",
            "page_size", page_size, "must be a power of two in 1..4096");
  const std::size_t b = static_cast<std::size_t>(page_size) * (code_bytes + 2);
  return (b + 31) / 32 * 32;  // every block starts on a 32-byte L2 sector
}

TqMseTables::TqMseTables(const CodecConfig& cfg) {
  const char* where = "cuda::TqMseTables";
  check_arg(cfg.method == Method::kTurboMse, where, "method", method_name(cfg.method), "must be tq-mse");
  check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "bits", cfg.bits,
            "must be an integer width 1..4 on the GPU");
  check_arg(cfg.head_dim == 64 || cfg.head_dim == 128 || cfg.head_dim == 256, where, "head_dim", cfg.head_dim,
            "must be 64, 128 or 256 on the GPU");
  check_arg(cfg.rotation == RotationKind::kHadamard, where, "rotation", rotation_name(cfg.rotation),
            "must be hadamard on the GPU");
  head_dim_ = cfg.head_dim;
  bits_ = static_cast<int>(cfg.bits);
  // The same objects the reference codec builds (RotatedScalar, part 0: seed cfg.seed).
  const Rotation rot(head_dim_, cfg.rotation, cfg.seed);
  const ScalarCodebook& cb = lloyd_max_codebook(head_dim_, bits_, cfg.codebook);
  codebook_ = &cb;
  scale_ = Rotation::hadamard_scale(head_dim_);
  std::vector<float> bnd(cb.boundaries);
  bnd.push_back(INFINITY);  // padding entry, never compared against
  signs_ = detail::upload(rot.signs());  // head_dim floats
  centroids_ = detail::upload(cb.centroids);
  boundaries_ = detail::upload(bnd);
}

}  // namespace turbokv::cuda
