// The compiled-call path: per code object, a list of cache entries (guards
// + residual function), checked newest first; on a miss, convert_frame
// traces the call and a new entry is prepended. Past cache_size_limit the
// code runs on the VM, with a warning naming the guard that failed.
// Also the public API: compile, explain, reset.
#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <mutex>

#include <spdlog/spdlog.h>

#include "collectives/all_gather_object.h"
#include "interpreter/convert_frame.h"
#include "interpreter/frame_cache.h"
#include "interpreter/guard_tree.h"
#include "interpreter/kiln_api.h"
#include "interpreter/resume_execution.h"
#include "interpreter/vm.h"
#include "output_graph/backend.h"
#include "output_graph/shared_compile.h"
#include "runtime/base/log.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/value_ops.h"

namespace kiln {

using namespace kiln::runtime;
using interpreter::GuardTree;
using interpreter::CacheEntry;
using interpreter::TraceOutcome;

namespace {

struct FrameCache {
  // Owning the code keeps its address (the map key) from being reused by
  // another code object while entries for it exist.
  Ref<Code> code;
  std::vector<std::shared_ptr<CacheEntry>> entries;  // newest first
  bool gave_up = false;  // cache_size_limit reached: run on the VM
  bool warned_for_a_module = false;  // one instance reached the limit (said once)
  // Automatic dynamic shapes: per source path, dimensions whose size
  // changed and forced a recompile; the next trace makes them dynamic.
  std::map<std::string, std::vector<bool>> dynamic_dims;
  // Sequence numbers of this frame's collectives (their headers): ranks in
  // lockstep agree on both, so a rank that compiled or looked up once more
  // than the others is named in a CollectiveMismatch instead of pairing
  // its collective with another one.
  uint64_t compiles = 0;
  uint64_t lookups = 0;
};

std::mutex cache_mu;
std::map<const Code*, FrameCache>& caches() {
  static auto* m = new std::map<const Code*, FrameCache>();
  return *m;
}

// explain() collects what convert_frame did during one call.
thread_local ExplainReport* recording = nullptr;

Value build_result(const interpreter::ResultTemplate& t, const std::vector<Value>& outputs, const Value* params) {
  using K = interpreter::ResultTemplate::Kind;
  switch (t.kind) {
    case K::Output: return outputs[t.index];
    case K::Param: return params[t.index];
    case K::Const: return t.value;
    case K::Tuple:
    case K::List: {
      std::vector<Value> items;
      items.reserve(t.items.size());
      for (const auto& x : t.items) items.push_back(build_result(x, outputs, params));
      return t.kind == K::Tuple ? make_tuple(std::move(items)) : make_list(std::move(items));
    }
  }
  return Value::none();
}

// The frame's id in collective headers: its qualname and first line (the
// same on every rank running the same program).
std::string frame_id(const Code& code) { return code.qualname + ":" + std::to_string(code.first_line); }

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The compile group, when a collective is on and there is someone to talk
// to; null otherwise, so a single rank (or collectives off) never goes near
// the exchange.
collectives::ProcessGroup* collective_group(const Options& options, bool enabled) {
  if (!enabled || !options.compile_group || options.compile_group->size() < 2) return nullptr;
  return options.compile_group.get();
}

// The residual shares the closure of the function it stands for, and
// entries are cached per code object: a closure made again (a nested
// function, a resume function over a later call's cells) runs the cached
// residual over its own cells, not those of the function first traced.
bool same_values(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].is_same(b[i])) return false;
  return true;
}
Value residual_for(const Value& residual, const FunctionObj& fn) {
  auto* r = residual.as<FunctionObj>();
  if (r->closure == fn.closure && same_values(r->defaults, fn.defaults) && same_values(r->kwdefaults, fn.kwdefaults))
    return residual;
  auto copy = make_ref<FunctionObj>();
  copy->code = r->code;
  copy->defaults = fn.defaults;
  copy->kwdefaults = fn.kwdefaults;
  copy->globals = r->globals;
  copy->closure = fn.closure;
  return Value::object(Kind::Function, copy);
}

}  // namespace

