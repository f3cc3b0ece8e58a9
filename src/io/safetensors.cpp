// safetensors reader/writer with strict validation.
#include "turbokv/safetensors.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "turbokv/error.h"
#include "turbokv/half.h"

namespace turbokv {
namespace {

std::size_t dtype_size(const std::string& dt) {
  if (dt == "F16" || dt == "BF16") return 2;
  if (dt == "F32") return 4;
  return 0;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("safetensors: " + path + ": " + what);
}

}  // namespace

std::size_t TensorInfo::numel() const {
  std::size_t n = 1;
  for (auto s : shape) n *= static_cast<std::size_t>(s);
  return n;
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open file");
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(f.tellg());
  f.seekg(0);
  if (size < 8) fail(path, "truncated: " + std::to_string(size) + " bytes, need at least 8 for the header length");
  std::uint8_t lenb[8];
  f.read(reinterpret_cast<char*>(lenb), 8);
  std::uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | lenb[i];
  if (hlen > size - 8)
    fail(path, "header length " + std::to_string(hlen) + " runs past the end of the file (" + std::to_string(size) + " bytes)");
  std::string header(static_cast<std::size_t>(hlen), '\0');
  f.read(header.data(), static_cast<std::streamsize>(hlen));
  SafetensorsFile out;
  out.path_ = path;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(path, "header is not a JSON object");
  const std::uint64_t data_size = size - 8 - hlen;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) fail(path, "metadata '" + m.key() + "' is not a string");
        out.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string& name = it.key();
    const auto& t = it.value();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      fail(path, "tensor '" + name + "': entry needs dtype, shape and data_offsets");
    TensorInfo info;
    if (!t["dtype"].is_string()) fail(path, "tensor '" + name + "': dtype is not a string");
    info.dtype = t["dtype"].get<std::string>();
    if (!dtype_size(info.dtype)) fail(path, "tensor '" + name + "': unknown or unsupported dtype '" + info.dtype + "' (F16, BF16, F32)");
    if (!t["shape"].is_array()) fail(path, "tensor '" + name + "': shape is not an array");
    std::uint64_t numel = 1;
    for (const auto& s : t["shape"]) {
      if (!s.is_number_integer() || s.get<std::int64_t>() < 0) fail(path, "tensor '" + name + "': shape has a negative or non-integer entry");
      const auto v = s.get<std::uint64_t>();
      if (v && numel > std::numeric_limits<std::uint64_t>::max() / v) fail(path, "tensor '" + name + "': shape overflows");
      numel *= v;
      info.shape.push_back(static_cast<std::int64_t>(v));
    }
    const auto& off = t["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, "tensor '" + name + "': data_offsets must be two non-negative integers");
    const auto b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    if (b > e || e > data_size)
      fail(path, "tensor '" + name + "': data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                     "] out of range (data section is " + std::to_string(data_size) + " bytes)");
    if (e - b != numel * dtype_size(info.dtype))
      fail(path, "tensor '" + name + "': " + std::to_string(e - b) + " bytes do not match shape and dtype (" +
                     std::to_string(numel * dtype_size(info.dtype)) + " expected)");
    info.begin = static_cast<std::size_t>(b);
    info.end = static_cast<std::size_t>(e);
    out.tensors_[name] = info;
  }
  out.data_.resize(static_cast<std::size_t>(data_size));
  f.read(reinterpret_cast<char*>(out.data_.data()), static_cast<std::streamsize>(data_size));
  if (static_cast<std::uint64_t>(f.gcount()) != data_size) fail(path, "truncated data section");
  return out;
}

const std::string& SafetensorsFile::meta(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) fail(path_, "metadata key '" + key + "' is missing");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : tensors_) n.push_back(k);
  return n;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "tensor '" + name + "' not found");
  return it->second;
}

std::vector<float> SafetensorsFile::load_f32(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const std::size_t n = ti.numel();
  std::vector<float> out(n);
  const std::uint8_t* p = data_.data() + ti.begin;
  for (std::size_t i = 0; i < n; ++i) {
    if (ti.dtype == "F32") {
      std::uint32_t u = 0;
      for (int b = 3; b >= 0; --b) u = (u << 8) | p[4 * i + static_cast<std::size_t>(b)];
      out[i] = bits_f32(u);
    } else {
      const auto h = static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
      out[i] = ti.dtype == "F16" ? half_to_float(h) : bf16_to_float(h);
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json j = nlohmann::json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  std::size_t off = 0;
  for (const auto& t : tensors) {
    std::size_t numel = 1;
    for (auto s : t.shape) numel *= static_cast<std::size_t>(s);
    const std::size_t es = dtype_size(t.dtype);
    check_arg(es != 0, "write_safetensors", "dtype", t.dtype, "must be F16, BF16 or F32");
    check_arg(t.bytes.size() == numel * es, "write_safetensors", "bytes.size()", t.bytes.size(),
              "does not match shape and dtype");
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string header = j.dump();
  while (header.size() % 8) header.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("write_safetensors: cannot open " + path);
  std::uint64_t hlen = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((hlen >> (8 * i)) & 0xff));
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& t : tensors) f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!f) throw std::runtime_error("write_safetensors: write failed for " + path);
}

}  // namespace turbokv
