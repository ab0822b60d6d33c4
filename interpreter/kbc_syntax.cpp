#include "interpreter/kbc_syntax.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/semantics/builtins.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter::kbc {

using runtime::Kind;
using runtime::TupleObj;
using runtime::Value;

namespace {

bool is_ident_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
bool is_comment_start(char c) { return c == '#' || c == ';'; }

// Length of the well-formed UTF-8 sequence starting at s[i], or 0.
// (Unicode 15, table 3-7: the second byte's range depends on the first.)
size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) { n = 3; lo = 0xA0; }
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) { n = 3; hi = 0x9F; }  // no UTF-16 surrogates
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) { n = 4; lo = 0x90; }
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) { n = 4; hi = 0x8F; }  // nothing above U+10FFFF
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else {  // only U+0080..U+00FF arrive here (\xNN)
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string hex_byte(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  return buf;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Shared by format_constant and constant_key: `code_text` spells a Code
// constant; returns false for a kind that has no literal.
bool render(const Value& v, const std::function<std::string(const runtime::Code&)>& code_text,
            std::string& out) {
  switch (v.kind()) {
    case Kind::None: out += "None"; return true;
    case Kind::Bool: out += v.as_bool() ? "True" : "False"; return true;
    case Kind::Int: out += std::to_string(v.as_int()); return true;
    case Kind::Float: out += format_float(v.as_float()); return true;
    case Kind::Str: out += quote_string(v.as_str()); return true;
    case Kind::Code: out += '@'; out += code_text(*v.as<runtime::Code>()); return true;
    case Kind::Builtin:  // Python's `...`: the one builtin that is a literal
      if (!runtime::is_ellipsis(v)) return false;
      out += "Ellipsis";
      return true;
    case Kind::Tuple: {
      const auto& items = v.as<TupleObj>()->items;
      out += '(';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        if (!render(items[i], code_text, out)) return false;
      }
      if (items.size() == 1) out += ',';
      out += ')';
      return true;
    }
    case Kind::FrozenSet: {
      // frozenset() or frozenset({a, b}), items in the set's table order,
      // when adding them in that order gives this very table; else the
      // table itself: frozenset[N]({i: a, j: dummy, ...}).
      auto* s = v.as<runtime::SetObj>();
      const std::vector<Value> items = s->items();
      Value rebuilt = runtime::make_set(true);
      for (const Value& x : items) rebuilt.as<runtime::SetObj>()->add(x);
      if (runtime::sets_same_layout(rebuilt, v)) {
        out += "frozenset(";
        if (!items.empty()) out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += ", ";
          if (!render(items[i], code_text, out)) return false;
        }
        if (!items.empty()) out += '}';
        out += ')';
        return true;
      }
      out += "frozenset[" + std::to_string(s->capacity()) + "]({";
      bool first = true;
      for (int64_t i = 0; i < s->capacity(); ++i) {
        const runtime::SetObj::Entry& e = s->table()[i];
        if (!e.active() && !e.dummy()) continue;
        out += (first ? "" : ", ") + std::to_string(i) + ": ";
        first = false;
        if (e.dummy())
          out += "dummy";
        else if (!render(e.key, code_text, out))
          return false;
      }
      out += "})";
      return true;
    }
    default: return false;
  }
}

}  // namespace

bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s)
    if (!is_ident_char(c)) return false;
  return true;
}

