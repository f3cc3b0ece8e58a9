// turbokv — reading and writing safetensors files (the format of the KV fixtures).
//
// Format (https://github.com/huggingface/safetensors): 8-byte little-endian
// header length N, then N bytes of JSON {name: {dtype, shape, data_offsets:
// [begin, end]}, "__metadata__": {string: string}}, then the data section;
// offsets are relative to the data section. Supported dtypes: F16, BF16, F32.
//
// Every malformed file is rejected with std::runtime_error naming the file
// and, where it applies, the tensor: truncated file, header length past the
// end, invalid JSON, unknown dtype, offsets out of range or overlapping the
// end, and a byte size that does not match the shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace turbokv {

struct TensorInfo {
  std::string dtype;                ///< "F16", "BF16" or "F32"
  std::vector<std::int64_t> shape;  ///< row-major
  std::size_t begin = 0, end = 0;   ///< byte offsets in the data section
  std::size_t numel() const;
};

class SafetensorsFile {
 public:
  /// Reads and validates the whole file. Throws std::runtime_error.
  static SafetensorsFile read(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Metadata value; throws std::runtime_error naming the file and key if absent.
  const std::string& meta(const std::string& key) const;
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  /// Throws std::runtime_error naming the file and tensor if absent.
  const TensorInfo& info(const std::string& name) const;
  /// The tensor converted to fp32, row-major.
  std::vector<float> load_f32(const std::string& name) const;

 private:
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::uint8_t> data_;
};

/// A tensor to write: raw little-endian bytes of `dtype` ("F16", "BF16", "F32").
struct TensorToWrite {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

/// Writes a safetensors file. Throws std::runtime_error on I/O failure and
/// std::invalid_argument if a tensor's byte size does not match its shape.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace turbokv
