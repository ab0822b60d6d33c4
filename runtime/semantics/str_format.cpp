#include "runtime/semantics/str_format.h"

#include <cmath>

#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// ----------------------------------------------------------- str.format --

struct FormatState {
  CallContext& ctx;
  const std::vector<Value>& args;
  const Value& kwargs;
  int auto_index = 0;  // -1 once a field named its index
  bool manual = false;
};

Value lookup_field(FormatState& st, std::string_view name) {
  // arg_name ("" | digits | identifier), then .attr and [key] parts
  size_t end = 0;
  while (end < name.size() && name[end] != '.' && name[end] != '[') ++end;
  std::string_view first = name.substr(0, end);
  Value v;
  if (first.empty()) {
    if (st.manual) throw_error(ErrorKind::ValueError, "cannot switch from manual field specification to automatic field numbering");
    const int i = st.auto_index++;
    if (size_t(i) >= st.args.size())
      throw_error(ErrorKind::IndexError, "Replacement index " + std::to_string(i) + " out of range for positional args tuple");
    v = st.args[size_t(i)];
  } else if (std::all_of(first.begin(), first.end(), is_digit)) {
    if (st.auto_index > 0) throw_error(ErrorKind::ValueError, "cannot switch from automatic field numbering to manual field specification");
    st.manual = true;
    const size_t i = size_t(std::stoll(std::string(first)));
    if (i >= st.args.size())
      throw_error(ErrorKind::IndexError, "Replacement index " + std::to_string(i) + " out of range for positional args tuple");
    v = st.args[i];
  } else {
    const Value key = Value::str(first);
    const Value* found = st.kwargs.is(Kind::Dict) ? st.kwargs.as<DictObj>()->find(key) : nullptr;
    if (!found) throw_key_error(key);
    v = *found;
  }
  while (end < name.size()) {
    if (name[end] == '.') {
      size_t e = end + 1;
      while (e < name.size() && name[e] != '.' && name[e] != '[') ++e;
      if (e == end + 1) throw_error(ErrorKind::ValueError, "Empty attribute in format string");
      v = get_attr(st.ctx, v, intern(name.substr(end + 1, e - end - 1)).get());
      end = e;
    } else {
      const size_t close = name.find(']', end);
      if (close == std::string_view::npos) throw_error(ErrorKind::ValueError, "Missing ']' in format string");
      std::string_view k = name.substr(end + 1, close - end - 1);
      if (k.empty()) throw_error(ErrorKind::ValueError, "Empty attribute in format string");
      const bool numeric = std::all_of(k.begin(), k.end(), is_digit);
      v = get_item(v, numeric ? Value::integer(std::stoll(std::string(k))) : Value::str(k));
      end = close + 1;
      if (end < name.size() && name[end] != '.' && name[end] != '[')
        throw_error(ErrorKind::ValueError, "Only '.' or '[' may follow ']' in format field specifier");
    }
  }
  return v;
}

std::string format_with(FormatState& st, std::string_view fmt, int depth);

// One replacement field's text between its braces.
std::string format_one(FormatState& st, std::string_view field, int depth) {
  // field_name, then !conversion, then :spec (the spec may nest fields)
  size_t i = 0;
  int bracket = 0;
  while (i < field.size()) {
    const char c = field[i];
    if (c == '[') ++bracket;
    else if (c == ']') --bracket;
    else if (bracket == 0 && (c == '!' || c == ':')) break;
    ++i;
  }
  const std::string_view name = field.substr(0, i);
  int conversion = 0;
  if (i < field.size() && field[i] == '!') {
    if (i + 1 >= field.size()) throw_error(ErrorKind::ValueError, "end of string while looking for conversion specifier");
    const char c = field[i + 1];
    conversion = c == 's' ? 1 : c == 'r' ? 2 : c == 'a' ? 3 : -1;
    if (conversion < 0)
      throw_error(ErrorKind::ValueError, std::string("Unknown conversion specifier ") + c);
    i += 2;
    if (i < field.size() && field[i] != ':')
      throw_error(ErrorKind::ValueError, "expected ':' after conversion specifier");
  }
  const Value v = lookup_field(st, name);  // before the spec's own fields: '{:{}}' is (value, width)
  std::string spec;
  if (i < field.size() && field[i] == ':') spec = format_with(st, field.substr(i + 1), depth + 1);
  return format_field(v, conversion, spec);
}

