// Tensor element types. The enumerator order is the promotion order
// (bool < int32 < int64 < float32 < float64): promote(a, b) is the larger
// of the two, as torch promotes within and across its categories.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::runtime {

// X-macro: name, C++ type, Python-facing name, itemsize
#define KILN_DTYPES(X)             \
  X(Bool, bool, "bool")            \
  X(Int32, int32_t, "int32")       \
  X(Int64, int64_t, "int64")       \
  X(Float32, float, "float32")     \
  X(Float64, double, "float64")

enum class DType : uint8_t {
#define KILN_DT_ENUM(name, ctype, str) name,
  KILN_DTYPES(KILN_DT_ENUM)
#undef KILN_DT_ENUM
};
constexpr int kNumDTypes = 5;

static_assert(DType::Bool < DType::Int32 && DType::Int32 < DType::Int64 && DType::Int64 < DType::Float32 &&
                  DType::Float32 < DType::Float64,
              "DType order is the promotion lattice; promote() relies on it");

constexpr DType kDefaultFloat = DType::Float32;  // torch's default dtype

constexpr DType promote(DType a, DType b) { return a < b ? b : a; }
constexpr bool is_floating(DType d) { return d == DType::Float32 || d == DType::Float64; }
constexpr bool is_integral(DType d) { return d == DType::Bool || d == DType::Int32 || d == DType::Int64; }

constexpr size_t itemsize(DType d) {
  switch (d) {
#define KILN_DT_SIZE(name, ctype, str) \
  case DType::name: return sizeof(ctype);
    KILN_DTYPES(KILN_DT_SIZE)
#undef KILN_DT_SIZE
  }
  return 0;
}

constexpr const char* dtype_name(DType d) {
  switch (d) {
#define KILN_DT_NAME(name, ctype, str) \
  case DType::name: return str;
    KILN_DTYPES(KILN_DT_NAME)
#undef KILN_DT_NAME
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s);

template <class T> struct dtype_of;
#define KILN_DT_OF(name, ctype, str) \
  template <> struct dtype_of<ctype> { static constexpr DType value = DType::name; };
KILN_DTYPES(KILN_DT_OF)
#undef KILN_DT_OF

// Calls f(T{}) with the C++ element type of d.
template <class F>
decltype(auto) dispatch_dtype(DType d, F&& f) {
  switch (d) {
    case DType::Bool: return f(bool{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
  }
  return f(double{});
}

}  // namespace kiln::runtime
