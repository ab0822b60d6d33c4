#include "runtime/value/dtype.h"

namespace kiln::runtime {

std::optional<DType> dtype_from_name(std::string_view s) {
#define KILN_DT_FROM_NAME(name, ctype, str) \
  if (s == str) return DType::name;
  KILN_DTYPES(KILN_DT_FROM_NAME)
#undef KILN_DT_FROM_NAME
  // torch's aliases (torch.float is float32, torch.double float64, torch.long int64)
  if (s == "float") return DType::Float32;
  if (s == "double") return DType::Float64;
  if (s == "long") return DType::Int64;
  return std::nullopt;
}

}  // namespace kiln::runtime