std::string format_with(FormatState& st, std::string_view fmt, int depth) {
  if (depth > 2) throw_error(ErrorKind::ValueError, "Max string recursion exceeded");
  std::string out;
  for (size_t i = 0; i < fmt.size();) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      throw_error(ErrorKind::ValueError, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    // the matching '}' (braces nest inside a spec)
    size_t j = i + 1;
    int level = 1;
    while (j < fmt.size()) {
      if (fmt[j] == '{') ++level;
      else if (fmt[j] == '}' && --level == 0) break;
      ++j;
    }
    if (j >= fmt.size())
      throw_error(ErrorKind::ValueError, level > 1 ? "unmatched '{' in format spec" : "Single '{' encountered in format string");
    out += format_one(st, fmt.substr(i + 1, j - i - 1), depth);
    i = j + 1;
  }
  return out;
}

// ------------------------------------------------------------- str % ----

std::string pad_text(std::string s, int64_t width, bool left) {
  const int64_t n = int64_t(utf8_length(s));
  if (width <= n) return s;
  const std::string fill(size_t(width - n), ' ');
  return left ? s + fill : fill + s;
}

// What a numeric conversion's argument is, as CPython checks it.
bool is_int_like(const Value& v) { return v.is(Kind::Int) || v.is(Kind::Bool); }

}  // namespace

std::string str_format(CallContext& ctx, std::string_view fmt, const std::vector<Value>& args, const Value& kwargs) {
  FormatState st{ctx, args, kwargs};
  return format_with(st, fmt, 0);
}

