#include "interpreter/assembler.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "interpreter/code_builder.h"
#include "interpreter/kbc_syntax.h"
#include "interpreter/verifier.h"
#include "runtime/semantics/descriptors.h"

namespace kiln::interpreter {

using kbc::LineCursor;
using runtime::BuiltinModule;
using runtime::Kind;
using runtime::OperandKind;
using runtime::Value;

runtime::Value Program::global(std::string_view name) const {
  if (!globals) return Value::null();
  const Value* v = globals->map.find(name);
  return v ? *v : Value::null();
}

namespace {

// Calls f(code) for each Code among c's constants, looking inside constant
// tuples; with `exclusive`, only inside tuples nothing else holds (each such
// reference then belongs to c's constants alone).
template <class F>
void for_each_named_code(const runtime::Code& c, bool exclusive, F&& f) {
  auto visit = [&](auto&& self, const Value& v) -> void {
    if (v.is(Kind::Code)) {
      f(v.as<runtime::Code>());
    } else if (v.is(Kind::Tuple)) {
      if (exclusive && v.obj()->refcount() != 1) return;
      for (const Value& item : v.as<runtime::TupleObj>()->items) self(self, item);
    }
  };
  for (const Value& v : c.consts) visit(visit, v);
}

// What a Program's functions share and counting alone cannot free: the
// globals (globals -> function -> globals) and the code constants that name
// code (`@f`: a function naming itself, two naming each other). Destroyed
// with the last copy of the Program (Program::namespace_owner).
struct ProgramNamespace {
  runtime::Ref<GlobalsObj> globals;
  std::vector<runtime::Ref<Code>> codes;  // every .func's code, once assembled
  // The methods' `__class__` cells: a class and its methods' cells holding
  // it are a cycle too.
  std::shared_ptr<std::vector<runtime::Ref<runtime::CellObj>>> class_cells;

  ~ProgramNamespace() {
    globals->map = runtime::NameMap();
    if (class_cells)
      for (const auto& c : *class_cells) c->v = Value::null();
    cut_code_cycles();
  }

