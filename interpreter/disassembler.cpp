#include "interpreter/disassembler.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "interpreter/kbc_syntax.h"

namespace kiln::interpreter {

using runtime::Instr;
using runtime::Kind;
using runtime::OperandKind;
using runtime::Value;

namespace {

// `name` made an identifier (Python's code names like "<lambda>" are not).
std::string sanitize(std::string_view name) {
  std::string s;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    s += ok ? c : '_';
  }
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) s = "_" + s;
  return s;
}

class Disassembler {
 public:
  // Reserves `name` for `code` (an item of the program).
  void name_item(const Code& code, const std::string& name) {
    names_.emplace(&code, name);
    taken_.insert(name);
  }
  void reserve(const std::string& name) { taken_.insert(name); }

  void function(const Code& code, const std::string& name, const std::vector<Value>* defaults,
                const std::vector<Value>* kwdefaults) {
    out_ += ".func " + name + "(" + params(code, defaults, kwdefaults) + ")\n";
    directives(code);
    body(code);
    out_ += ".end\n";
  }

  // Prints the code objects that constants reached but the program did not
  // name, each once; printing one may discover more.
  void extras() {
    for (size_t i = 0; i < extra_.size(); ++i) {
      out_ += "\n";
      function(*extra_[i], names_.at(extra_[i]), nullptr, nullptr);
    }
  }

  std::string& out() { return out_; }

 private:
  std::string code_name(const Code& c) {
    if (auto it = names_.find(&c); it != names_.end()) return it->second;
    std::string base = sanitize(c.name);
    std::string name = base;
    for (int n = 1; taken_.count(name); ++n) name = base + "_" + std::to_string(n);
    name_item(c, name);
    extra_.push_back(&c);
    return name;
  }
  std::string constant(const Value& v) {
    return kbc::format_constant(v, [this](const Code& c) { return code_name(c); });
  }

  // `x, /, y=1, *args, k=2.0, **kw` from the varnames layout (positional,
  // keyword-only, *args, **kwargs).
  std::string params(const Code& c, const std::vector<Value>* defaults, const std::vector<Value>* kwdefaults) {
    std::vector<std::string> parts;
    auto var = [&](int32_t i) { return size_t(i) < c.varnames.size() ? c.varnames[size_t(i)] : "<missing>"; };
    size_t ndefaults = defaults ? std::min(defaults->size(), size_t(std::max(c.argcount, 0))) : 0;
    for (int32_t i = 0; i < c.argcount; ++i) {
      std::string p = var(i);
      size_t from_end = size_t(c.argcount - i);
      if (from_end <= ndefaults) p += "=" + constant((*defaults)[defaults->size() - from_end]);
      parts.push_back(p);
      if (i + 1 == c.posonlyargcount) parts.push_back("/");
    }
    int32_t after = c.argcount + c.kwonlyargcount;
    if (c.flags & runtime::kVarArgs) parts.push_back("*" + var(after));
    else if (c.kwonlyargcount > 0) parts.push_back("*");
    for (int32_t j = 0; j < c.kwonlyargcount; ++j) {
      std::string p = var(c.argcount + j);
      if (kwdefaults && size_t(j) < kwdefaults->size() && !(*kwdefaults)[size_t(j)].is_null())
        p += "=" + constant((*kwdefaults)[size_t(j)]);
      parts.push_back(p);
    }
    if (c.flags & runtime::kVarKw) parts.push_back("**" + var(after + ((c.flags & runtime::kVarArgs) ? 1 : 0)));
    std::string s;
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
    return s;
  }

  void name_list(const char* directive, const std::vector<std::string>& names, size_t from = 0) {
    if (names.size() <= from) return;
    out_ += std::string("  ") + directive;
    for (size_t i = from; i < names.size(); ++i) out_ += " " + names[i];
    out_ += "\n";
  }

  void directives(const Code& c) {
    if (!c.instrs.empty() && c.first_line != c.instrs[0].line)
      out_ += "  .firstline " + std::to_string(c.first_line) + "\n";
    if (c.flags & runtime::kGenerator) out_ += "  .generator\n";
    name_list(".locals", c.varnames, size_t(std::max(c.nparams(), 0)));
    name_list(".cellvars", c.cellvars);
    name_list(".freevars", c.freevars);
  }

  void body(const Code& c) {
    // Labels L0, L1, ... numbered by target position: jump targets and the
    // exception table's boundaries (an end may be one past the last
    // instruction: its label closes the body).
    std::map<int32_t, std::string> labels;
    for (const Instr& ins : c.instrs)
      if (size_t(ins.op) < size_t(runtime::kNumOpcodes) && runtime::opcode_info(ins.op).a == OperandKind::Jump)
        labels.emplace(ins.a, "");
    for (const auto& e : c.exception_table)
      for (int32_t p : {e.start, e.end, e.target}) labels.emplace(p, "");
    int n = 0;
    for (auto& [target, name] : labels) name = "L" + std::to_string(n++);

    auto label = [&](int32_t p) {
      auto it = labels.find(p);
      return p >= 0 && size_t(p) <= c.instrs.size() ? it->second : "<bad label " + std::to_string(p) + ">";
    };
    for (const auto& e : c.exception_table)
      out_ += "  .except " + label(e.start) + " " + label(e.end) + " " + label(e.target) + " " +
              std::to_string(e.depth) + (e.lasti ? " lasti" : "") + "\n";
    for (size_t pc = 0; pc < c.instrs.size(); ++pc) {
      const Instr& ins = c.instrs[pc];
      if (auto it = labels.find(int32_t(pc)); it != labels.end()) out_ += it->second + ":\n";
      if (pc == 0 || ins.line != c.instrs[pc - 1].line) out_ += "  .line " + std::to_string(ins.line) + "\n";
      out_ += "  " + instruction(c, ins, labels) + "\n";
    }
    if (auto it = labels.find(int32_t(c.instrs.size())); it != labels.end()) out_ += it->second + ":\n";
  }

