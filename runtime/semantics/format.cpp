// format() and ascii(). The structure follows CPython 3.11's
// Python/formatter_unicode.c (parse, then per-type checks in the same
// order, so the same spec raises the same error) and the float layout of
// Python/pystrtod.c (format_float_short): digits from a correctly rounded
// conversion, then a slice of the "virtual" zero-padded digit string.
// Widths, fills and precisions of strings count code points, not bytes.
#include "runtime/semantics/format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/base/host_python.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {

// ------------------------------------------------------------ UTF-8 --

}  // namespace

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

namespace {

std::string repeat(char32_t cp, int64_t n) {
  std::string one = utf8_encode(cp), out;
  for (int64_t i = 0; i < n; ++i) out += one;
  return out;
}

// ------------------------------------------------------------- parse --

enum class Grouping { None, Comma, Underscore, UnderscoreFour };

struct Spec {
  char32_t fill = ' ';
  char32_t align;
  bool alternate = false;
  bool no_neg_0 = false;
  char32_t sign = 0;
  int64_t width = -1;
  Grouping grouping = Grouping::None;
  int64_t precision = -1;
  char32_t type;
};

[[noreturn]] void value_error(const std::string& msg) { throw_error(ErrorKind::ValueError, msg); }

std::string code_text(char32_t c) {
  if (c > 32 && c < 128) return std::string(1, char(c));
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\x%x", unsigned(c));
  return buf;
}

bool is_align(char32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; }

// CPython's get_integer: the number of digits read, the value in *out.
size_t read_integer(const std::u32string& s, size_t& pos, int64_t& out) {
  size_t n = 0;
  out = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
    if (out > (INT64_MAX - 9) / 10) value_error("Too many decimal digits in format string");
    out = out * 10 + int64_t(s[pos] - '0');
    ++pos;
    ++n;
  }
  return n;
}

Spec parse(std::string_view text, char32_t default_align, char32_t default_type, const std::string& type_name) {
  const std::u32string s = utf8_decode(text);
  Spec f;
  f.align = default_align;
  f.type = default_type;
  size_t pos = 0;
  bool fill_given = false, align_given = false;
  if (s.size() >= 2 && is_align(s[1])) {
    f.align = s[1];
    f.fill = s[0];
    fill_given = align_given = true;
    pos = 2;
  } else if (!s.empty() && is_align(s[0])) {
    f.align = s[0];
    align_given = true;
    pos = 1;
  }
  if (pos < s.size() && (s[pos] == '+' || s[pos] == '-' || s[pos] == ' ')) f.sign = s[pos++];
  // 'z' (no negative zero, PEP 682) is 3.11's: 3.10 reads it as a bad type.
  if (pos < s.size() && s[pos] == 'z' && host_python().minor >= 11) {
    f.no_neg_0 = true;
    ++pos;
  }
  if (pos < s.size() && s[pos] == '#') {
    f.alternate = true;
    ++pos;
  }
  // The '0' flag: zero fill, and sign-aware (=) only where numbers align
  // right by default: format("ab", "05") is "ab000".
  if (!fill_given && pos < s.size() && s[pos] == '0') {
    f.fill = '0';
    if (!align_given && default_align == '>') f.align = '=';
    ++pos;
  }
  if (read_integer(s, pos, f.width) == 0) f.width = -1;
  if (pos < s.size() && s[pos] == ',') {
    f.grouping = Grouping::Comma;
    ++pos;
  }
  if (pos < s.size() && s[pos] == '_') {
    if (f.grouping != Grouping::None) value_error("Cannot specify both ',' and '_'.");
    f.grouping = Grouping::Underscore;
    ++pos;
  }
  if (pos < s.size() && s[pos] == ',' && f.grouping == Grouping::Underscore)
    value_error("Cannot specify both ',' and '_'.");
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    if (read_integer(s, pos, f.precision) == 0) value_error("Format specifier missing precision");
  }
  if (s.size() - pos > 1)  // (3.10 named neither the spec nor the type)
    value_error(host_python().minor < 11 ? std::string("Invalid format specifier")
                                         : "Invalid format specifier '" + std::string(text) + "' for object of type '" +
                                               type_name + "'");
  if (pos < s.size()) f.type = s[pos];
  if (f.grouping != Grouping::None) {
    switch (f.type) {
      case 'd': case 'e': case 'f': case 'g': case 'E': case 'G': case '%': case 'F': case 0: break;
      case 'b': case 'o': case 'x': case 'X':
        // bin/oct/hex group by four, and only with '_' (PEP 515)
        if (f.grouping == Grouping::Underscore) {
          f.grouping = Grouping::UnderscoreFour;
          break;
        }
        [[fallthrough]];
      default:
        value_error(std::string("Cannot specify '") + (f.grouping == Grouping::Comma ? "," : "_") + "' with '" +
                    code_text(f.type) + "'.");
    }
  }
  return f;
}