  // Trial deletion over the program's codes: a code whose references all
  // come from the constants of the program's codes (and `codes`) is held by
  // nothing outside, and neither is any code only it names. Emptying the
  // constants of each such code frees its cycles. A code still held outside
  // (a function kept past its Program holds its code) and every code it names
  // keep their constants: such a function runs as before.
  void cut_code_cycles() {
    std::unordered_map<const Code*, int64_t> outside;
    for (const auto& c : codes) outside[c.get()] = int64_t(c->refcount()) - 1;  // less `codes`' own
    for (const auto& c : codes)
      for_each_named_code(*c, /*exclusive=*/true, [&](const Code* d) {
        if (auto it = outside.find(d); it != outside.end()) --it->second;
      });
    std::unordered_set<const Code*> held;
    std::vector<const Code*> todo;
    for (const auto& [c, n] : outside)
      if (n > 0 && held.insert(c).second) todo.push_back(c);
    while (!todo.empty()) {
      const Code* c = todo.back();
      todo.pop_back();
      for_each_named_code(*c, /*exclusive=*/false, [&](const Code* d) {
        if (outside.count(d) && held.insert(d).second) todo.push_back(d);
      });
    }
    for (const auto& c : codes)
      if (!held.count(c.get())) c->consts.clear();
  }
};

const char* operand_expectation(OperandKind k) {
  switch (k) {
    case OperandKind::Const: return "a constant";
    case OperandKind::Local: return "a local name";
    case OperandKind::Name: return "a name";
    case OperandKind::Deref: return "a cell or free variable name";
    case OperandKind::Count: return "a count";
    case OperandKind::Flags: return "flags";
    case OperandKind::Jump: return "a label";
    case OperandKind::BinOp: return "a binary operator";
    case OperandKind::CmpOp: return "a comparison operator";
    case OperandKind::UnOp: return "a unary operator";
    case OperandKind::None: break;
  }
  return "nothing";
}

std::optional<runtime::Ref<ClassObj>> builtin_class_named(std::string_view name) {
  if (name == "Module") return runtime::module_base_class();
#define KILN_BM_LOOKUP(n, ...) \
  if (name == #n) return runtime::builtin_module_class(BuiltinModule::n);
  KILN_BUILTIN_MODULES(KILN_BM_LOOKUP)
#undef KILN_BM_LOOKUP
  return std::nullopt;
}

class Assembler {
 public:
  Assembler(std::string_view text, std::string filename) : text_(text), file_(std::move(filename)) {}

  Program run() {
    try {
      return assemble_all();
    } catch (...) {
      discard();
      throw;
    }
  }

 private:
  Program assemble_all() {
    check_utf8();
    split_lines();
    prog_.filename = file_;
    prog_.globals = runtime::make_ref<GlobalsObj>();
    namespace_ = std::make_shared<ProgramNamespace>();
    namespace_->globals = prog_.globals;
    namespace_->class_cells = class_cells_;
    prog_.namespace_owner = namespace_;
    while (next_line()) {
      LineCursor c = cursor();
      if (c.at_end()) continue;
      std::string d = directive(c);
      if (d == ".func") {
        ProgramItem item;
        item.function = function(c, nullptr);
        prog_.items.push_back(std::move(item));
      } else if (d == ".class") {
        prog_.items.push_back(class_(c));
      } else if (d == ".end" || d == ".endclass") {
        c.fail("'" + d + "' without a matching " + (d == ".end" ? ".func" : ".class"));
      } else if (!d.empty()) {
        c.fail("unknown directive '" + d + "' (expected .func or .class)");
      } else {
        c.fail("expected .func or .class, got " + c.next_token_text() + " (instructions belong inside a .func)");
      }
    }
    check_code_refs();
    // Verification waits until every function is built: a function's
    // constants may name functions defined further down the file.
    for (auto& item : prog_.items) {
      if (item.function) verify(*item.function->code);
      for (auto& m : item.methods) verify(*m->code);
    }
    for (const auto& name : slot_order_) namespace_->codes.push_back(slots_.at(name).code);
    return std::move(prog_);
  }

  // After an error: nothing built here has escaped, so break the reference
  // cycles it may contain (globals -> function -> globals, and code
  // constants naming their own code), which counting alone cannot free.
  void discard() {
    if (prog_.globals) prog_.globals->map = runtime::NameMap();
    for (auto& [name, s] : slots_) s.code->consts.clear();
  }

  // ----- lines -------------------------------------------------------------
  void check_utf8() {
    size_t bad = kbc::find_invalid_utf8(text_);
    if (bad == std::string_view::npos) return;
    int line = 1;
    for (size_t i = 0; i < bad; ++i) line += text_[i] == '\n';
    LineCursor(std::string_view(), file_, line).fail("invalid UTF-8");
  }
  void split_lines() {
    size_t start = 0;
    while (start <= text_.size()) {
      size_t nl = text_.find('\n', start);
      if (nl == std::string_view::npos) {
        if (start < text_.size()) lines_.push_back(text_.substr(start));
        break;
      }
      lines_.push_back(text_.substr(start, nl - start));
      start = nl + 1;
    }
    for (auto& l : lines_)
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  }
  // Advances to the next line; false at the end of the file.
  bool next_line() {
    if (line_index_ + 1 >= int(lines_.size())) return false;
    ++line_index_;
    return true;
  }
  int line_no() const { return line_index_ + 1; }
  LineCursor cursor() const { return LineCursor(lines_[size_t(line_index_)], file_, line_no()); }
  [[noreturn]] void fail_at(int line, const std::string& what) const {
    LineCursor(std::string_view(), file_, line).fail(what);
  }
  [[noreturn]] void fail_eof(const std::string& what) const { fail_at(std::max(1, int(lines_.size())), what); }

  // `.name` at the cursor (consumed), or "" when the line is no directive.
  static std::string directive(LineCursor& c) {
    if (c.peek() != '.') return {};
    c.eat('.');
    return "." + std::string(c.identifier());
  }

  // Runs a CodeBuilder call, turning its errors into "FILE:LINE: ..." ones.
  template <class F>
  auto at_line(int line, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::SyntaxError) throw;
      fail_at(line, e.message());
    }
  }

