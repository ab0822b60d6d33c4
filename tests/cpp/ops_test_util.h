// Helpers shared by the tensor and op tests: building tensors from literals,
// reading them back, calling registry ops with keywords, checking errors.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "runtime/value/value.h"

namespace kiln::test {

using runtime::DType;
using runtime::OpId;
using runtime::Shape;
using runtime::Tensor;
using runtime::Value;

inline Tensor ft(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }
inline Tensor dt(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector<double>(v, s); }
inline Tensor it(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); }
inline Tensor bt(const std::vector<bool>& v, const Shape& s) { return Tensor::from_vector<bool>(v, s); }

inline Value tv(const Tensor& t) { return Value::tensor(t); }
inline Value iv(int64_t i) { return Value::integer(i); }
inline Value fv(double f) { return Value::floating(f); }
inline Value bv(bool b) { return Value::boolean(b); }
inline Value sv(const char* s) { return Value::str(s); }
inline Value tup(std::vector<Value> items) { return runtime::make_tuple(std::move(items)); }
inline Value lst(std::vector<Value> items) { return runtime::make_list(std::move(items)); }

// Every element in row-major order, as double.
inline std::vector<double> vals(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<double> out;
  runtime::dispatch_dtype(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = c.data<T>();
    for (int64_t i = 0; i < c.numel(); ++i) out.push_back(double(p[i]));
  });
  return out;
}

struct Kw {
  std::string name;
  Value value;
};

inline Value op(OpId id, std::vector<Value> pos, std::vector<Kw> kw = {}) {
  std::vector<Value> names;
  for (auto& k : kw) {
    pos.push_back(k.value);
    names.push_back(Value::str(k.name));
  }
  const Value kwnames = runtime::make_tuple(std::move(names));
  runtime::CallArgs args;
  args.args = pos.data();
  args.nargs = pos.size();
  args.kwnames = kw.empty() ? nullptr : kwnames.as<runtime::TupleObj>();
  return runtime::call_op(id, args);
}
inline Tensor opt(OpId id, std::vector<Value> pos, std::vector<Kw> kw = {}) {
  const Value v = op(id, std::move(pos), std::move(kw));
  REQUIRE(v.is(runtime::Kind::Tensor));
  return v.as_tensor();
}
inline Tensor meta_of(OpId id, std::vector<Value> pos) {
  runtime::CallArgs args;
  args.args = pos.data();
  args.nargs = pos.size();
  return runtime::infer_meta(id, args);
}

// Runs f and checks it throws kiln::Error of `kind` with exactly `message`.
template <class F>
void check_error(F&& f, ErrorKind kind, const std::string& message) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(error_kind_name(e.kind()) == std::string(error_kind_name(kind)));
    CHECK(e.message() == message);
    return;
  }
  FAIL("expected " << error_kind_name(kind) << ": " << message);
}

inline bool same_storage(const Tensor& a, const Tensor& b) {
  return a.impl()->storage.get() == b.impl()->storage.get();
}

// Element-wise closeness of a tensor to expected values.
inline void check_close(const Tensor& t, const std::vector<double>& expected, double eps = 1e-6) {
  const std::vector<double> got = vals(t);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(expected[i]).margin(eps).epsilon(eps));
  }
}

}  // namespace kiln::test