[[noreturn]] void unknown_code(char32_t type, const std::string& type_name) {
  value_error("Unknown format code '" + code_text(type) + "' for object of type '" + type_name + "'");
}

// ------------------------------------------------------ number layout --

// CPython's _PyUnicode_InsertThousandsGrouping: the digits grouped from the
// right, zero-padded (zeros grouped too) up to min_width characters.
std::string group_digits(std::string_view digits, int64_t min_width, int group, char sep) {
  std::vector<std::string> parts;  // right to left
  int64_t remaining = int64_t(digits.size());
  bool broke = false;
  bool use_sep = false;
  if (group > 0) {
    for (;;) {
      int64_t len = std::min<int64_t>(group, std::max<int64_t>(std::max(remaining, min_width), 1));
      int64_t zeros = std::max<int64_t>(0, len - remaining);
      int64_t chars = std::max<int64_t>(0, std::min(remaining, len));
      parts.push_back(std::string(size_t(zeros), '0') +
                      std::string(digits.substr(size_t(remaining - chars), size_t(chars))));
      use_sep = true;
      remaining -= chars;
      min_width -= len;
      if (remaining <= 0 && min_width <= 0) {
        broke = true;
        break;
      }
      min_width -= 1;  // the separator
    }
  }
  if (!broke) {
    int64_t len = std::max<int64_t>(std::max(remaining, min_width), 1);
    int64_t zeros = std::max<int64_t>(0, len - remaining);
    int64_t chars = std::max<int64_t>(0, std::min(remaining, len));
    parts.push_back(std::string(size_t(zeros), '0') + std::string(digits.substr(0, size_t(chars))));
  }
  (void)use_sep;
  std::string out;
  for (size_t i = parts.size(); i-- > 0;) {
    out += parts[i];
    if (i && group > 0) out += sep;
  }
  return out;
}

// calc_number_widths + fill_number: [lpad][sign][prefix][spad][grouped digits][.][remainder][rpad].
// `body` is the unsigned number: its leading digits (grouped), then '.'
// and the rest (fraction, exponent, '%'). Digits: the integer's digits in
// its base (all of body), a float's leading decimal digits, or none (a 'c'
// character is all remainder).
enum class Digits { All, Decimal, None };
std::string lay_out_number(const Spec& f, bool negative, const std::string& prefix, const std::string& body,
                           Digits which) {
  size_t ndigits = which == Digits::All ? body.size() : 0;
  if (which == Digits::Decimal)
    while (ndigits < body.size() && body[ndigits] >= '0' && body[ndigits] <= '9') ++ndigits;
  const bool has_decimal = ndigits < body.size() && body[ndigits] == '.';
  const std::string rest = body.substr(ndigits + (has_decimal ? 1 : 0));
  const int64_t rest_len = int64_t(utf8_length(rest));

  std::string sign;
  if (f.sign == '+') sign = negative ? "-" : "+";
  else if (f.sign == ' ') sign = negative ? "-" : " ";
  else if (negative) sign = "-";

  const int64_t non_digit = int64_t(sign.size() + prefix.size()) + (has_decimal ? 1 : 0) + rest_len;
  const int64_t min_width = (f.fill == '0' && f.align == '=') ? f.width - non_digit : 0;
  int group = 0;
  char sep = 0;
  switch (f.grouping) {
    case Grouping::None: break;
    case Grouping::Comma: group = 3, sep = ','; break;
    case Grouping::Underscore: group = 3, sep = '_'; break;
    case Grouping::UnderscoreFour: group = 4, sep = '_'; break;
  }
  if (f.type == 'n') group = 0;  // the "C" locale does not group
  const std::string grouped = ndigits == 0 ? "" : group_digits(std::string_view(body).substr(0, ndigits), min_width, group, sep);

  const int64_t padding = f.width - (non_digit + int64_t(grouped.size()));
  int64_t lpad = 0, spad = 0, rpad = 0;
  if (padding > 0) {
    switch (f.align) {
      case '<': rpad = padding; break;
      case '^': lpad = padding / 2, rpad = padding - lpad; break;
      case '=': spad = padding; break;
      default: lpad = padding; break;
    }
  }
  return repeat(f.fill, lpad) + sign + prefix + repeat(f.fill, spad) + grouped + (has_decimal ? "." : "") + rest +
         repeat(f.fill, rpad);
}

// ------------------------------------------------------------ floats --

