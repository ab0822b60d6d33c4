// The eager evaluator for ScalarExpr (tensor/scalar_expr.h): every primitive of
// tensor/ops.def's contract over C++ scalars T in {bool, int64_t, float, double}.
//
// Semantics follow torch on CPU, which for the integer corner cases means
// Python's: floor division and modulo round toward -inf and take the sign
// of the divisor; integer division or modulo by zero raises
// ZeroDivisionError; int64 arithmetic wraps (computed in uint64, so there is
// no undefined behaviour). Floats propagate NaN through max/min as
// torch.maximum does. Primitives the type rules never route to a type (exp
// of an int, band of a float) still have a defined meaning here so that the
// evaluator is total.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/base/error.h"
#include "runtime/value/strided.h"

namespace kiln::runtime {

struct EagerEval {
  template <class T>
  static constexpr bool is_int = std::is_same_v<T, int64_t>;
  template <class T>
  static constexpr bool is_bool = std::is_same_v<T, bool>;

  static int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
  static int64_t wrap_sub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
  static int64_t wrap_mul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }
  [[noreturn]] static void zero_division() {
    throw_error(ErrorKind::ZeroDivisionError, "integer division or modulo by zero");
  }
  // torch refuses `-` on bools; the pointwise shape rule raises these too.
  [[noreturn]] static void bool_subtraction() {
    throw_error(ErrorKind::RuntimeError,
                "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  }
  [[noreturn]] static void bool_negation() {
    throw_error(ErrorKind::RuntimeError,
                "Negation, the `-` operator, on a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  }

  template <class T>
  T c(T, double v) const { return convert<T>(v); }

  template <class T>
  T add(T a, T b) const {
    if constexpr (is_bool<T>) return a || b;  // torch: True + True is True
    else if constexpr (is_int<T>) return wrap_add(a, b);
    else return a + b;
  }
  template <class T>
  T sub(T a, T b) const {
    if constexpr (is_bool<T>) {
      bool_subtraction();
    } else if constexpr (is_int<T>) {
      return wrap_sub(a, b);
    } else {
      return a - b;
    }
  }
  template <class T>
  T mul(T a, T b) const {
    if constexpr (is_bool<T>) return a && b;
    else if constexpr (is_int<T>) return wrap_mul(a, b);
    else return a * b;
  }
  // True division. The Float rule routes integral operands to float32, so
  // the integral branches only exist for totality: they floor like `//`.
  template <class T>
  T div(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return a / b;
    else return floordiv(a, b);
  }
  template <class T>
  T neg(T a) const {
    if constexpr (is_bool<T>) {
      bool_negation();
    } else if constexpr (is_int<T>) {
      return wrap_sub(0, a);
    } else {
      return -a;
    }
  }
  template <class T>
  T abs(T a) const {
    if constexpr (is_bool<T>) return a;
    else if constexpr (is_int<T>) return a < 0 ? wrap_sub(0, a) : a;
    else return std::abs(a);
  }
  template <class T>
  T pow(T a, T b) const {
    if constexpr (is_bool<T>) {
      return b ? a : true;
    } else if constexpr (is_int<T>) {
      if (b < 0) throw_error(ErrorKind::RuntimeError, "Integers to negative integer powers are not allowed.");
      int64_t result = 1, base = a;
      for (uint64_t e = uint64_t(b); e; e >>= 1) {  // square-and-multiply, wrapping like torch
        if (e & 1) result = wrap_mul(result, base);
        base = wrap_mul(base, base);
      }
      return result;
    } else {
      return std::pow(a, b);
    }
  }
  template <class T>
  T max(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    }
    return a < b ? b : a;
  }
  template <class T>
  T min(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    }
    return b < a ? b : a;
  }
  template <class T>
  T floordiv(T a, T b) const {
    if constexpr (is_bool<T>) {
      if (!b) zero_division();
      return a;  // a // True
    } else if constexpr (is_int<T>) {
      if (b == 0) zero_division();
      if (b == -1) return wrap_sub(0, a);  // INT64_MIN // -1 wraps instead of trapping
      int64_t q = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --q;
      return q;
    } else {
      // torch's div_floor_floating (Python's float floor division, but
      // returning IEEE inf/nan for a zero divisor instead of raising).
      if (b == 0) return a / b;
      const T mod = std::fmod(a, b);
      T d = (a - mod) / b;
      if (mod != 0 && ((b < 0) != (mod < 0))) d -= T(1);
      if (d == 0) return std::copysign(T(0), a / b);
      T fl = std::floor(d);
      if (d - fl > T(0.5)) fl += T(1);
      return fl;
    }
  }
  template <class T>
  T mod(T a, T b) const {
    if constexpr (is_bool<T>) {
      if (!b) zero_division();
      return false;  // a % True
    } else if constexpr (is_int<T>) {
      if (b == 0) zero_division();
      if (b == -1) return 0;
      int64_t r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      // torch.remainder: the result takes the sign of the divisor.
      T r = std::fmod(a, b);
      if (r != 0 && ((b < 0) != (r < 0))) r += b;
      return r;
    }
  }

  template <class T> bool eq(T a, T b) const { return a == b; }
  template <class T> bool ne(T a, T b) const { return a != b; }
  template <class T> bool lt(T a, T b) const { return a < b; }
  template <class T> bool le(T a, T b) const { return a <= b; }
  template <class T> bool gt(T a, T b) const { return a > b; }
  template <class T> bool ge(T a, T b) const { return a >= b; }

  template <class T>
  T where(bool cond, T x, T y) const { return cond ? x : y; }

  // Transcendentals: integral inputs go through double (never reached
  // eagerly: these ops type as Float).
  template <class T>
  T exp(T a) const { return unary_float(a, [](auto x) { return std::exp(x); }); }
  template <class T>
  T log(T a) const { return unary_float(a, [](auto x) { return std::log(x); }); }
  template <class T>
  T tanh(T a) const { return unary_float(a, [](auto x) { return std::tanh(x); }); }
  template <class T>
  T erf(T a) const { return unary_float(a, [](auto x) { return std::erf(x); }); }
  template <class T>
  T sin(T a) const { return unary_float(a, [](auto x) { return std::sin(x); }); }
  template <class T>
  T cos(T a) const { return unary_float(a, [](auto x) { return std::cos(x); }); }
  template <class T>
  T sqrt(T a) const { return unary_float(a, [](auto x) { return std::sqrt(x); }); }

  template <class T>
  T band(T a, T b) const {
    if constexpr (is_bool<T>) return a && b;
    else if constexpr (is_int<T>) return a & b;
    else return not_integral<T>("bitwise_and");
  }
  template <class T>
  T bor(T a, T b) const {
    if constexpr (is_bool<T>) return a || b;
    else if constexpr (is_int<T>) return a | b;
    else return not_integral<T>("bitwise_or");
  }
  template <class T>
  T bxor(T a, T b) const {
    if constexpr (is_bool<T>) return a != b;
    else if constexpr (is_int<T>) return a ^ b;
    else return not_integral<T>("bitwise_xor");
  }
  template <class T>
  T bnot(T a) const {
    if constexpr (is_bool<T>) return !a;
    else if constexpr (is_int<T>) return ~a;
    else return not_integral<T>("bitwise_not");
  }

 private:
  template <class T, class F>
  static T unary_float(T a, F f) {
    if constexpr (std::is_floating_point_v<T>) return f(a);
    else return convert<T>(f(double(a)));
  }
  template <class T>
  [[noreturn]] static T not_integral(const char* op) {
    throw_error(ErrorKind::TypeError, std::string(op) + "(): expected integral or bool operands, got a float");
  }
};

}  // namespace kiln::runtime