  // ----- code references (`@name` constants) -------------------------------
  // One Code object per function, created on first mention: a reference may
  // precede the .func it names, and CodeBuilder fills the same object later.
  struct CodeSlot {
    runtime::Ref<Code> code = runtime::make_ref<Code>();
    int first_ref_line = 0;
    bool defined = false;
  };
  CodeSlot& slot(const std::string& qualname) {
    auto [it, inserted] = slots_.try_emplace(qualname);
    if (inserted) slot_order_.push_back(qualname);
    return it->second;
  }
  Value code_ref(LineCursor& c, std::string_view name) {
    CodeSlot& s = slot(std::string(name));
    if (!s.defined && s.first_ref_line == 0) s.first_ref_line = c.line();
    return Value::object(Kind::Code, s.code);
  }
  void check_code_refs() const {
    for (const auto& name : slot_order_) {
      const CodeSlot& s = slots_.at(name);
      if (!s.defined) fail_at(s.first_ref_line, "'@" + name + "' does not name a .func in this file");
    }
  }

  // ----- .func -------------------------------------------------------------
  struct LabelInfo {
    CodeBuilder::Label label;
    int first_use_line = 0;
    bool bound = false;
  };

  // Parses `.func NAME(PARAMS)` ... `.end` (the cursor is past `.func`).
  runtime::Ref<FunctionObj> function(LineCursor& c, const ClassObj* cls) {
    std::string name(c.identifier());
    if (name.empty()) c.fail("expected a function name after .func, got " + c.next_token_text());
    std::string qualname = cls ? cls->name + "." + name : name;
    if (cls) {
      if (!method_names_.insert(name).second) c.fail("duplicate method '" + name + "' in class '" + cls->name + "'");
    } else {
      claim_global(c, name, "function");
    }
    CodeSlot& s = slot(qualname);
    s.defined = true;
    CodeBuilder b(name, file_, s.code);
    b.set_qualname(qualname);
    const int header_line = c.line();
    params(c, b);
    c.expect_end(".func header");

    std::map<std::string, LabelInfo> labels;
    bool explicit_lines = false;
    bool seen_instruction = false;
    for (;;) {
      if (!next_line()) fail_eof("unexpected end of file inside function '" + qualname + "' (missing .end)");
      LineCursor lc = cursor();
      if (lc.at_end()) continue;
      std::string d = directive(lc);
      if (d == ".end") {
        lc.expect_end(".end");
        break;
      }
      if (d == ".except") {
        except_row(lc, b, labels);
        continue;
      }
      if (!d.empty()) {
        body_directive(lc, d, b, qualname, explicit_lines, seen_instruction);
        continue;
      }
      std::string_view word = lc.identifier();
      if (word.empty()) lc.fail("expected an instruction or label, got " + lc.next_token_text());
      if (lc.eat(':')) {
        LabelInfo& l = label(labels, b, std::string(word), lc.line());
        if (l.bound) lc.fail("label '" + std::string(word) + "' defined twice in function '" + qualname + "'");
        l.bound = true;
        b.bind(l.label);
        if (lc.at_end()) continue;
        word = lc.identifier();  // an instruction may follow on the label's line
        if (word.empty()) lc.fail("expected an instruction after the label, got " + lc.next_token_text());
      }
      if (!explicit_lines) b.set_line(lc.line());
      instruction(lc, word, b, labels, qualname);
      seen_instruction = true;
    }
    // The first jump (in file order) to a label that was never defined.
    const std::pair<const std::string, LabelInfo>* missing = nullptr;
    for (const auto& entry : labels)
      if (!entry.second.bound && (!missing || entry.second.first_use_line < missing->second.first_use_line))
        missing = &entry;
    if (missing)
      fail_at(missing->second.first_use_line, "unknown label '" + missing->first + "' in function '" + qualname + "'");

    const int end_line = line_no();
    runtime::Ref<Code> code = at_line(end_line, [&] { return b.finish(/*verify=*/false); });
    // A method's one possible free variable is CPython's `__class__`, the
    // cell the class fills with itself (what zero-argument super() reads).
    if (cls && !(code->freevars.empty() || (code->freevars.size() == 1 && code->freevars[0] == "__class__")))
      fail_at(header_line, "method '" + qualname + "' cannot have free variables other than __class__");
    runtime::Ref<FunctionObj> fn = b.make_function(prog_.globals);
    if (cls && !code->freevars.empty()) {
      auto cell = runtime::make_ref<runtime::CellObj>();
      cell->v = Value::object(Kind::Class, const_cast<ClassObj*>(cls));  // the class being built
      fn->closure = {cell};
      class_cells_->push_back(cell);
    }
    // A function with free variables only gets a closure from MAKE_FUNCTION.
    if (!cls && code->freevars.empty()) prog_.globals->map.set(name, Value::object(Kind::Function, fn));
    return fn;
  }

