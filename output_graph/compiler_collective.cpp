#include "output_graph/compiler_collective.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "collectives/all_gather_object.h"
#include "runtime/base/log.h"

namespace kiln::output_graph {

collectives::CompilerLocalState compiler_local_state(const GuardSet& guards, const std::string& frame_id) {
  collectives::CompilerLocalState s;
  s.frame_id = frame_id;
  for (const Guard& g : guards.guards()) {
    if (g.kind != GuardKind::TensorMatch) continue;
    collectives::InputSizes in;
    in.source = g.source->str();
    in.sizes = g.tensor.sizes;
    for (size_t d = 0; d < in.sizes.size() && d < g.tensor.dynamic.size(); ++d)
      if (g.tensor.dynamic[d]) in.sizes[d] = -1;
    s.inputs.push_back(std::move(in));
  }
  return s;
}

void run_compiler_collective(const GuardSet& guards, DistributedState& ds) {
  if (ds.all_states) return;
  collectives::CompilerLocalState mine = compiler_local_state(guards, ds.header.frame_id);
  auto start = std::chrono::steady_clock::now();
  std::vector<collectives::CompilerLocalState> all;
  collectives::all_gather_object(all, mine, *ds.group, ds.header, ds.timeout_s);
  ds.exchange_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ds.all_states = std::move(all);
}

DynamicDims merge_compiler_states(const std::vector<collectives::CompilerLocalState>& states) {
  // The first sizes seen per source (rank order), and the merged mask.
  std::map<std::string, std::vector<int64_t>> first;
  DynamicDims merged;
  auto* log = kiln::log::get("collectives");
  for (size_t r = 0; r < states.size(); ++r) {
    for (const collectives::InputSizes& in : states[r].inputs) {
      auto [it, fresh] = first.emplace(in.source, in.sizes);
      std::vector<bool>& mask = merged[in.source];
      if (fresh) {
        mask.assign(in.sizes.size(), false);
        for (size_t d = 0; d < in.sizes.size(); ++d) mask[d] = in.sizes[d] < 0;
        continue;
      }
      if (it->second.size() != in.sizes.size()) {
        if (log)
          log->warn("compiler collective: {} has {} dims on rank {} but {} on an earlier rank; its "
                    "guards stay per rank",
                    in.source, in.sizes.size(), r, it->second.size());
        continue;
      }
      for (size_t d = 0; d < in.sizes.size(); ++d)
        if (in.sizes[d] < 0 || in.sizes[d] != it->second[d]) mask[d] = true;
    }
  }
  // Sources with nothing dynamic say nothing: drop them, so the map holds
  // only what changes a trace.
  for (auto it = merged.begin(); it != merged.end();) {
    bool any = false;
    for (bool b : it->second) any = any || b;
    it = any ? std::next(it) : merged.erase(it);
  }
  return merged;
}

bool compiler_collective_changes_trace(const GuardSet& guards, const DynamicDims& merged) {
  if (merged.empty()) return false;
  for (const Guard& g : guards.guards()) {
    if (g.kind != GuardKind::TensorMatch) continue;
    auto it = merged.find(g.source->str());
    if (it == merged.end()) continue;
    for (size_t d = 0; d < it->second.size(); ++d)
      if (it->second[d] && !(d < g.tensor.dynamic.size() && g.tensor.dynamic[d])) return true;
  }
  return false;
}

}  // namespace kiln::output_graph