std::shared_ptr<const CacheEntry> interpreter::lookup_or_compile(CallContext& vm, const Ref<FunctionObj>& fn,
                                                                 const Value* locals, const Options& options) {
  const Code* code = fn->code.get();

  std::string why;
  std::vector<std::shared_ptr<CacheEntry>> entries;
  bool gave_up;
  uint64_t lookup = 0;
  // Guard collectives stop once the ranks gave up on this frame together
  // (same entries, same limit): nothing they do later compiles.
  collectives::ProcessGroup* guard_group = collective_group(options, options.enable_guard_collectives);
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    FrameCache& c = caches()[code];
    if (!c.code) c.code = fn->code;
    const uint64_t epoch = runtime::class_epoch();
    const size_t before = c.entries.size();
    c.entries.erase(std::remove_if(c.entries.begin(), c.entries.end(),
                                   [&](const auto& e) { return e->class_epoch != epoch; }),
                    c.entries.end());
    if (c.entries.size() != before) why = "a class attribute changed since it was compiled";
    for (const auto& e : c.entries)
      if (e->backend == options.backend) entries.push_back(e);
    gave_up = c.gave_up;
    if (gave_up) guard_group = nullptr;
    if (guard_group) lookup = ++c.lookups;
  }
  // An entry whose trace read a host class that changed since is stale, as
  // one older than the class epoch. Checked outside the lock: bringing a
  // class's reads up to date reads the host class (Python) again.
  std::vector<const CacheEntry*> stale;
  for (const auto& e : entries) {
    std::string changed;
    if (runtime::class_reads_hold(e->class_reads, &changed)) continue;
    stale.push_back(e.get());
    why = "an attribute of class '" + changed + "' changed since it was compiled";
  }
  if (!stale.empty()) {
    auto gone = [&](const auto& e) { return std::find(stale.begin(), stale.end(), e.get()) != stale.end(); };
    entries.erase(std::remove_if(entries.begin(), entries.end(), gone), entries.end());
    std::lock_guard<std::mutex> lock(cache_mu);
    auto& all = caches()[code].entries;
    all.erase(std::remove_if(all.begin(), all.end(), gone), all.end());
  }
  GuardTree::Failure newest_failure;
  std::shared_ptr<const CacheEntry> hit;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e->guards->check(locals, *fn, i == 0 ? &why : nullptr, i == 0 ? &newest_failure : nullptr)) {
      hit = e;
      break;
    }
  }
  if (guard_group) {
    // Guard collective: the ranks agree on whether any of them missed. If
    // one did, all recompile together, so every rank's cache gets the same
    // entry at the same call and their later collectives stay paired.
    auto start = std::chrono::steady_clock::now();
    collectives::GuardOutcome mine;
    mine.frame_id = frame_id(*code);
    mine.missed = hit == nullptr;
    if (!hit) mine.reason = why;
    std::vector<collectives::GuardOutcome> all;
    collectives::all_gather_object(all, mine, *guard_group, collectives::CollectiveHeader{mine.frame_id, lookup, {}},
                                   options.collective_timeout_s);
    if (recording) {
      recording->guard_collective_ms += ms_since(start);
      ++recording->guard_collective_count;
    }
    if (hit) {
      for (size_t r = 0; r < all.size(); ++r)
        if (all[r].missed) {
          why = guard_group->describe_rank(int(r)) + " missed" +
                (all[r].reason && !all[r].reason->empty() ? " (" + *all[r].reason + ")" : std::string()) +
                ", so every rank recompiles (guard collectives)";
          hit = nullptr;
          break;
        }
    }
  }
  if (hit) return hit;
  // A size change that failed the newest entry marks those dimensions
  // dynamic for the next trace (unless dynamic shapes are switched off).
  std::map<std::string, std::vector<bool>> dynamic_dims;
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    FrameCache& c = caches()[code];
    // The failed guard, and every other tensor argument whose sizes moved
    // (Dynamo compares every input with the sizes it saw, too).
    std::vector<GuardTree::Failure> changed;
    if (!options.dynamic.has_value() && newest_failure.guard) {
      changed.push_back(newest_failure);
      for (const GuardTree::Failure& f : entries[0]->guards->size_changes(locals, *fn))
        if (f.guard != newest_failure.guard) changed.push_back(f);
    }
    for (const GuardTree::Failure& f : changed) {
      const output_graph::Guard* g = f.guard;
      if (g->kind != output_graph::GuardKind::TensorMatch || !f.value->is(Kind::Tensor)) continue;
      Tensor t = f.value->as_tensor();
      if (t.dtype() != g->tensor.dtype || size_t(t.dim()) != g->tensor.sizes.size()) continue;
      auto& mask = c.dynamic_dims[g->source->str()];
      mask.resize(g->tensor.sizes.size(), false);
      for (size_t d = 0; d < mask.size(); ++d)
        if (t.sizes()[d] != g->tensor.sizes[d]) {
          mask[d] = true;
          why += "; dim " + std::to_string(d) + " of " + g->source->str() + " is now dynamic";
        }
    }
    dynamic_dims = c.dynamic_dims;
  }
  if (gave_up) return nullptr;
  // A method of a module is compiled once per instance: its
  // entries are guarded on that instance, and twelve layers of one Block
  // class are twelve entries of Block.forward, not eleven recompiles. So the
  // limit counts this instance's entries (Dynamo's per-instance accounting).
  // (The first module among the parameters: a resume function of a method
  // takes the stack first and self among the live locals.)
  const runtime::Object* self = nullptr;
  for (int i = 0; i < code->nparams() && !self; ++i)
    if (locals[i].is(Kind::Module)) self = locals[i].obj();
  const size_t mine = self ? size_t(std::count_if(entries.begin(), entries.end(),
                                                  [&](const auto& e) { return e->self_module == self; }))
                           : entries.size();
  if (int(mine) >= options.cache_size_limit) {
    std::lock_guard<std::mutex> lock(cache_mu);
    FrameCache& c = caches()[code];
    const char* unchanged = options.python_frames ? "on CPython" : "on the VM";
    if (!self || !c.warned_for_a_module) {
      if (auto* log = kiln::log::get("recompiles"))
        log->warn("{} hit cache_size_limit ({}); running it {}. Last guard failure: {}", code->qualname,
                  options.cache_size_limit, unchanged, why);
      std::fprintf(stderr, "kiln: warning: %s recompiled %d times (cache_size_limit); running it %s. %s\n",
                   code->qualname.c_str(), options.cache_size_limit, unchanged, why.c_str());
    }
    if (self) c.warned_for_a_module = true;  // only this instance runs unchanged
    else c.gave_up = true;
    return nullptr;
  }

  std::optional<output_graph::DistributedState> distributed;
  if (collective_group(options, options.enable_compiler_collectives)) {
    distributed.emplace();
    distributed->group = options.compile_group;
    distributed->header.frame_id = frame_id(*code);
    distributed->timeout_s = options.collective_timeout_s;
    // Only the llvm backend splits kernels; every rank of an SPMD program
    // uses the same backend, so every rank makes the same choice here.
    distributed->share_compile = options.share_compile_work && options.backend == "llvm";
    std::lock_guard<std::mutex> lock(cache_mu);
    distributed->header.compile_seq = ++caches()[code].compiles;
  }
  const uint64_t class_epoch = runtime::class_epoch();
  // The host classes the trace reads attributes from: the entry's guard on
  // them (class_reads_hold).
  std::vector<runtime::ClassObj*> read_log;
  TraceOutcome out = [&] {
    struct LogScope {  // restored on the way out, an exception included
      std::vector<runtime::ClassObj*>* prev;
      ~LogScope() { runtime::set_class_read_log(prev); }
    } log_scope{runtime::set_class_read_log(&read_log)};
    return interpreter::convert_frame(fn, std::vector<Value>(locals, locals + code->nparams()), options, vm,
                                      dynamic_dims, distributed ? &*distributed : nullptr);
  }();
  // The KernelPlan exchange of a compile whose backend did not run one (no
  // graph, no kernels): the other ranks may be in theirs.
  if (distributed) output_graph::finish_shared_compile(*distributed);
  if (distributed && distributed->all_states) {
    // Later compiles of this frame start from what the ranks agreed on.
    std::lock_guard<std::mutex> lock(cache_mu);
    auto& dims = caches()[code].dynamic_dims;
    for (const auto& [source, mask] : out.agreed_dynamic_dims) {
      std::vector<bool>& m = dims[source];
      if (m.size() < mask.size()) m.resize(mask.size(), false);
      for (size_t d = 0; d < mask.size(); ++d) m[d] = m[d] || mask[d];
    }
  }
  auto entry = std::make_shared<CacheEntry>();
  entry->backend = options.backend;
  entry->guards = std::make_unique<GuardTree>(out.guards);
  entry->residual = Value::object(Kind::Function, out.residual);
  entry->fast = out.fast;
  entry->continuation = out.continuation;
  entry->runs_original = out.residual.get() == fn.get();
  entry->class_epoch = class_epoch;
  entry->class_reads = runtime::class_reads_of(read_log);
  entry->self_module = self;
  entry->inline_depth = out.inline_depth;
  if (!entries.empty()) {
    std::string reason = code->qualname + ": " + why;
    if (auto* log = kiln::log::get("recompiles")) log->info("recompiling {}", reason);
    if (recording) recording->recompile_reasons.push_back(reason);
  }
  // The graph's code view and the guards' text are made only when someone
  // reads them (explain, KILN_LOGS): in a deep module chain both are
  // O(depth^2) characters (every qualified path spelled out).
  if (auto* log = kiln::log::get("guards"))
    for (const auto& g : out.guards.strs()) log->info("{}: {}", code->qualname, g);
  if (recording) {
    if (distributed && distributed->all_states) {
      recording->collective_ms += distributed->exchange_ms;
      ++recording->collective_count;
      if (out.collective_restarted) ++recording->collective_restarts;
    }
    if (out.graph_ops > 0) {
      ++recording->graph_count;
      recording->ops_per_graph.push_back(out.graph_ops);
      recording->autograd_per_graph.push_back(out.graph->autograd);
      recording->graphs.push_back(out.graph->code());
      recording->graph_objects.push_back(out.graph);
    }
    if (out.graph_break) {
      ++recording->graph_break_count;
      recording->breaks.push_back(*out.graph_break);
    }
    std::string g;
    for (const auto& s : out.guards.strs()) g += s + "\n";
    recording->guards.push_back(code->qualname + ":\n" + g);
  }
  if (auto* log = kiln::log::get("graph_code"))
    if (out.graph_ops > 0) log->info("{}:\n{}", code->qualname, out.graph->code());
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto& list = caches()[code].entries;
    list.insert(list.begin(), entry);
  }
  return entry;
}