  // `.except START END TARGET DEPTH [lasti]`: an exception-table row
  // (labels; END may be a label after the last instruction).
  void except_row(LineCursor& c, CodeBuilder& b, std::map<std::string, LabelInfo>& labels) {
    CodeBuilder::Label l[3];
    const char* what[] = {"the range's start label", "the range's end label", "the handler label"};
    for (int i = 0; i < 3; ++i) {
      std::string id(c.identifier());
      if (id.empty()) c.fail(std::string("expected ") + what[i] + " in .except, got " + c.next_token_text());
      l[i] = label(labels, b, id, c.line()).label;
    }
    int64_t depth = c.integer("a stack depth");
    if (depth < 0 || depth > INT32_MAX) c.fail("stack depth " + std::to_string(depth) + " out of range");
    bool lasti = false;
    if (!c.at_end()) {
      std::string word(c.identifier());
      if (word != "lasti") c.fail("expected 'lasti' or the end of the line in .except, got '" + word + "'");
      lasti = true;
    }
    c.expect_end(".except");
    b.handler(l[0], l[1], l[2], int32_t(depth), lasti);
  }

  // PARAMS as in Python: `x, y=1, *args, k=2.0, j, **kw`, `x, *, k` or `a, /, b`.
  void params(LineCursor& c, CodeBuilder& b) {
    if (!c.eat('(')) c.fail("expected '(' after the function name, got " + c.next_token_text());
    if (c.eat(')')) return;
    // The builder enforces the order rules (defaults, *args, **kwargs last).
    bool star = false, bare_star = false;
    for (;;) {
      if (c.eat('/')) {
        at_line(c.line(), [&] { b.posonly_marker(); });
      } else if (c.eat('*')) {
        if (c.eat('*')) {
          std::string name(c.identifier());
          if (name.empty()) c.fail("expected a parameter name after '**', got " + c.next_token_text());
          at_line(c.line(), [&] { b.var_kw(name); });
        } else {
          if (star) c.fail("a second '*' in the parameter list");
          star = true;
          std::string name(c.identifier());
          if (name.empty()) {
            bare_star = true;
          } else {
            at_line(c.line(), [&] { b.var_args(name); });
          }
        }
      } else {
        std::string name(c.identifier());
        if (name.empty()) c.fail("expected a parameter name, got " + c.next_token_text());
        Value def = Value::null();
        if (c.eat('=')) def = kbc::parse_constant(c, nullptr);
        if (star) {
          bare_star = false;
          at_line(c.line(), [&] { b.kwonly_arg(name, def); });
        } else {
          at_line(c.line(), [&] { b.arg(name, def); });
        }
      }
      if (c.eat(')')) break;
      if (!c.eat(',')) {
        if (c.at_end()) c.fail("unterminated parameter list (missing ')')");
        c.fail("expected ',' or ')' in the parameter list, got " + c.next_token_text());
      }
    }
    if (bare_star) c.fail("a bare '*' must be followed by keyword-only parameters");
  }