size_t find_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string format_float(double d) {
  if (std::isnan(d)) return std::signbit(d) ? "-nan" : "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // The shortest round-tripping digits (to_chars), laid out the way
  // Python's float repr does: positional for exponents in [-4, 16),
  // scientific otherwise, always with a '.' or an exponent.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, size_t(end - buf));  // "-1.2345e+05"
  std::string out;
  if (sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  int exp = std::atoi(std::string(sci.substr(e + 1)).c_str());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return out + "0." + std::string(size_t(-exp - 1), '0') + digits;
    if (digits.size() <= size_t(exp) + 1) return out + digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    return out + digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

std::string quote_string(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = utf8_sequence_length(s, i);
      if (n == 0) {
        out += hex_byte(c);
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += hex_byte(c);
        else out += char(c);
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string format_constant(const Value& v, const CodeNamer& name_of_code) {
  std::string out;
  if (!render(v, name_of_code, out)) return "<" + std::string(runtime::kind_name(v.kind())) + " constant>";
  return out;
}

std::string constant_key(const Value& v) {
  std::string out;
  auto by_identity = [](const runtime::Code& c) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&c));
    return std::string(buf);
  };
  if (!render(v, by_identity, out)) return {};
  return out;
}

std::string abbreviate(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "...";
}

// ----- LineCursor --------------------------------------------------------

void LineCursor::fail(const std::string& what) const {
  throw_error(ErrorKind::SyntaxError, file_ + ":" + std::to_string(line_) + ": " + what);
}

void LineCursor::skip_space() {
  while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
}

bool LineCursor::at_end() {
  skip_space();
  return pos_ >= s_.size() || is_comment_start(s_[pos_]);
}

bool LineCursor::eat(char c) {
  skip_space();
  if (pos_ < s_.size() && s_[pos_] == c) {
    ++pos_;
    return true;
  }
  return false;
}

char LineCursor::peek() {
  skip_space();
  return pos_ < s_.size() ? s_[pos_] : '\0';
}

std::string_view LineCursor::identifier() {
  skip_space();
  if (pos_ >= s_.size() || !is_ident_start(s_[pos_])) return {};
  size_t start = pos_;
  while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
  return s_.substr(start, pos_ - start);
}

int64_t LineCursor::integer(const char* what) {
  skip_space();
  size_t start = pos_;
  if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
  size_t digits = pos_;
  while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
  std::string_view text = s_.substr(start, pos_ - start);
  if (pos_ == digits || !is_digit(s_[digits])) {
    pos_ = start;
    fail(std::string("expected ") + what + ", got " + next_token_text());
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range)
    fail(std::string(what) + " " + abbreviate(text) + " out of range");
  if (ec != std::errc() || end != text.data() + text.size())
    fail("malformed " + std::string(what) + " '" + abbreviate(text) + "'");
  return v;
}

std::string_view LineCursor::word() {
  skip_space();
  size_t start = pos_;
  while (pos_ < s_.size() && !is_space(s_[pos_]) && !is_comment_start(s_[pos_])) ++pos_;
  return s_.substr(start, pos_ - start);
}

std::string LineCursor::rest() {
  skip_space();
  size_t end = pos_;
  while (end < s_.size() && !is_comment_start(s_[end])) ++end;
  std::string out;
  bool pending_space = false;
  for (size_t i = pos_; i < end; ++i) {
    if (is_space(s_[i])) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += s_[i];
  }
  pos_ = end;
  return out;
}

std::string LineCursor::next_token_text() {
  skip_space();
  if (pos_ >= s_.size()) return "end of line";
  size_t end = pos_;
  while (end < s_.size() && !is_space(s_[end])) ++end;
  return "'" + abbreviate(s_.substr(pos_, end - pos_)) + "'";
}

void LineCursor::expect_end(const std::string& context) {
  if (!at_end()) fail("unexpected " + next_token_text() + " after " + context);
}

// ----- literals --------------------------------------------------------------

// A class only so that it can be the cursor's friend.
class LiteralParser {
 public:
  LiteralParser(LineCursor& c, const CodeResolver& resolve) : c_(c), resolve_(resolve) {}

  Value constant(int depth) {
    char ch = c_.peek();
    if (ch == '(') return tuple(depth);
    if (ch == '"') return string();
    if (ch == '@') return code_ref();
    if (ch == '-' || ch == '.' || is_digit(ch)) return number();
    size_t start = c_.pos_;
    std::string_view id = c_.identifier();
    if (id == "None") return Value::none();
    if (id == "True") return Value::boolean(true);
    if (id == "False") return Value::boolean(false);
    if (id == "inf") return Value::floating(HUGE_VAL);
    if (id == "nan") return Value::floating(std::nan(""));
    if (id == "frozenset") return frozenset(depth);
    if (id == "Ellipsis") return runtime::ellipsis();
    c_.pos_ = start;
    if (ch == '\0') c_.fail("missing constant");
    c_.fail("expected a constant, got " + c_.next_token_text());
  }

 private:
  Value tuple(int depth) {
    if (depth >= kMaxTupleDepth)
      c_.fail("constant tuple nested deeper than " + std::to_string(kMaxTupleDepth) + " levels");
    c_.eat('(');
    std::vector<Value> items;
    bool trailing_comma = false;
    for (;;) {
      if (c_.eat(')')) break;
      if (c_.at_end()) c_.fail("unterminated tuple constant (missing ')')");
      items.push_back(constant(depth + 1));
      trailing_comma = c_.eat(',');
      if (trailing_comma) continue;
      if (c_.eat(')')) break;
      if (c_.at_end()) c_.fail("unterminated tuple constant (missing ')')");
      c_.fail("expected ',' or ')' in tuple constant, got " + c_.next_token_text());
    }
    // `(x)` is not a tuple in Python; insisting on `(x,)` keeps one spelling.
    if (items.size() == 1 && !trailing_comma) c_.fail("a one-element tuple constant is written (x,)");
    return runtime::make_tuple(std::move(items));
  }

  // frozenset() or frozenset({c1, c2, ...}): the constant Python's compiler
  // makes of `x in {"a", "b"}`, its items added in the order written. An
  // unhashable item is refused here. frozenset[N]({i: c, j: dummy, ...}):
  // the frozenset whose table has N entries, c at entry i, a deleted
  // entry at j (the table decides the order: runtime/value/value.h SetObj).
  Value frozenset(int depth) {
    if (depth >= kMaxTupleDepth)
      c_.fail("constant tuple nested deeper than " + std::to_string(kMaxTupleDepth) + " levels");
    if (c_.eat('[')) return frozenset_table(depth);
    if (!c_.eat('(')) c_.fail("expected '(' after frozenset, got " + c_.next_token_text());
    Value set = runtime::make_set(true);
    if (c_.eat(')')) return set;
    if (!c_.eat('{')) c_.fail("expected '{' or ')' in a frozenset constant, got " + c_.next_token_text());
    for (;;) {
      if (c_.at_end()) c_.fail("unterminated frozenset constant (missing '}')");
      Value item = constant(depth + 1);
      try {
        set.as<runtime::SetObj>()->add(item);
      } catch (const Error& e) {
        c_.fail(std::string("frozenset constant: ") + e.what());
      }
      if (c_.eat(',')) continue;
      if (c_.eat('}')) break;
      if (c_.at_end()) c_.fail("unterminated frozenset constant (missing '}')");
      c_.fail("expected ',' or '}' in a frozenset constant, got " + c_.next_token_text());
    }
    if (!c_.eat(')')) c_.fail("expected ')' after a frozenset's items, got " + c_.next_token_text());
    return set;
  }

  Value frozenset_table(int depth) {
    const Value n = constant(depth + 1);
    if (!n.is(Kind::Int) || n.as_int() < runtime::SetObj::kMinSize || n.as_int() > (int64_t(1) << 30) ||
        (n.as_int() & (n.as_int() - 1)) != 0)
      c_.fail("frozenset[N]: N must be a power of two from 8, got " + runtime::repr(n));
    const int64_t size = n.as_int();
    if (!c_.eat(']')) c_.fail("expected ']' after frozenset[N, got " + c_.next_token_text());
    if (!c_.eat('(') || !c_.eat('{')) c_.fail("expected '({' after frozenset[N], got " + c_.next_token_text());
    std::vector<runtime::SetObj::Entry> table(static_cast<size_t>(size));
    std::vector<bool> taken(static_cast<size_t>(size));
    int64_t filled = 0;
    while (!c_.eat('}')) {
      if (c_.at_end()) c_.fail("unterminated frozenset constant (missing '}')");
      const Value slot = constant(depth + 1);
      if (!slot.is(Kind::Int) || slot.as_int() < 0 || slot.as_int() >= size)
        c_.fail("frozenset[" + std::to_string(size) + "]: entry " + runtime::repr(slot) + " is not in 0.." +
                std::to_string(size - 1));
      const auto i = static_cast<size_t>(slot.as_int());
      if (taken[i]) c_.fail("frozenset[" + std::to_string(size) + "]: entry " + std::to_string(i) + " given twice");
      taken[i] = true;
      ++filled;
      if (!c_.eat(':')) c_.fail("expected ':' after a frozenset entry's index, got " + c_.next_token_text());
      const size_t at = c_.pos_;
      if (c_.identifier() == "dummy") {
        table[i].hash = -1;
      } else {
        c_.pos_ = at;
        table[i].key = constant(depth + 1);
        try {
          table[i].hash = int64_t(runtime::value_hash(table[i].key));
        } catch (const Error& e) {
          c_.fail(std::string("frozenset constant: ") + e.what());
        }
      }
      if (c_.eat(',')) continue;
      if (c_.eat('}')) break;
      c_.fail("expected ',' or '}' in a frozenset constant, got " + c_.next_token_text());
    }
    if (!c_.eat(')')) c_.fail("expected ')' after a frozenset's items, got " + c_.next_token_text());
    if (filled >= size) c_.fail("frozenset[" + std::to_string(size) + "]: no entry left unused");
    Value set = runtime::make_set(true);
    auto* s = set.as<runtime::SetObj>();
    std::vector<Value> keys;
    for (const auto& e : table) keys.push_back(e.key);
    s->assign_table(std::move(table), 0);
    // Every item where CPython's probing finds it (no duplicates either).
    for (size_t i = 0; i < keys.size(); ++i)
      if (!keys[i].is_null() && s->find_slot(keys[i], int64_t(runtime::value_hash(keys[i]))) != int64_t(i))
        c_.fail("frozenset[" + std::to_string(size) + "]: " + runtime::repr(keys[i]) + " at entry " +
                std::to_string(i) + " is not where CPython's set would look for it");
    return set;
  }

  Value string() {
    c_.eat('"');
    std::string out;
    const std::string_view s = c_.s_;
    size_t& p = c_.pos_;
    for (;;) {
      if (p >= s.size()) c_.fail("unterminated string constant");
      char ch = s[p++];
      if (ch == '"') break;
      if (ch != '\\') {
        out += ch;
        continue;
      }
      if (p >= s.size()) c_.fail("unterminated string constant");
      char e = s[p++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'x': {
          int hi = p < s.size() ? hex_value(s[p]) : -1;
          int lo = p + 1 < s.size() ? hex_value(s[p + 1]) : -1;
          if (hi < 0 || lo < 0) c_.fail("\\x in a string constant needs two hex digits");
          p += 2;
          append_utf8(out, uint32_t(hi * 16 + lo));
          break;
        }
        default:
          c_.fail(std::string("unknown escape '\\") + e + "' in string constant");
      }
    }
    return Value::str(out);
  }

  Value code_ref() {
    c_.eat('@');
    // No space allowed inside `@name` / `@Class.method`.
    if (c_.pos_ >= c_.s_.size() || !is_ident_start(c_.s_[c_.pos_]))
      c_.fail("expected a function name after '@'");
    size_t start = c_.pos_;
    c_.identifier();
    if (c_.pos_ < c_.s_.size() && c_.s_[c_.pos_] == '.') {
      ++c_.pos_;
      if (c_.pos_ >= c_.s_.size() || !is_ident_start(c_.s_[c_.pos_]))
        c_.fail("expected a method name after '.' in a code reference");
      c_.identifier();
    }
    std::string_view name = c_.s_.substr(start, c_.pos_ - start);
    if (!resolve_) c_.fail("a code reference '@" + std::string(name) + "' is not allowed here");
    return resolve_(c_, name);
  }

  Value number() {
    const std::string_view s = c_.s_;
    size_t& p = c_.pos_;
    size_t start = p;
    bool negative = s[p] == '-';
    if (negative) {
      ++p;
      size_t id_start = p;
      std::string_view id = c_.identifier();
      if (id == "inf") return Value::floating(-HUGE_VAL);
      if (id == "nan") return Value::floating(-std::nan(""));
      p = id_start;
    }
    // Greedy scan of everything that could belong to a number, so that
    // `12abc` is one malformed token rather than 12 followed by junk.
    while (p < s.size()) {
      char ch = s[p];
      bool sign_in_exponent = (ch == '+' || ch == '-') && p > start && (s[p - 1] == 'e' || s[p - 1] == 'E');
      if (is_ident_char(ch) || ch == '.' || sign_in_exponent) ++p;
      else break;
    }
    std::string_view text = s.substr(start, p - start);
    const char* first = text.data();
    const char* last = first + text.size();
    if (text.find_first_of(".eE") != std::string_view::npos) {
      double d = 0;
      auto [end, ec] = std::from_chars(first, last, d);
      if (ec == std::errc::result_out_of_range) c_.fail("float constant " + abbreviate(text) + " out of range");
      if (ec != std::errc() || end != last) c_.fail("malformed number '" + abbreviate(text) + "'");
      return Value::floating(d);
    }
    int64_t i = 0;
    auto [end, ec] = std::from_chars(first, last, i);
    if (ec == std::errc::result_out_of_range) c_.fail("integer constant " + abbreviate(text) + " out of range");
    if (ec != std::errc() || end != last) c_.fail("malformed number '" + abbreviate(text) + "'");
    return Value::integer(i);
  }

  LineCursor& c_;
  const CodeResolver& resolve_;
};

Value parse_constant(LineCursor& c, const CodeResolver& resolve_code) {
  return LiteralParser(c, resolve_code).constant(0);
}

}  // namespace kiln::interpreter::kbc