namespace {

Value eval_frame(CallContext& vm, const Ref<FunctionObj>& fn, const CallArgs& args, const Options& options) {
  const Code* code = fn->code.get();
  // Guards read the bound parameters. When the arguments are exactly the
  // positional parameters (the common call) they already are that array.
  std::vector<Value> bound;
  const Value* locals = args.args;
  if (args.kwnames || args.nargs != size_t(code->argcount) || code->flags != 0 || code->kwonlyargcount != 0) {
    bound.resize(size_t(code->nparams()));
    interpreter::bind_arguments(fn.get(), args, bound.data());
    locals = bound.data();
  }
  std::shared_ptr<const CacheEntry> e = interpreter::lookup_or_compile(vm, fn, locals, options);
  if (!e || !room_for(*e, vm.recursion_headroom())) return vm.call(Value::object(Kind::Function, fn), args);
  if (e->fast) return interpreter::run_fast(vm, *e->fast, locals);
  return vm.call(residual_for(e->residual, *fn), args);
}
}  // namespace

ExplainReport* interpreter::set_explain_recording(ExplainReport* report) {
  ExplainReport* previous = recording;
  recording = report;
  return previous;
}

bool& interpreter::graph_call_failed() {
  thread_local bool failed = false;
  return failed;
}

std::vector<Value> interpreter::run_fast_graph(CallContext& vm, const interpreter::FastPath& fast, const Value* params) {
  if (!fast.graph) return {};
  std::vector<Value> inputs;
  inputs.reserve(fast.inputs.size());
  for (const FastInput& in : fast.inputs) {
    const Value& p = params[in.param];
    if (in.item < 0) inputs.push_back(p);
    else if (p.is(Kind::Tuple) && size_t(in.item) < p.as<TupleObj>()->items.size())
      inputs.push_back(p.as<TupleObj>()->items[size_t(in.item)]);
    else inputs.push_back(runtime::get_item(p, Value::integer(in.item)));
  }
  return fast.graph(vm, inputs);
}

