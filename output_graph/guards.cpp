#include "output_graph/guards.h"

#include "runtime/nn/module.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/code.h"

namespace kiln::output_graph {

const char* guard_kind_name(GuardKind k) {
  switch (k) {
#define KILN_GUARD_NAME(k) \
  case GuardKind::k: return #k;
    KILN_GUARD_KINDS(KILN_GUARD_NAME)
#undef KILN_GUARD_NAME
  }
  return "?";
}

std::string Guard::str() const {
  std::string s = std::string(guard_kind_name(kind)) + " " + source->str();
  switch (kind) {
    case GuardKind::TypeMatch: return s + " is " + runtime::type_name(expected);
    case GuardKind::IdMatch: return s + " is the same object";
    case GuardKind::ConstantMatch: return s + " == " + runtime::repr(expected);
    case GuardKind::GradTensorMatch:
      return s + " " + tensor.str() + " stride=" + runtime::shape_str(tensor.strides) + " requires grad";
    case GuardKind::TensorMatch: {
      // A guard with a dynamic dim checks the layout class, not the example's
      // strides (interpreter/guard_tree.cpp): say so, so ranks that traced
      // different sizes under the same guard also print the same guard.
      bool dynamic = false;
      for (bool d : tensor.dynamic) dynamic = dynamic || d;
      if (dynamic && tensor.strides == runtime::contiguous_strides(tensor.sizes))
        return s + " " + tensor.str() + " contiguous";
      return s + " " + tensor.str() + " stride=" + runtime::shape_str(tensor.strides);
    }
    case GuardKind::Length: return s + " len == " + std::to_string(length);
    case GuardKind::ModuleVersion: return s + " version == " + std::to_string(version);
    case GuardKind::ModuleHooks: {
      auto names = [](const Value& fns) {
        std::string out;
        for (const Value& f : fns.as<runtime::TupleObj>()->items) {
          if (!out.empty()) out += ", ";
          out += f.is(runtime::Kind::Function) ? f.as<runtime::FunctionObj>()->code->qualname : runtime::repr(f);
        }
        return "[" + out + "]";
      };
      const auto& both = expected.as<runtime::TupleObj>()->items;
      return s + " pre_hooks == " + names(both[0]) + " hooks == " + names(both[1]);
    }
    case GuardKind::ModuleChildren: return s + " children == " + runtime::repr(expected);
    case GuardKind::DictKeys: return s + " keys == " + runtime::repr(expected);
    case GuardKind::Aliasing: return s + " is container #" + std::to_string(length);
    case GuardKind::Absent:
      // A global shadowing a builtin; an attribute or a dict key, missing.
      if (source->kind == SourceKind::Global) return s + " is not defined (the builtin is used)";
      return s + " is absent";
  }
  return s;
}

Guard* GuardSet::find(const Source* source, GuardKind kind) {
  auto it = index_[size_t(kind)].find(source);
  return it == index_[size_t(kind)].end() ? nullptr : &guards_[it->second];
}

void GuardSet::add(Guard g) {
  if (!enabled_) return;
  auto [it, inserted] = index_[size_t(g.kind)].emplace(g.source.get(), guards_.size());
  if (!inserted) {
    guards_[it->second] = std::move(g);  // a later, more precise guard of the same kind replaces the earlier
    return;
  }
  guards_.push_back(std::move(g));
}

void GuardSet::specialize_all() {
  for (Guard& g : guards_) {
    g.tensor.dynamic.clear();
    g.tensor.sym.clear();
  }
}

bool GuardSet::has_dynamic() const {
  for (const Guard& g : guards_)
    for (bool d : g.tensor.dynamic)
      if (d) return true;
  return false;
}

std::vector<std::string> GuardSet::strs() const {
  std::vector<std::string> out;
  for (const Guard& g : guards_) out.push_back(g.str());
  for (size_t i = 0; i < symbol_sources_.size(); ++i)
    out.push_back("SYMBOL s" + std::to_string(i) + " = " + symbol_sources_[i]->str() + ".size()[" +
                  std::to_string(symbol_dims_[i]) + "]");
  for (const ShapeGuard& g : shapes_.guards()) out.push_back("SHAPE " + g.str());
  if (grad_mode_ >= 0) out.push_back(std::string("GRAD_MODE ") + (grad_mode_ ? "on" : "off"));
  return out;
}

SymExpr GuardSet::add_symbol(const SourceRef& tensor, int dim, int64_t hint) {
  SymExpr s = shapes_.create_symbol(hint, tensor->str() + ".size()[" + std::to_string(dim) + "]");
  symbol_sources_.push_back(tensor);
  symbol_dims_.push_back(dim);
  return s;
}

}  // namespace kiln::output_graph
