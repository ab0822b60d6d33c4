// The per-code cache of compiled entries (eval_frame.cpp), as the
// embedders that run the entries themselves see it: the VM path
// (CompiledFunction) runs an entry's residual KBC; python/'s frame hook
// runs CPython code made from it (Options::python_frames).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "interpreter/convert_frame.h"
#include "interpreter/guard_tree.h"
#include "runtime/nn/module.h"

namespace kiln::interpreter {

struct CacheEntry {
  // The backend that compiled it: compiling the same function with another
  // backend must not reuse this entry (it would silently run the first
  // backend's code).
  std::string backend;
  std::unique_ptr<GuardTree> guards;
  runtime::Value residual;  // a Function with the frame's own signature
  std::optional<FastPath> fast;  // set: call the graph directly, no residual frame
  std::optional<Continuation> continuation;  // python_frames: where CPython goes on after the residual
  // The trace could not run or could not be turned into residual code:
  // the residual is the function itself (the VM runs it; a Python frame
  // runs unchanged on CPython).
  bool runs_original = false;
  // runtime::class_epoch() when the trace started: a class attribute
  // changed since (Child.K = 5) makes the entry stale, whatever its guards say.
  uint64_t class_epoch = 0;
  // The host classes (a Python class kiln reads on demand) the trace looked
  // attributes up in, each with its reads_version then: a class whose
  // attributes read differently since makes the entry stale. Only the
  // classes read: a program writing a class attribute of an unrelated class
  // (or one no trace read) recompiles nothing.
  std::vector<runtime::ClassRead> class_reads;
  // The frame's first parameter that was a module (self of a module method,
  // also in its resume functions), identity only: cache_size_limit counts
  // entries per instance. Null when none was.
  const runtime::Object* self_module = nullptr;
  // The deepest frame the trace inlined (0: none): eager has that many
  // more frames on its stack inside the call than the graph takes, so a
  // call with less room than that below the recursion limit runs the frame
  // itself (room_for), and RecursionError comes where eager's does.
  int inline_depth = 0;
  // What the embedder made of the entry (python/: the CPython code object
  // that runs it), built on first use and dropped with the entry.
  mutable std::shared_ptr<void> host;
};

// Whether a call with `headroom` frames left before the recursion limit
// may run `e` (else the frame's own code runs, on the VM or CPython). An
// inlined level may be several frames in eager (a torch module call is
// __call__, _call_impl and forward) and the callee's own calls may need a
// few more: generous, as falling back near the limit costs only speed.
inline bool room_for(const CacheEntry& e, int64_t headroom) {
  constexpr int64_t kFramesPerInlinedLevel = 4, kMargin = 16;
  return e.inline_depth == 0 || headroom > kFramesPerInlinedLevel * e.inline_depth + kMargin;
}

// The entry this call runs: the newest whose guards pass, or a new one
// traced and compiled now (convert_frame). `locals` are the frame's bound
// parameters. Null when the frame is past cache_size_limit: it then runs
// unchanged (a warning names the last guard that failed).
std::shared_ptr<const CacheEntry> lookup_or_compile(runtime::CallContext& vm, const runtime::Ref<runtime::FunctionObj>& fn,
                                                    const runtime::Value* locals, const Options& options);

// A fast-path entry's result: its graph over the parameters, the result
// built from the template.
runtime::Value run_fast(runtime::CallContext& vm, const FastPath& fast, const runtime::Value* params);
// Its graph's outputs alone (an embedder that builds the result from the
// template itself: python/ returns the caller's own objects for Param).
std::vector<runtime::Value> run_fast_graph(runtime::CallContext& vm, const FastPath& fast, const runtime::Value* params);

// Set on this thread when a residual's graph call raised (convert_frame.cpp
// makes the call the residual's first effect). Nothing the frame does has
// happened yet then: its stores and mutations are replayed after the
// graph. An embedder that can run the frame's own code again (python/:
// CPython) does so, and the program meets its error in order, after the
// effects before it (an index out of bounds in a graph, after a list.pop
// the trace had deferred). The embedder clears it.
bool& graph_call_failed();

// What lookup_or_compile reports into while set (kiln::explain does it for
// one call; python/'s explain for the frames of one Python call): graphs,
// breaks, guards, recompiles. Returns the previous recorder.
ExplainReport* set_explain_recording(ExplainReport* report);

// Code of the embedder's own (python/: kiln/'s torch-API adapters) whose
// frames the embedder never compiles on their own (Options::python_frames).
// A break inside an inlined call of such code is reported as the call's
// own break, with the inner reason ("torch.add has no kiln lowering"), not
// as "a break inside the inlined function add" pointing at a frame no
// explain will ever list. Files under `dir`; "" for none.
void set_own_code_dir(std::string dir);
bool is_own_code(const std::string& filename);

}  // namespace kiln::interpreter