Value interpreter::run_fast(CallContext& vm, const interpreter::FastPath& fast, const Value* params) {
  return build_result(fast.result, run_fast_graph(vm, fast, params), params);
}

struct CompiledFunction::State {
  Ref<FunctionObj> fn;
  Options options;
};

Value interpreter::compiled_value(const Ref<FunctionObj>& fn, const Options& options) {
  // The builtin holds the function (make_builtin_closure's rule: a program
  // that keeps its compiled function in its globals is a cycle the census
  // must see through).
  FunctionObj* f = fn.get();
  return make_builtin_closure(
      "compiled " + fn->code->qualname,
      [f, options](CallContext& ctx, const CallArgs& args) { return eval_frame(ctx, Ref<FunctionObj>(f), args, options); },
      {fn});
}

CompiledFunction compile(const Value& fn, Options options) {
  if (!fn.is(Kind::Function))
    throw_error(ErrorKind::TypeError, "kiln::compile expects a KBC function, got " + type_name(fn));
  if (!output_graph::find_backend(options.backend))
  {
    std::string known;
    for (const auto& name : output_graph::backend_names()) known += (known.empty() ? "" : ", ") + name;
    throw_error(ErrorKind::ValueError, "kiln::compile: unknown backend '" + options.backend + "' (registered: " +
                                           known + "; `llvm` is registered by linking the kiln_core target)");
  }
  auto state = std::make_shared<CompiledFunction::State>();
  state->fn = Ref<FunctionObj>(fn.as<FunctionObj>());
  state->options = std::move(options);
  return CompiledFunction(state);
}