// PyOS_double_to_string(x, type, precision, flags) for type e f g r;
// the sign is a leading '-' (never on a nan).
std::string double_to_string(double x, char type, int64_t precision, bool alt, bool add_dot_0, bool no_neg_0) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  const bool negative = std::signbit(x);
  const double a = std::fabs(x);
  std::string out;
  if (type == 'e' || type == 'f') {
    // Correctly rounded by the C library, laid out exactly as CPython's.
    std::string fmt = std::string("%") + (alt ? "#" : "") + ".*" + type;
    int n = std::snprintf(nullptr, 0, fmt.c_str(), int(precision), a);
    out.resize(size_t(n) + 1);
    std::snprintf(out.data(), out.size(), fmt.c_str(), int(precision), a);
    out.resize(size_t(n));
  } else {
    // 'g' (mode 2: precision significant digits, trailing zeros dropped)
    // or 'r' (mode 0: the shortest digits that read back exactly).
    std::string digits;
    int decpt;
    if (a == 0) {
      digits = "0";
      decpt = 1;
    } else {
      char buf[64];
      std::string sci;
      if (type == 'r') {
        auto res = std::to_chars(buf, buf + sizeof buf, a, std::chars_format::scientific);
        sci.assign(buf, res.ptr);
      } else {
        if (precision == 0) precision = 1;
        int n = std::snprintf(nullptr, 0, "%.*e", int(precision - 1), a);
        sci.resize(size_t(n) + 1);
        std::snprintf(sci.data(), sci.size(), "%.*e", int(precision - 1), a);
        sci.resize(size_t(n));
      }
      size_t e = sci.find('e');
      decpt = std::stoi(sci.substr(e + 1)) + 1;
      for (size_t i = 0; i < e; ++i)
        if (sci[i] != '.') digits += sci[i];
      while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    }
    if (type == 'g' && precision == 0) precision = 1;
    const int64_t len = int64_t(digits.size());
    int64_t vend = len;
    bool use_exp = false;
    if (type == 'g') {
      if (decpt <= -4 || decpt > (add_dot_0 ? precision - 1 : precision)) use_exp = true;
      if (alt) vend = precision;
    } else if (decpt <= -4 || decpt > 16) {
      use_exp = true;
    }
    int exp = 0;
    if (use_exp) {
      exp = decpt - 1;
      decpt = 1;
    }
    const int64_t vstart = decpt <= 0 ? decpt - 1 : 0;
    if (!use_exp && add_dot_0) vend = std::max<int64_t>(vend, decpt + 1);
    else vend = std::max<int64_t>(vend, decpt);
    if (decpt <= 0) {
      out += std::string(size_t(decpt - vstart), '0') + ".";
      out += std::string(size_t(-decpt), '0');
    }
    if (0 < decpt && decpt <= len) {
      out += digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
    } else {
      out += digits;
    }
    if (len < decpt) {
      out += std::string(size_t(decpt - len), '0') + ".";
      out += std::string(size_t(vend - decpt), '0');
    } else {
      out += std::string(size_t(std::max<int64_t>(0, vend - len)), '0');
    }
    if (!out.empty() && out.back() == '.' && !alt) out.pop_back();
    if (use_exp) {
      char e[16];
      std::snprintf(e, sizeof e, "e%+.02d", exp);
      out += e;
    }
  }
  bool zero = true;
  for (char c : out) {
    if (c == 'e') break;
    if (c >= '1' && c <= '9') zero = false;
  }
  return (negative && !(no_neg_0 && zero)) ? "-" + out : out;
}

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return s;
}

std::string format_float(double x, Spec f) {
  if (f.precision > INT32_MAX) value_error("precision too big");
  char32_t type = f.type;
  bool add_dot_0 = false;
  int64_t default_precision = 6;
  if (type == 0) {
    // No type: repr() without a precision, else 'g' with a digit after the point.
    add_dot_0 = true;
    type = 'r';
    default_precision = 0;
  }
  if (type == 'n') type = 'g';
  bool pct = false;
  if (type == '%') {
    type = 'f';
    x *= 100;
    pct = true;
  }
  int64_t precision = f.precision;
  if (precision < 0) precision = default_precision;
  else if (type == 'r') type = 'g';
  const bool up = type == 'E' || type == 'F' || type == 'G';
  char lower = char(up ? type - 'A' + 'a' : type);
  std::string s = double_to_string(x, lower, precision, f.alternate, add_dot_0, f.no_neg_0);
  if (up) s = upper(s);
  if (pct) s += '%';
  bool negative = !s.empty() && s[0] == '-';
  return lay_out_number(f, negative, "", negative ? s.substr(1) : s, Digits::Decimal);
}

// -------------------------------------------------------------- ints --