  void body_directive(LineCursor& c, const std::string& d, CodeBuilder& b, const std::string& qualname,
                      bool& explicit_lines, bool seen_instruction) {
    auto names = [&](auto&& add) {
      if (c.at_end()) c.fail(d + " needs at least one name");
      while (!c.at_end()) {
        std::string name(c.identifier());
        if (name.empty()) c.fail("expected a name in " + d + ", got " + c.next_token_text());
        c.eat(',');  // commas between names are optional
        add(name);
      }
    };
    auto line_number = [&] {
      int64_t n = c.integer("a line number");
      if (n < 0 || n > INT32_MAX) c.fail("line number " + std::to_string(n) + " out of range");
      c.expect_end(d);
      return int(n);
    };
    if (d == ".locals") {
      names([&](const std::string& name) {
        if (b.find_local(name)) c.fail("duplicate local '" + name + "' in function '" + qualname + "'");
        b.local(name);
      });
    } else if (d == ".cellvars") {
      names([&](const std::string& name) { at_line(c.line(), [&] { b.cellvar(name); }); });
    } else if (d == ".freevars") {
      names([&](const std::string& name) { at_line(c.line(), [&] { b.freevar(name); }); });
    } else if (d == ".line") {
      b.set_line(line_number());
      explicit_lines = true;
    } else if (d == ".firstline") {
      if (seen_instruction) c.fail(".firstline must come before the first instruction");
      b.set_first_line(line_number());
    } else if (d == ".generator") {
      if (seen_instruction) c.fail(".generator must come before the first instruction");
      c.expect_end(d);
      b.set_generator();
    } else if (d == ".qualname") {
      // The name messages and tracebacks show (a Python function's
      // co_qualname, `f.<locals>.g`), when it is not the KBC name.
      if (seen_instruction) c.fail(".qualname must come before the first instruction");
      std::string q = c.rest();
      if (q.empty() || q.find(' ') != std::string::npos) c.fail(".qualname needs one name without spaces");
      b.set_qualname(q);
    } else if (d == ".func" || d == ".class" || d == ".endclass") {
      c.fail("'" + d + "' inside function '" + qualname + "' (missing .end?)");
    } else {
      c.fail("unknown directive '" + d + "' in function '" + qualname + "'");
    }
  }

  LabelInfo& label(std::map<std::string, LabelInfo>& labels, CodeBuilder& b, const std::string& name, int line) {
    auto it = labels.find(name);
    if (it == labels.end()) it = labels.emplace(name, LabelInfo{b.new_label(), line, false}).first;
    return it->second;
  }

  // OPNAME [operand [operand]] — operands spelled by the kinds in opcodes.def.
  void instruction(LineCursor& c, std::string_view word, CodeBuilder& b, std::map<std::string, LabelInfo>& labels,
                   const std::string& qualname) {
    auto op = runtime::opcode_from_name(word);
    if (!op) c.fail("unknown opcode '" + kbc::abbreviate(word) + "'");
    const auto& info = runtime::opcode_info(*op);
    std::string opname = info.name;
    int32_t a = 0, b_operand = 0;
    std::optional<CodeBuilder::Label> target;
    if (info.a == OperandKind::BinOp && info.b == OperandKind::Flags) {
      // BINARY_OP's flag is spelled as the augmented operator: `+=` is b = 1.
      if (c.at_end()) c.fail("missing operand for " + opname + " (expected a binary operator)");
      std::string sym = c.rest();
      if (sym.size() > 1 && sym.back() == '=' && runtime::binop_from_symbol(sym.substr(0, sym.size() - 1))) {
        a = int32_t(*runtime::binop_from_symbol(sym.substr(0, sym.size() - 1)));
        b_operand = 1;
      } else if (auto bop = runtime::binop_from_symbol(sym)) {
        a = int32_t(*bop);
      } else {
        c.fail("unknown binary operator '" + kbc::abbreviate(sym) + "'");
      }
    } else {
      auto operand = [&](OperandKind kind, bool last) -> int32_t {
        if (kind == OperandKind::None) return 0;
        if (c.at_end()) c.fail("missing operand for " + opname + " (expected " + operand_expectation(kind) + ")");
        return parse_operand(c, kind, last, b, labels, qualname, opname, target);
      };
      a = operand(info.a, info.b == OperandKind::None);
      b_operand = operand(info.b, true);
    }
    if (!c.at_end()) c.fail("too many operands for " + opname + ": unexpected " + c.next_token_text());
    if (target) b.emit(*op, *target, b_operand);
    else b.emit(*op, a, b_operand);
  }

