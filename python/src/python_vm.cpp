#include "python/src/python_vm.h"

#include <pybind11/pybind11.h>

#include <algorithm>

#include "interpreter/vm.h"

namespace kiln::python {

namespace py = pybind11;

void write_python_stdout(std::string_view text) {
  py::module_::import("sys").attr("stdout").attr("write")(py::str(text.data(), text.size()));
}

runtime::CallContext& python_vm() {
  // Python's recursion limit (as set when this thread first calls into
  // kiln), so a deep module chain that Python itself could call is not cut
  // short at kiln's default; the VM's C++-stack check still stops a real
  // overflow.
  thread_local interpreter::VM vm([] {
    interpreter::VMOptions o;
    o.recursion_limit = std::max(o.recursion_limit, Py_GetRecursionLimit());
    o.stdout_sink = write_python_stdout;
    return o;
  }());
  return vm;
}

}  // namespace kiln::python
