// The VM corpus: tests/corpus/vm/*.kbc, each a program whose `main()`
// result is pinned by header comments:
//   # expect: <repr of the result>
//   # error: <Kind>: <substring of the message>
//   # traceback: fn:line, fn:line     (innermost first)
//   # stdout: line1|line2             (what print() wrote, '|' = newline)
// The VM is the oracle; later backends are checked against the same files.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

struct CorpusCase {
  std::string path, source, expect, error, traceback, stdout_text;
  bool has_stdout = false;
  // Tracer corpus: explain's expected counts (-1: not given), the break
  // reason ids in order, and a documented gap that skips the count check.
  int graphs = -1, breaks = -1;
  std::string reasons, known_gap;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<CorpusCase> load_corpus(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kbc") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<CorpusCase> out;
  for (const auto& p : files) {
    CorpusCase c;
    c.path = p.string();
    c.source = read_text(p);
    std::istringstream lines(c.source);
    std::string line;
    while (std::getline(lines, line) && line.rfind("#", 0) == 0) {
      auto field = [&](const char* key, std::string& dst) {
        std::string k = std::string("# ") + key + ": ";
        if (line.rfind(k, 0) == 0) {
          dst = line.substr(k.size());
          return true;
        }
        return false;
      };
      field("expect", c.expect);
      field("error", c.error);
      field("traceback", c.traceback);
      field("reasons", c.reasons);
      field("known-gap", c.known_gap);
      std::string n;
      if (field("graphs", n)) c.graphs = std::stoi(n);
      if (field("breaks", n)) c.breaks = std::stoi(n);
      if (field("stdout", c.stdout_text)) c.has_stdout = true;
    }
    out.push_back(std::move(c));
  }
  return out;
}
