// Per-component logging through spdlog, switched on by the environment:
// KILN_LOGS=vm,graph_breaks,recompiles,guards (or "all"). A disabled
// component costs one pointer test at the call site.
#pragma once

#include <string_view>

namespace spdlog { class logger; }

namespace kiln::log {

// The component's logger, or nullptr when KILN_LOGS does not name it.
spdlog::logger* get(std::string_view component);
// Re-reads KILN_LOGS (tests flip it at run time).
void reload();

}  // namespace kiln::log