  int32_t parse_operand(LineCursor& c, OperandKind kind, bool last, CodeBuilder& b,
                        std::map<std::string, LabelInfo>& labels, const std::string& qualname,
                        const std::string& opname, std::optional<CodeBuilder::Label>& target) {
    auto ident = [&]() {
      std::string id(c.identifier());
      if (id.empty())
        c.fail("expected " + std::string(operand_expectation(kind)) + " for " + opname + ", got " + c.next_token_text());
      return id;
    };
    // Operator symbols may contain a space (`is not`), so the last operand
    // takes the rest of the line.
    auto symbol = [&]() {
      if (last) return c.rest();
      return std::string(c.word());
    };
    switch (kind) {
      case OperandKind::Const: {
        kbc::CodeResolver resolve = [this](LineCursor& lc, std::string_view n) { return code_ref(lc, n); };
        return b.constant(kbc::parse_constant(c, resolve));
      }
      case OperandKind::Local: {
        std::string id = ident();
        auto i = b.find_local(id);
        if (!i) c.fail("local '" + id + "' is not declared in function '" + qualname + "'");
        return *i;
      }
      case OperandKind::Name: return b.name(ident());
      case OperandKind::Deref: {
        std::string id = ident();
        auto i = b.find_deref(id);
        if (!i) c.fail("'" + id + "' is not a cell or free variable of function '" + qualname + "'");
        return *i;
      }
      case OperandKind::Jump: {
        std::string id = ident();
        target = label(labels, b, id, c.line()).label;
        return 0;
      }
      case OperandKind::Count:
      case OperandKind::Flags: {
        const char* what = kind == OperandKind::Count ? "count" : "flags";
        int64_t v = c.integer(what);
        if (v < INT32_MIN || v > INT32_MAX) c.fail(std::string(what) + " " + std::to_string(v) + " out of range");
        return int32_t(v);
      }
      case OperandKind::BinOp: {
        std::string s = symbol();
        if (auto o = runtime::binop_from_symbol(s)) return int32_t(*o);
        c.fail("unknown binary operator '" + kbc::abbreviate(s) + "'");
      }
      case OperandKind::CmpOp: {
        std::string s = symbol();
        if (auto o = runtime::cmpop_from_symbol(s)) return int32_t(*o);
        c.fail("unknown comparison operator '" + kbc::abbreviate(s) + "'");
      }
      case OperandKind::UnOp: {
        std::string s = symbol();
        if (auto o = runtime::unop_from_symbol(s)) return int32_t(*o);
        c.fail("unknown unary operator '" + kbc::abbreviate(s) + "'");
      }
      case OperandKind::None: break;
    }
    return 0;
  }

  // ----- .class ------------------------------------------------------------
  void claim_global(LineCursor& c, const std::string& name, const char* what) {
    if (!global_names_.insert(name).second)
      c.fail("duplicate " + std::string(what) + " '" + name + "' (the name is already defined in this file)");
  }

