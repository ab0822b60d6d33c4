#include "runtime/base/log.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace kiln::log {

namespace {
struct Registry {
  std::mutex mu;
  std::string spec;
  bool all = false;
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;

  void load() {
    const char* env = std::getenv("KILN_LOGS");
    spec = env ? env : "";
    all = false;
    loggers.clear();
    size_t start = 0;
    while (start <= spec.size()) {
      size_t comma = spec.find(',', start);
      if (comma == std::string::npos) comma = spec.size();
      std::string name = spec.substr(start, comma - start);
      start = comma + 1;
      if (name.empty()) continue;
      if (name == "all") all = true;
      else loggers[name] = nullptr;
    }
  }
};
Registry& registry() {
  static Registry* r = [] {
    auto* x = new Registry();
    x->load();
    return x;
  }();
  return *r;
}
}  // namespace

spdlog::logger* get(std::string_view component) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.loggers.find(component);
  if (it == r.loggers.end()) {
    if (!r.all) return nullptr;
    it = r.loggers.emplace(std::string(component), nullptr).first;
  }
  if (!it->second) {
    std::string name = "kiln." + std::string(component);
    it->second = spdlog::get(name);
    if (!it->second) it->second = spdlog::stderr_color_mt(name);
    it->second->set_pattern("[%n] %v");
    it->second->set_level(spdlog::level::debug);
  }
  return it->second.get();
}

void reload() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.load();
}

}  // namespace kiln::log
