// A debug switch for the tests of "never worse than eager": kiln raises an
// internal error of its own at a named point (the frontend, the tracer, a
// backend, codegen), so a test can check that the program still gets
// eager's result and explain names the reason. Off unless KILN_FAULT
// names points (comma-separated) or set_fault_points is called; an unused
// point costs one load of a bool.
#pragma once

#include <string>
#include <string_view>

namespace kiln::runtime {

void set_fault_points(const std::string& points);  // "" switches every point off
bool fault_enabled(std::string_view point);

namespace detail {
extern bool any_fault_point;
[[noreturn]] void raise_fault(std::string_view point);
}  // namespace detail

// Raises RuntimeError("kiln: injected fault at <point>") when `point` is on.
inline void fault_point(std::string_view point) {
  if (detail::any_fault_point && fault_enabled(point)) detail::raise_fault(point);
}

}  // namespace kiln::runtime
