#include "python/src/python_ints.h"

#include <pybind11/pybind11.h>

#include <string>

#include "python/src/convert.h"
#include "python/src/foreign.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::python {

using runtime::Value;

namespace {
Value bigint_binary(runtime::BinOp op, int64_t x, int64_t y) {
  return calling_python([&] {
    py::int_ a(x), b(y);
    PyObject* r = nullptr;
    switch (op) {
      case runtime::BinOp::ADD: r = PyNumber_Add(a.ptr(), b.ptr()); break;
      case runtime::BinOp::SUB: r = PyNumber_Subtract(a.ptr(), b.ptr()); break;
      case runtime::BinOp::MUL: r = PyNumber_Multiply(a.ptr(), b.ptr()); break;
      case runtime::BinOp::FLOORDIV: r = PyNumber_FloorDivide(a.ptr(), b.ptr()); break;
      case runtime::BinOp::POW: r = PyNumber_Power(a.ptr(), b.ptr(), Py_None); break;
      case runtime::BinOp::LSHIFT: r = PyNumber_Lshift(a.ptr(), b.ptr()); break;
      default: throw_error(ErrorKind::OverflowError, "integer overflow");
    }
    if (!r) throw py::error_already_set();
    return to_value(py::reinterpret_steal<py::object>(r));
  });
}
Value bigint_from_double(double d) {
  return calling_python([&] {
    PyObject* r = PyLong_FromDouble(d);
    if (!r) throw py::error_already_set();
    return to_value(py::reinterpret_steal<py::object>(r));
  });
}
Value bigint_call_builtin(const std::string& name, const runtime::CallArgs& args) {
  return calling_python([&] {
    PyObject* fn = PyDict_GetItemString(PyEval_GetBuiltins(), name.c_str());  // borrowed
    if (!fn) return Value::null();
    const size_t nkw = args.nkw(), npos = args.npos();
    py::tuple pos(npos);
    for (size_t i = 0; i < npos; ++i) pos[i] = to_py(args[i]);
    py::dict kw;
    for (size_t i = 0; i < nkw; ++i) kw[py::str(args.kwnames->items[i].as_str())] = to_py(args[npos + i]);
    return to_value_shared(py::handle(fn)(*pos, **kw));
  });
}
bool bigint_is_big(const Value& v) {
  PyObject* o = foreign_object(v);
  return o && PyLong_CheckExact(o);
}
const runtime::BigIntHooks kPythonInts = {bigint_binary, bigint_from_double, bigint_call_builtin, bigint_is_big};
}  // namespace

void install_python_ints() { runtime::set_bigint_hooks(&kPythonInts); }

}  // namespace kiln::python