std::string str_percent(std::string_view fmt, const Value& values) {
  std::vector<Value> args;
  const bool tuple = values.is(Kind::Tuple);
  if (tuple) args = values.as<TupleObj>()->items;
  else args.push_back(values);
  // CPython: anything with __getitem__ but a tuple or a str is a mapping
  // (for %(name)s, and excess arguments are then no error).
  const bool mapping = !tuple && !values.is(Kind::Str) &&
                       (values.is(Kind::Dict) || values.is(Kind::List) || values.is(Kind::Range) ||
                        values.is(Kind::Tensor) ||
                        (values.is(Kind::Foreign) && foreign_container(values) != Kind::Null &&
                         foreign_container(values) != Kind::Set));
  size_t next = 0;
  bool used_key = false;
  auto take = [&]() -> Value {
    if (next >= args.size()) throw_error(ErrorKind::TypeError, "not enough arguments for format string");
    return args[next++];
  };
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    if (fmt[i] != '%') {
      out += fmt[i++];
      continue;
    }
    const size_t start = i;
    ++i;
    if (i >= fmt.size()) throw_error(ErrorKind::ValueError, "incomplete format");
    Value arg = Value::null();
    if (fmt[i] == '(') {
      if (!mapping) throw_error(ErrorKind::TypeError, "format requires a mapping");
      int level = 1;
      size_t k = i + 1;
      while (k < fmt.size() && level > 0) {
        if (fmt[k] == '(') ++level;
        else if (fmt[k] == ')') --level;
        ++k;
      }
      if (level > 0) throw_error(ErrorKind::ValueError, "incomplete format key");
      arg = get_item(values, Value::str(fmt.substr(i + 1, k - i - 2)));
      used_key = true;
      i = k;
    }
    bool left = false, plus = false, space = false, alt = false, zero = false;
    for (; i < fmt.size(); ++i) {
      const char c = fmt[i];
      if (c == '-') left = true;
      else if (c == '+') plus = true;
      else if (c == ' ') space = true;
      else if (c == '#') alt = true;
      else if (c == '0') zero = true;
      else break;
    }
    int64_t width = -1, prec = -1;
    if (i < fmt.size() && fmt[i] == '*') {
      const Value w = take();
      if (!is_int_like(w)) throw_error(ErrorKind::TypeError, "* wants int");
      width = w.as_int();
      if (width < 0) {
        left = true;
        width = -width;
      }
      ++i;
    } else {
      while (i < fmt.size() && is_digit(fmt[i])) width = (width < 0 ? 0 : width) * 10 + (fmt[i++] - '0');
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      prec = 0;
      if (i < fmt.size() && fmt[i] == '*') {
        const Value p = take();
        if (!is_int_like(p)) throw_error(ErrorKind::TypeError, "* wants int");
        prec = std::max<int64_t>(p.as_int(), 0);
        ++i;
      } else {
        while (i < fmt.size() && is_digit(fmt[i])) prec = prec * 10 + (fmt[i++] - '0');
      }
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw_error(ErrorKind::ValueError, "incomplete format");
    const char conv = fmt[i++];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (arg.is_null()) arg = take();
    std::string text;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        text = conv == 's' ? to_str(arg) : conv == 'r' ? repr(arg) : ascii_repr(arg);
        if (prec >= 0) {
          std::u32string cps = utf8_decode(text);
          if (int64_t(cps.size()) > prec) {
            std::string cut;
            for (int64_t k = 0; k < prec; ++k) cut += utf8_encode(cps[size_t(k)]);
            text = cut;
          }
        }
        out += pad_text(text, width, left);
        continue;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        const bool decimal = conv == 'd' || conv == 'i' || conv == 'u';
        Value n = arg;
        if (arg.is(Kind::Float)) {
          if (!decimal)
            throw_error(ErrorKind::TypeError, std::string("%") + conv + " format: an integer is required, not float");
          const double d = arg.as_float();
          if (!std::isfinite(d))
            throw_error(std::isnan(d) ? ErrorKind::ValueError : ErrorKind::OverflowError,
                        std::string("cannot convert float ") + (std::isnan(d) ? "NaN" : "infinity") + " to integer");
          n = Value::integer(int64_t(std::trunc(d)));
        } else if (!is_int_like(arg)) {
          throw_error(ErrorKind::TypeError, std::string("%") + conv + " format: " +
                                                (decimal ? "a real number" : "an integer") + " is required, not " +
                                                type_name(arg));
        }
        const int64_t v = n.as_int();
        std::string digits = format_value(Value::integer(v < 0 ? -v : v), decimal ? "d" : std::string(1, conv));
        if (v == INT64_MIN) digits = format_value(n, decimal ? "d" : std::string(1, conv)).substr(1);
        if (prec >= 0 && int64_t(digits.size()) < prec) digits = std::string(size_t(prec) - digits.size(), '0') + digits;
        std::string prefix = v < 0 ? "-" : plus ? "+" : space ? " " : "";
        if (alt && conv == 'x') prefix += "0x";
        if (alt && conv == 'X') prefix += "0X";
        if (alt && conv == 'o') prefix += "0o";
        if (zero && !left && width > int64_t(prefix.size() + digits.size()))
          digits = std::string(size_t(width) - prefix.size() - digits.size(), '0') + digits;
        out += pad_text(prefix + digits, width, left);
        continue;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!arg.is_number()) throw_error(ErrorKind::TypeError, "must be real number, not " + type_name(arg));
        std::string spec;
        if (left) spec += '<';
        if (plus) spec += '+';
        else if (space) spec += ' ';
        if (alt) spec += '#';
        if (zero && !left) spec += '0';
        if (width >= 0) spec += std::to_string(width);
        spec += '.' + std::to_string(prec >= 0 ? prec : 6) + conv;
        out += format_value(Value::floating(arg.as_number()), spec);
        continue;
      }
      case 'c': {
        if (is_int_like(arg)) {
          const int64_t c = arg.as_int();
          if (c < 0 || c > 0x10FFFF) throw_error(ErrorKind::OverflowError, "%c arg not in range(0x110000)");
          text = utf8_encode(char32_t(c));
        } else if (arg.is(Kind::Str) && utf8_length(arg.as_str()) == 1) {
          text = arg.as_str();
        } else {
          throw_error(ErrorKind::TypeError, "%c requires int or char");
        }
        out += pad_text(text, width, left);
        continue;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "%x", unsigned(static_cast<unsigned char>(conv)));
        throw_error(ErrorKind::ValueError, std::string("unsupported format character '") + conv + "' (0x" + hex +
                                               ") at index " + std::to_string(i - 1));
      }
    }
    (void)start;
  }
  if (next < args.size() && !mapping && !used_key)
    throw_error(ErrorKind::TypeError, "not all arguments converted during string formatting");
  return out;
}

}  // namespace kiln::runtime
