// What the embedding CPython decides about semantics kiln reproduces, where
// CPython versions differ. The Python package installs its interpreter's
// (python/src/set_layout.cpp, install_python_hashes); without it (the KBC
// VM, the C++ API, the `kiln` tool) kiln answers as CPython 3.11 does.
//
//   printable  str.isprintable() of one code point: repr() escapes what it
//              rejects. Each version has its own Unicode (3.11: 14.0, 3.12:
//              15.0, 3.13: 15.1); unset, runtime/semantics/unicode_nonprintable.def
//              (Unicode 14) answers.
//   minor      the minor version: from 3.12 sum() adds floats with
//              Neumaier's compensation (python_sum, runtime/semantics/builtins.cpp);
//              the words of some errors (min() of nothing from 3.12, a
//              float modulo by zero from 3.13, an int one before 3.11); a
//              format spec's 'z' from 3.11, and its "Invalid format
//              specifier" naming the spec (runtime/semantics/format.cpp); an unbound
//              local's (interpreter/vm.cpp).
#pragma once

#include <cstdint>

namespace kiln::runtime {

using PrintableHook = bool (*)(uint32_t code_point);

struct HostPython {
  int minor = 11;
  PrintableHook printable = nullptr;
};

void set_host_python(const HostPython& host);
const HostPython& host_python();

}  // namespace kiln::runtime
