// Bit pack / unpack kernels (LSB-first stream of turbokv/pack.h), the fp32 -> fp16
// conversion, the device query and the TurboQuant-MSE tables.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "../ref/tq_mse.h"
#include "common.cuh"
#include "turbokv/codebook.h"
#include "turbokv/error.h"
#include "turbokv/half.h"
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

__global__ void half_kernel(const float* __restrict__ x, std::size_t n, std::uint16_t* __restrict__ out) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = turbokv::float_to_half(x[i]);
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

double dram_bytes_per_sm_cycle() {
  static const double r = [] {
    int dev = 0, mem_khz = 0, bus_bits = 0, sms = 0, sm_khz = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, dev) != cudaSuccess) {
      cudaGetLastError();
      return 0.0;
    }
    if (sms <= 0 || sm_khz <= 0) return 0.0;
    return 2.0 * mem_khz * (bus_bits / 8.0) / (static_cast<double>(sms) * sm_khz);
  }();
  return r;
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

void fp32_to_fp16(const float* x, std::size_t n, std::uint16_t* out, Stream stream) {
  if (n == 0) return;
  check_arg(x != nullptr && out != nullptr, "cuda::fp32_to_fp16", "x/out", 0, "must be device pointers");
  half_kernel<<<grid_for(n, 256), 256, 0, detail::stream_of(stream)>>>(x, n, out);
  TKV_CHECK_LAUNCH();
}

std::size_t tq_page_stride(int page_size, std::size_t code_bytes) {
  detail::check_page_size("cuda::tq_page_stride", page_size);
  const std::size_t b = static_cast<std::size_t>(page_size) * (code_bytes + 2);
  return (b + 31) / 32 * 32;  // every block starts on a 32-byte L2 sector
}

TqMseTables::TqMseTables(const CodecConfig& cfg) {
  check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, "cuda::TqMseTables", "bits", cfg.bits,
            "must be an integer width 1..4 for TqMseTables(CodecConfig); fractional widths need "
            "TqMseTables(const Codec&) with a calibrated reference codec");
  init(cfg);
}

TqMseTables::TqMseTables(const Codec& ref) {
  const char* where = "cuda::TqMseTables";
  const CodecConfig& cfg = ref.config();
  init(cfg);
  if (!split_) return;
  check_arg(ref.calibrated(), where, "ref.calibrated", 0, "a fractional-width codec must be calibrated first");
  // The calibrated split, as the reference's encode gathers it (ref::tq_mse_split_channels).
  const std::size_t d = static_cast<std::size_t>(head_dim_), cb = code_bytes();
  std::vector<int> part[2];
  if (ref.encoded_bytes(d) != d * (cb + 4) || !ref::tq_mse_split_channels(ref, part) || part[0].size() != d / 2)
    throw std::logic_error("cuda::TqMseTables: the reference is not the outlier split of formats.h at head_dim / 2");
  std::vector<std::int32_t> ch(part[0]);
  ch.insert(ch.end(), part[1].begin(), part[1].end());
  channels_ = detail::upload(ch);
}

void TqMseTables::init(const CodecConfig& cfg) {
  const char* where = "cuda::TqMseTables";
  check_arg(cfg.method == Method::kTurboMse, where, "method", method_name(cfg.method), "must be tq-mse");
  const int b = static_cast<int>(std::floor(cfg.bits));
  split_ = cfg.bits != b;
  check_arg(split_ ? (b >= 1 && b <= 3 && cfg.bits == b + 0.5) : (b >= 1 && b <= 4), where, "bits", cfg.bits,
            "must be 1..4 or 1.5, 2.5, 3.5 on the GPU");
  if (split_)
    check_arg(cfg.head_dim == 128 || cfg.head_dim == 256, where, "head_dim", cfg.head_dim,
              "must be 128 or 256 for fractional widths on the GPU (parts of 64 or 128 channels)");
  else
    check_arg(detail::gpu_head_dim(cfg.head_dim), where, "head_dim", cfg.head_dim,
              "must be a multiple of 16 in 64..256 on the GPU");
  check_arg(cfg.rotation == RotationKind::kHadamard, where, "rotation", rotation_name(cfg.rotation),
            "must be hadamard on the GPU");
  check_arg(!cfg.center, where, "center", 1, "centred keys are not supported on the GPU");
  head_dim_ = cfg.head_dim;
  bits_ = b;
  // The same objects the reference codec builds (RotatedScalar of part p: dim, seed cfg.seed + p).
  const int dim = split_ ? head_dim_ / 2 : head_dim_;
  scale_ = Rotation::hadamard_scale(dim);
  auto bounds = [](const ScalarCodebook& c) {
    std::vector<float> bnd(c.boundaries);
    bnd.push_back(INFINITY);  // padding entry, never compared against
    return bnd;
  };
  if (!split_) {
    const Rotation rot(dim, cfg.rotation, cfg.seed);
    codebook_ = &lloyd_max_codebook(dim, bits_, cfg.codebook);
    scale_ = detail::upload_rotation(rot, signs_, rotation_, rotation_t_);  // dense where not a power of two
    dense_ = rotation_ != nullptr;
    centroids_ = detail::upload(codebook_->centroids);
    boundaries_ = detail::upload(bounds(*codebook_));
    return;
  }
  const Rotation r0(dim, cfg.rotation, cfg.seed), r1(dim, cfg.rotation, cfg.seed + 1);
  std::vector<float> sg(r0.signs());
  sg.insert(sg.end(), r1.signs().begin(), r1.signs().end());
  codebook_ = &lloyd_max_codebook(dim, bits_ + 1, cfg.codebook);
  codebook_lo_ = &lloyd_max_codebook(dim, bits_, cfg.codebook);
  signs_ = detail::upload(sg);
  centroids_ = detail::upload(codebook_->centroids);
  boundaries_ = detail::upload(bounds(*codebook_));
  centroids_lo_ = detail::upload(codebook_lo_->centroids);
  boundaries_lo_ = detail::upload(bounds(*codebook_lo_));
}

std::size_t TqMseTables::page_stride(int page_size) const {
  detail::check_page_size("cuda::TqMseTables::page_stride", page_size);
  const std::size_t b = static_cast<std::size_t>(page_size) * (code_bytes() + 2 * num_norms());
  return (b + 31) / 32 * 32;  // every block starts on a 32-byte L2 sector
}

}  // namespace turbokv::cuda
