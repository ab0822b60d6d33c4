// A KBC-aware mutator for the text targets (LLVMFuzzerCustomMutator): the
// mutations a person makes to a program, one at a time, on instruction
// lines -- an operand changed, an opcode replaced, a line deleted, repeated,
// moved, or an instruction copied from elsewhere in the program. Byte-level
// mutation alone mostly breaks the syntax; these keep most programs
// assembling and verifying, which is where the VM, the translator and the
// backends are. One mutation in three is still libFuzzer's own.
//
// Include it in exactly one translation unit of a target.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/value/code.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace kiln_fuzz {

inline std::vector<std::string> split_lines(const uint8_t* data, size_t size) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

// An instruction line: indentation, then an upper-case opcode name.
inline bool is_instruction(const std::string& l) {
  size_t i = l.find_first_not_of(" \t");
  return i != std::string::npos && i > 0 && std::isupper(static_cast<unsigned char>(l[i]));
}

inline size_t mutate_kbc(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  if (pick(3) == 0) return LLVMFuzzerMutate(data, size, max_size);
  std::vector<std::string> lines = split_lines(data, size);
  std::vector<size_t> instrs;
  for (size_t i = 0; i < lines.size(); ++i)
    if (is_instruction(lines[i])) instrs.push_back(i);
  if (instrs.empty()) return LLVMFuzzerMutate(data, size, max_size);
  const size_t at = instrs[pick(instrs.size())];
  std::string& line = lines[at];
  const size_t op_begin = line.find_first_not_of(" \t");
  size_t op_end = line.find_first_of(" \t#", op_begin);
  if (op_end == std::string::npos) op_end = line.size();
  switch (pick(8)) {
    case 0: {  // an integer operand: nearby, or a small value
      size_t d = line.find_first_of("0123456789", op_end);
      if (d == std::string::npos) {
        line.insert(op_end, " " + std::to_string(pick(4)));
        break;
      }
      size_t e = line.find_first_not_of("0123456789", d);
      if (e == std::string::npos) e = line.size();
      // strtol saturates; keep the arithmetic far from its limits.
      long v = std::min(std::strtol(line.substr(d, e - d).c_str(), nullptr, 10), 1L << 40);
      long nv = pick(2) ? v + long(pick(5)) - 2 : long(pick(8));
      if (nv < 0) nv = 0;
      line.replace(d, e - d, std::to_string(nv));
      break;
    }
    case 1: {  // another opcode, same operands
      auto op = kiln::runtime::Opcode(pick(size_t(kiln::runtime::kNumOpcodes)));
      line.replace(op_begin, op_end - op_begin, kiln::runtime::opcode_info(op).name);
      break;
    }
    case 2:  // delete it
      lines.erase(lines.begin() + ptrdiff_t(at));
      break;
    case 3:  // repeat it
      lines.insert(lines.begin() + ptrdiff_t(at), line);
      break;
    case 4: {  // copy another instruction here (its names and constants too)
      std::string other = lines[instrs[pick(instrs.size())]];
      lines.insert(lines.begin() + ptrdiff_t(at + pick(2)), other);
      break;
    }
    case 5:  // swap with the next line
      if (at + 1 < lines.size()) std::swap(lines[at], lines[at + 1]);
      break;
    case 6: {  // a fresh operand-less instruction
      static const char* const kPlain[] = {"POP_TOP", "NOP", "PUSH_NULL", "GET_ITER", "BINARY_SUBSCR",
                                           "RETURN_VALUE", "LOAD_ASSERTION_ERROR", "PUSH_EXC_INFO"};
      lines.insert(lines.begin() + ptrdiff_t(at), std::string("  ") + kPlain[pick(std::size(kPlain))]);
      break;
    }
    default: {  // a stack shuffle or count-taking instruction
      static const char* const kCounted[] = {"COPY", "SWAP", "BUILD_TUPLE", "BUILD_LIST", "CALL", "UNPACK_SEQUENCE",
                                             "CALL_METHOD", "BUILD_SLICE", "MAKE_FUNCTION", "RAISE"};
      lines.insert(lines.begin() + ptrdiff_t(at),
                   std::string("  ") + kCounted[pick(std::size(kCounted))] + " " + std::to_string(pick(4)));
      break;
    }
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

}  // namespace kiln_fuzz

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return kiln_fuzz::mutate_kbc(data, size, max_size, seed);
}