Value CompiledFunction::call(const CallArgs& args) const {
  if (!state_->options.stdout_sink) {
    // One VM per thread serves every top-level compiled call (a cached call
    // must not pay for making a VM); a nested call gets its own.
    thread_local interpreter::VM shared;
    if (shared.depth() == 0) return eval_frame(shared, state_->fn, args, state_->options);
  }
  interpreter::VMOptions vo;
  vo.stdout_sink = state_->options.stdout_sink;
  interpreter::VM vm(vo);
  return eval_frame(vm, state_->fn, args, state_->options);
}

Value CompiledFunction::operator()(const std::vector<Value>& args) const {
  return call(CallArgs{args.data(), args.size(), nullptr});
}

Value CompiledFunction::as_value() const { return interpreter::compiled_value(state_->fn, state_->options); }

ExplainReport explain(const Value& fn, const std::vector<Value>& args, Options options) {
  reset();
  ExplainReport report;
  ExplainReport* saved = recording;
  recording = &report;
  struct Restore {
    ExplainReport* saved;
    ~Restore() { recording = saved; }
  } restore{saved};
  CompiledFunction f = compile(fn, std::move(options));
  try {
    report.result = f(args);
  } catch (const Error& e) {
    report.error = e.full();
  }
  return report;
}

size_t cache_entries(const Value& fn) {
  if (!fn.is(Kind::Function)) return 0;
  std::lock_guard<std::mutex> lock(cache_mu);
  auto it = caches().find(fn.as<FunctionObj>()->code.get());
  return it == caches().end() ? 0 : it->second.entries.size();
}

void mark_dynamic(const Value& tensor, int64_t dim) {
  if (!tensor.is(Kind::Tensor)) throw_error(ErrorKind::TypeError, "mark_dynamic expects a Tensor");
  Tensor t = tensor.as_tensor();
  int64_t d = wrap_dim("mark_dynamic", dim, t.dim());
  if (d >= 64) throw_error(ErrorKind::ValueError, "mark_dynamic: dims past 63 are not supported");
  t.impl()->marked_dynamic |= uint64_t(1) << d;
}

void reset() {
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    caches().clear();
  }
  interpreter::reset_resume_functions();
}

std::string ExplainReport::str() const {
  std::string s = "Graph count: " + std::to_string(graph_count) + "\n";
  s += "Graph break count: " + std::to_string(graph_break_count) + "\n";
  s += "Op count: ";
  int total = 0;
  for (int n : ops_per_graph) total += n;
  s += std::to_string(total) + "\n";
  if (!breaks.empty()) {
    s += "Break reasons:\n";
    for (size_t i = 0; i < breaks.size(); ++i) {
      const GraphBreak& b = breaks[i];
      s += "  " + std::to_string(i + 1) + ". " + b.reason + "\n     at " + b.file + ":" + std::to_string(b.line) +
           " in " + b.function + "\n     hint: " + b.hint + "\n";
    }
  }
  for (size_t i = 0; i < graphs.size(); ++i)
    s += "Graph " + std::to_string(i + 1) + " (" + std::to_string(ops_per_graph[i]) + " ops" +
         (i < autograd_per_graph.size() && !autograd_per_graph[i].empty()
              ? "; runs through the embedder's autograd, not kiln's kernels: " + autograd_per_graph[i]
              : std::string()) +
         "):\n" + graphs[i];
  if (!guards.empty()) {
    s += "Guards:\n";
    for (const auto& g : guards) s += g;
  }
  if (!recompile_reasons.empty()) {
    s += "Recompile reasons:\n";
    for (const auto& r : recompile_reasons) s += "  " + r + "\n";
  }
  char buf[160];
  if (collective_count > 0) {
    std::snprintf(buf, sizeof buf, "Compiler collective: %.3f ms in %d exchange%s, %d restart%s of analysis\n",
                  collective_ms, collective_count, collective_count == 1 ? "" : "s", collective_restarts,
                  collective_restarts == 1 ? "" : "s");
    s += buf;
  }
  if (guard_collective_count > 0) {
    std::snprintf(buf, sizeof buf, "Guard collective: %.3f ms in %d exchange%s\n", guard_collective_ms,
                  guard_collective_count, guard_collective_count == 1 ? "" : "s");
    s += buf;
  }
  return s;
}

}  // namespace kiln