  std::string instruction(const Code& c, const Instr& ins, const std::map<int32_t, std::string>& labels) {
    if (size_t(ins.op) >= size_t(runtime::kNumOpcodes)) return "<bad opcode " + std::to_string(int(ins.op)) + ">";
    const auto& info = runtime::opcode_info(ins.op);
    std::string s = info.name;
    if (info.a == OperandKind::BinOp && info.b == OperandKind::Flags)  // `+=`: the in-place flag
      return s + " " + operand(c, info.a, ins.a, labels) + (ins.b ? "=" : "");
    if (info.a != OperandKind::None) s += " " + operand(c, info.a, ins.a, labels);
    if (info.b != OperandKind::None) s += " " + operand(c, info.b, ins.b, labels);
    return s;
  }

  // Operands are printed even when out of range (unverified code), marked
  // so that they cannot be mistaken for valid ones.
  std::string operand(const Code& c, OperandKind kind, int32_t v, const std::map<int32_t, std::string>& labels) {
    auto bad = [&](const char* what) { return "<bad " + std::string(what) + " " + std::to_string(v) + ">"; };
    auto in = [&](size_t n) { return v >= 0 && size_t(v) < n; };
    switch (kind) {
      case OperandKind::Const: return in(c.consts.size()) ? constant(c.consts[size_t(v)]) : bad("constant");
      case OperandKind::Local: return in(c.varnames.size()) ? c.varnames[size_t(v)] : bad("local");
      case OperandKind::Name: return in(c.names.size()) && c.names[size_t(v)] ? c.names[size_t(v)]->s : bad("name");
      case OperandKind::Deref:
        if (in(c.cellvars.size())) return c.cellvars[size_t(v)];
        if (in(size_t(c.ncells()))) return c.freevars[size_t(v) - c.cellvars.size()];
        return bad("cell");
      case OperandKind::Jump: {
        auto it = labels.find(v);
        return in(c.instrs.size()) && it != labels.end() ? it->second : bad("jump target");
      }
      case OperandKind::BinOp:
        return in(size_t(runtime::num_binops())) ? runtime::binop_symbol(runtime::BinOp(v)) : bad("operator");
      case OperandKind::CmpOp:
        return in(size_t(runtime::num_cmpops())) ? runtime::cmpop_symbol(runtime::CmpOp(v)) : bad("operator");
      case OperandKind::UnOp:
        return in(size_t(runtime::num_unops())) ? runtime::unop_symbol(runtime::UnOp(v)) : bad("operator");
      case OperandKind::Count:
      case OperandKind::Flags:
      case OperandKind::None: return std::to_string(v);
    }
    return std::to_string(v);
  }

  std::unordered_map<const Code*, std::string> names_;
  std::unordered_set<std::string> taken_;
  std::vector<const Code*> extra_;
  std::string out_;
};

}  // namespace

std::string disassemble(const Program& program) {
  Disassembler d;
  // Name every item before printing, so that `@f` refers to the item even
  // when f comes later in the file.
  for (const auto& item : program.items) {
    if (item.function) {
      d.name_item(*item.function->code, item.function->code->name);
    } else if (item.cls) {
      d.reserve(item.cls->name);
      for (const auto& m : item.methods) d.name_item(*m->code, item.cls->name + "." + m->code->name);
    }
  }
  bool first = true;
  for (const auto& item : program.items) {
    if (!first) d.out() += "\n";
    first = false;
    if (item.function) {
      const FunctionObj& fn = *item.function;
      d.function(*fn.code, fn.code->name, &fn.defaults, &fn.kwdefaults);
      continue;
    }
    if (!item.cls) continue;
    const ClassObj& cls = *item.cls;
    d.out() += ".class " + cls.name;
    if (cls.base && cls.base.get() != runtime::module_base_class().get()) d.out() += "(" + cls.base->name + ")";
    d.out() += "\n";
    for (const auto& m : item.methods) {
      d.out() += "\n";
      if (const Value* v = cls.methods.find(m->code->name)) {
        if (v->is(runtime::Kind::Property)) d.out() += ".property\n";
        if (v->is(runtime::Kind::StaticMethod)) d.out() += ".staticmethod\n";
        if (v->is(runtime::Kind::ClassMethod)) d.out() += ".classmethod\n";
      }
      d.function(*m->code, m->code->name, &m->defaults, &m->kwdefaults);
    }
    d.out() += "\n.endclass\n";
  }
  d.extras();
  return std::move(d.out());
}

std::string disassemble(const Code& code) {
  Disassembler d;
  std::string name = sanitize(code.name);
  d.name_item(code, name);
  d.function(code, name, nullptr, nullptr);
  d.extras();
  return std::move(d.out());
}

std::string disassemble(const FunctionObj& fn) {
  Disassembler d;
  std::string name = sanitize(fn.code->name);
  d.name_item(*fn.code, name);
  d.function(*fn.code, name, &fn.defaults, &fn.kwdefaults);
  d.extras();
  return std::move(d.out());
}

}  // namespace kiln::interpreter
