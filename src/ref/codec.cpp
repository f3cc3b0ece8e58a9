// Method names and the codec factory (validation happens here, once).
#include <string>

#include "internal.h"
#include "turbokv/error.h"

namespace turbokv {

const char* method_name(Method m) {
  switch (m) {
    case Method::kTurboMse: return "tq-mse";
    case Method::kTurboProd: return "tq-prod";
    case Method::kQjl: return "qjl";
    case Method::kRvq: return "rvq";
    case Method::kPvq: return "pvq";
    case Method::kPolar: return "polar";
    case Method::kKivi: return "kivi";
    case Method::kFp8: return "fp8";
    case Method::kFp16: return "fp16";
  }
  return "?";
}

const std::vector<Method>& all_methods() {
  static const std::vector<Method> all = {Method::kTurboMse, Method::kTurboProd, Method::kQjl,
                                          Method::kRvq,      Method::kPvq,       Method::kPolar,
                                          Method::kKivi,     Method::kFp8,       Method::kFp16};
  return all;
}

Method parse_method(const std::string& name) {
  for (Method m : all_methods())
    if (name == method_name(m)) return m;
  throw std::invalid_argument("parse_method: method = " + name +
                              ": expected one of tq-mse, tq-prod, qjl, rvq, pvq, polar, kivi, fp8, fp16");
}

std::vector<double> supported_bits(Method m) {
  switch (m) {
    case Method::kTurboMse: return {1, 1.5, 2, 2.5, 3, 3.5, 4};
    case Method::kTurboProd: return {1, 2, 3, 4};
    case Method::kQjl: return {1};
    case Method::kRvq: return {1, 2, 3, 4};
    case Method::kPvq: return {1, 2, 3, 4};
    case Method::kPolar: return {2, 3, 4};
    case Method::kKivi: return {1, 2, 3, 4, 8};
    case Method::kFp8: return {8};
    case Method::kFp16: return {16};
  }
  return {};
}

std::unique_ptr<Codec> make_codec(const CodecConfig& cfg) {
  check_arg(cfg.head_dim > 0 && cfg.head_dim % 8 == 0 && cfg.head_dim <= 1024, "make_codec", "head_dim", cfg.head_dim,
            "must be a positive multiple of 8, at most 1024");
  check_arg(cfg.qjl_rows >= 0 && cfg.qjl_rows % 8 == 0, "make_codec", "qjl_rows", cfg.qjl_rows,
            "must be 0 (= head_dim) or a positive multiple of 8");
  check_arg(cfg.kmeans_iters >= 0, "make_codec", "kmeans_iters", cfg.kmeans_iters, "must be >= 0");
  if (cfg.center) {
    CodecConfig inner = cfg;
    inner.center = false;
    return ref::make_centered(cfg, make_codec(inner));
  }
  switch (cfg.method) {
    case Method::kTurboMse: return ref::make_tq_mse(cfg);
    case Method::kTurboProd: return ref::make_tq_prod(cfg);
    case Method::kQjl: return ref::make_qjl(cfg);
    case Method::kRvq: return ref::make_rvq(cfg);
    case Method::kPvq: return ref::make_pvq(cfg);
    case Method::kPolar: return ref::make_polar(cfg);
    case Method::kKivi: return ref::make_kivi(cfg);
    case Method::kFp8: return ref::make_fp8(cfg);
    case Method::kFp16: return ref::make_fp16(cfg);
  }
  throw std::invalid_argument("make_codec: method = ?: unknown");
}

}  // namespace turbokv
