// Helpers shared by the assembler and verifier tests: file access and a
// structural comparison of Programs (the round-trip's notion of "equal").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "interpreter/program.h"
#include "runtime/value/code.h"

namespace kiln::test {

inline std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sorted, so failures are reproducible.
inline std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir, const std::string& ext) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Structural equality: a difference is described in `why`. Floats compare
// by bits (so -0.0 != 0.0 and NaN == NaN of the same sign); Code constants
// compare structurally, with `seen` breaking reference cycles.
class StructuralEq {
 public:
  std::string why;

  bool values(const runtime::Value& a, const runtime::Value& b) {
    using runtime::Kind;
    if (a.kind() != b.kind()) return no("constant kinds differ");
    switch (a.kind()) {
      case Kind::None:
      case Kind::Null: return true;
      case Kind::Bool:
      case Kind::Int: return a.as_int() == b.as_int() || no("ints differ");
      case Kind::Float: {
        double x = a.as_float(), y = b.as_float();
        if (std::isnan(x) && std::isnan(y)) return std::signbit(x) == std::signbit(y) || no("nan signs differ");
        return std::memcmp(&x, &y, sizeof x) == 0 || no("floats differ");
      }
      case Kind::Str: return a.as_str() == b.as_str() || no("strings differ");
      case Kind::Tuple: {
        const auto& x = a.as<runtime::TupleObj>()->items;
        const auto& y = b.as<runtime::TupleObj>()->items;
        if (x.size() != y.size()) return no("tuple sizes differ");
        for (size_t i = 0; i < x.size(); ++i)
          if (!values(x[i], y[i])) return false;
        return true;
      }
      case Kind::FrozenSet: {
        // Items in the same (table) order: the canonical text keeps it.
        const std::vector<runtime::Value> x = a.as<runtime::SetObj>()->items();
        const std::vector<runtime::Value> y = b.as<runtime::SetObj>()->items();
        if (x.size() != y.size()) return no("frozenset sizes differ");
        for (size_t i = 0; i < x.size(); ++i)
          if (!values(x[i], y[i])) return false;
        return true;
      }
      case Kind::Code: return code(*a.as<runtime::Code>(), *b.as<runtime::Code>());
      default: return a.is_same(b) || no("objects differ");
    }
  }

  bool value_lists(const std::vector<runtime::Value>& a, const std::vector<runtime::Value>& b, const char* what) {
    if (a.size() != b.size()) return no(std::string(what) + " sizes differ");
    for (size_t i = 0; i < a.size(); ++i)
      if (!values(a[i], b[i])) return no(std::string(what) + " differ: " + why);
    return true;
  }

  bool code(const runtime::Code& a, const runtime::Code& b) {
    if (!seen_.insert({&a, &b}).second) return true;
    const std::string fn = "function " + a.qualname + ": ";
    if (a.name != b.name || a.qualname != b.qualname) return no(fn + "names differ");
    if (a.argcount != b.argcount || a.kwonlyargcount != b.kwonlyargcount || a.flags != b.flags ||
        a.posonlyargcount != b.posonlyargcount)
      return no(fn + "signatures differ");
    if (a.first_line != b.first_line) return no(fn + "first lines differ");
    if (a.varnames != b.varnames) return no(fn + "varnames differ");
    if (a.cellvars != b.cellvars || a.freevars != b.freevars) return no(fn + "cell/free vars differ");
    if (a.names.size() != b.names.size()) return no(fn + "name tables differ");
    for (size_t i = 0; i < a.names.size(); ++i)
      if (a.names[i]->s != b.names[i]->s) return no(fn + "names differ at " + std::to_string(i));
    if (!value_lists(a.consts, b.consts, "constants")) return no(fn + why);
    if (a.instrs.size() != b.instrs.size()) return no(fn + "instruction counts differ");
    for (size_t i = 0; i < a.instrs.size(); ++i) {
      const auto &x = a.instrs[i], &y = b.instrs[i];
      if (x.op != y.op || x.a != y.a || x.b != y.b || x.line != y.line)
        return no(fn + "instruction " + std::to_string(i) + " differs");
    }
    if (a.exception_table != b.exception_table) return no(fn + "exception tables differ");
    if (a.max_stack != b.max_stack || a.verified != b.verified || a.cell_from_arg != b.cell_from_arg)
      return no(fn + "verifier results differ");
    return true;
  }

  bool function(const runtime::FunctionObj& a, const runtime::FunctionObj& b) {
    return code(*a.code, *b.code) && value_lists(a.defaults, b.defaults, "defaults") &&
           value_lists(a.kwdefaults, b.kwdefaults, "kwdefaults");
  }

  bool programs(const interpreter::Program& a, const interpreter::Program& b) {
    if (a.items.size() != b.items.size()) return no("item counts differ");
    for (size_t i = 0; i < a.items.size(); ++i) {
      const auto &x = a.items[i], &y = b.items[i];
      if (bool(x.function) != bool(y.function) || bool(x.cls) != bool(y.cls)) return no("item kinds differ");
      if (x.function && !function(*x.function, *y.function)) return false;
      if (x.cls) {
        if (x.cls->name != y.cls->name) return no("class names differ");
        if (bool(x.cls->base) != bool(y.cls->base) || (x.cls->base && x.cls->base->name != y.cls->base->name))
          return no("class " + x.cls->name + ": bases differ");
        if (x.methods.size() != y.methods.size()) return no("class " + x.cls->name + ": method counts differ");
        for (size_t m = 0; m < x.methods.size(); ++m)
          if (!function(*x.methods[m], *y.methods[m])) return false;
      }
    }
    // The globals bind the same names in the same order.
    const auto &ga = a.globals->map.entries(), &gb = b.globals->map.entries();
    if (ga.size() != gb.size()) return no("global counts differ");
    for (size_t i = 0; i < ga.size(); ++i)
      if (ga[i].first->s != gb[i].first->s || ga[i].second.kind() != gb[i].second.kind())
        return no("globals differ at " + ga[i].first->s);
    return true;
  }

 private:
  bool no(std::string w) {
    why = std::move(w);
    return false;
  }
  std::set<std::pair<const runtime::Code*, const runtime::Code*>> seen_;
};

}  // namespace kiln::test