  // `.class NAME[(BASE)]` then methods, then `.endclass`.
  ProgramItem class_(LineCursor& c) {
    std::string name(c.identifier());
    if (name.empty()) c.fail("expected a class name after .class, got " + c.next_token_text());
    claim_global(c, name, "class");
    runtime::Ref<ClassObj> base;
    if (c.eat('(')) {
      std::string base_name(c.identifier());
      if (base_name.empty()) c.fail("expected a base class name, got " + c.next_token_text());
      if (!c.eat(')')) c.fail("expected ')' after the base class, got " + c.next_token_text());
      // Classes of this file first (defined above), then the built-in ones.
      if (auto it = classes_.find(base_name); it != classes_.end()) base = it->second;
      else if (auto builtin = builtin_class_named(base_name)) base = *builtin;
      else c.fail("unknown base class '" + base_name + "'");
    }
    c.expect_end(".class header");
    ProgramItem item;
    item.cls = runtime::make_class(name, base);
    method_names_.clear();
    // A decorator of the next method: `.property` makes it a property's
    // getter (Python's @property: the class attribute is Property(fget),
    // read by calling it), `.staticmethod` / `.classmethod` wrap it as
    // Python's decorators do (runtime/semantics/descriptors.h).
    std::string decorator;
    for (;;) {
      if (!next_line()) fail_eof("unexpected end of file inside class '" + name + "' (missing .endclass)");
      LineCursor lc = cursor();
      if (lc.at_end()) continue;
      std::string d = directive(lc);
      if (d == ".property" || d == ".staticmethod" || d == ".classmethod") {
        if (!decorator.empty()) lc.fail("expected .func after " + decorator + " in class '" + name + "', got '" + d + "'");
        lc.expect_end(d.c_str());
        decorator = d;
        continue;
      }
      if (!decorator.empty() && d != ".func")
        lc.fail("expected .func after " + decorator + " in class '" + name + "', got " +
                (d.empty() ? lc.next_token_text() : "'" + d + "'"));
      if (d == ".endclass") {
        lc.expect_end(".endclass");
        break;
      }
      if (d != ".func") {
        if (d == ".end") lc.fail("'.end' without a matching .func in class '" + name + "'");
        lc.fail("expected .func or .endclass in class '" + name + "', got " +
                (d.empty() ? lc.next_token_text() : "'" + d + "'"));
      }
      runtime::Ref<FunctionObj> m = function(lc, item.cls.get());
      Value fn = Value::object(Kind::Function, m);
      item.cls->methods.set(m->code->name, decorator == ".property"       ? runtime::make_property(fn)
                                           : decorator == ".staticmethod" ? runtime::make_staticmethod(fn)
                                           : decorator == ".classmethod"  ? runtime::make_classmethod(fn)
                                                                          : fn);
      decorator.clear();
      item.methods.push_back(std::move(m));
    }
    classes_.emplace(name, item.cls);
    prog_.globals->map.set(name, Value::object(Kind::Class, item.cls));
    return item;
  }

  std::string_view text_;
  std::string file_;
  std::vector<std::string_view> lines_;
  int line_index_ = -1;
  Program prog_;
  std::shared_ptr<ProgramNamespace> namespace_;  // prog_.namespace_owner
  std::unordered_map<std::string, CodeSlot> slots_;
  std::vector<std::string> slot_order_;
  std::unordered_set<std::string> global_names_;
  std::unordered_set<std::string> method_names_;  // of the class being read
  std::unordered_map<std::string, runtime::Ref<ClassObj>> classes_;
  std::shared_ptr<std::vector<runtime::Ref<runtime::CellObj>>> class_cells_ =
      std::make_shared<std::vector<runtime::Ref<runtime::CellObj>>>();
};

}  // namespace

Program assemble(std::string_view text, std::string filename) { return Assembler(text, std::move(filename)).run(); }

Program assemble_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::RuntimeError, "cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  return assemble(text, path);
}

}  // namespace kiln::interpreter