std::string format_int(int64_t v, const Spec& f, const std::string& type_name) {
  if (f.precision != -1) value_error("Precision not allowed in integer format specifier");
  if (f.no_neg_0) value_error("Negative zero coercion (z) not allowed in integer format specifier");
  if (f.type == 'c') {
    if (f.sign) value_error("Sign not allowed with integer format specifier 'c'");
    if (f.alternate) value_error("Alternate form (#) not allowed with integer format specifier 'c'");
    if (v < 0 || v > 0x10FFFF) throw_error(ErrorKind::OverflowError, "%c arg not in range(0x110000)");
    return lay_out_number(f, false, "", utf8_encode(char32_t(v)), Digits::None);
  }
  int base = 10;
  std::string prefix;
  switch (f.type) {
    case 'b': base = 2, prefix = "0b"; break;
    case 'o': base = 8, prefix = "0o"; break;
    case 'x': base = 16, prefix = "0x"; break;
    case 'X': base = 16, prefix = "0X"; break;
    default: break;
  }
  if (!f.alternate) prefix.clear();
  const bool negative = v < 0;
  uint64_t mag = negative ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  char buf[80];
  auto res = std::to_chars(buf, buf + sizeof buf, mag, base);
  std::string digits(buf, res.ptr);
  if (f.type == 'X') digits = upper(digits);
  (void)type_name;
  return lay_out_number(f, negative, prefix, digits, Digits::All);
}

// ------------------------------------------------------------ strings --

std::string format_str(const std::string& s, const Spec& f) {
  if (f.sign == ' ') value_error("Space not allowed in string format specifier");
  if (f.sign) value_error("Sign not allowed in string format specifier");
  if (f.no_neg_0) value_error("Negative zero coercion (z) not allowed in string format specifier");
  if (f.alternate) value_error("Alternate form (#) not allowed in string format specifier");
  if (f.align == '=') value_error("'=' alignment not allowed in string format specifier");
  std::u32string cps = utf8_decode(s);
  int64_t len = int64_t(cps.size());
  std::string body = s;
  if (f.precision >= 0 && len > f.precision) {
    len = f.precision;
    body.clear();
    for (int64_t i = 0; i < len; ++i) body += utf8_encode(cps[size_t(i)]);
  }
  int64_t total = std::max(len, f.width);
  int64_t lpad = f.align == '>' ? total - len : f.align == '^' ? (total - len) / 2 : 0;
  int64_t rpad = total - len - lpad;
  return repeat(f.fill, lpad) + body + repeat(f.fill, rpad);
}

std::string format_number(const Value& v, std::string_view spec) {
  const std::string tn = type_name(v);
  if (v.is(Kind::Float)) {
    if (spec.empty()) return repr(v);
    Spec f = parse(spec, '>', 0, tn);
    switch (f.type) {
      case 0: case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'n': case '%':
        return format_float(v.as_float(), f);
      default: unknown_code(f.type, tn);
    }
  }
  if (spec.empty()) return to_str(v);  // format(True, "") is "True"
  Spec f = parse(spec, '>', 'd', tn);
  switch (f.type) {
    case 'b': case 'c': case 'd': case 'o': case 'x': case 'X': case 'n': return format_int(v.as_int(), f, tn);
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case '%':
      return format_float(double(v.as_int()), f);
    default: unknown_code(f.type, tn);
  }
}

}  // namespace

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string format_value(const Value& v, std::string_view spec) {
  switch (v.kind()) {
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float: return format_number(v, spec);
    case Kind::Str: {
      if (spec.empty()) return v.as_str();
      Spec f = parse(spec, '<', 's', "str");
      if (f.type != 's') unknown_code(f.type, "str");
      return format_str(v.as_str(), f);
    }
    case Kind::Tensor: {
      // torch: a 0-d tensor formats as its item.
      Tensor t = v.as_tensor();
      if (t.dim() == 0 && !t.is_meta()) {
        double item = t.item();
        Value x = is_floating(t.dtype()) ? Value::floating(item)
                  : t.dtype() == DType::Bool ? Value::boolean(item != 0)
                                              : Value::integer(int64_t(item));
        return format_number(x, spec);
      }
      break;
    }
    case Kind::Foreign: {
      auto* f = v.as<ForeignObj>();
      if (f->vt->format) return f->vt->format(f->handle, spec);
      break;
    }
    default: break;
  }
  // object.__format__
  if (!spec.empty())
    throw_error(ErrorKind::TypeError, "unsupported format string passed to " + type_name(v) + ".__format__");
  return to_str(v);
}

std::string ascii_repr(const Value& v) {
  std::string out;
  for (char32_t c : utf8_decode(repr(v))) {
    if (c < 0x80) {
      out += char(c);
      continue;
    }
    char buf[16];
    if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
    else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
    else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
    out += buf;
  }
  return out;
}

std::string format_field(const Value& v, int conversion, std::string_view spec) {
  switch (conversion) {
    case 1: return format_value(Value::str(to_str(v)), spec);
    case 2: return format_value(Value::str(repr(v)), spec);
    case 3: return format_value(Value::str(ascii_repr(v)), spec);
    default: return format_value(v, spec);
  }
}

}  // namespace kiln::runtime
