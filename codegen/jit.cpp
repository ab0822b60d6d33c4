#include "codegen/jit.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/LICM.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Transforms/Scalar/LoopPassManager.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <spdlog/spdlog.h>

#include "codegen/compile_cache.h"
#include "codegen/host_cpu.h"
#include "output_graph/backend.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/base/thread_pool.h"

namespace kiln::codegen {
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

[[noreturn]] void fail(const std::string& what) {
  throw_error(ErrorKind::RuntimeError, "llvm backend: " + what);
}

struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::mutex mu;  // the JIT's symbol table
  std::unordered_map<std::string, std::vector<KernelFn>> loaded;  // content key -> entry points
};

Jit& jit() {
  static Jit* j = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // The kernels call SLEEF by name; make its symbols visible to the
    // process-wide search below whatever the executable linked.
    std::string err;
    if (llvm::sys::DynamicLibrary::LoadLibraryPermanently("libsleef.so.3", &err))
      fail("cannot load SLEEF (libsleef.so.3, Debian's libsleef3): " + err);
    auto* out = new Jit;
    const auto t0 = std::chrono::steady_clock::now();
    // The host as host_cpu() already detected it (LLJIT would detect it again).
    const HostCpu& cpu = host_cpu();
    llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(cpu.triple)};
    jtmb.setCPU(cpu.name);
    std::vector<std::string> features;
    for (size_t a = 0, b; a < cpu.features.size(); a = b + 1) {
      b = cpu.features.find(',', a);
      if (b == std::string::npos) b = cpu.features.size();
      features.push_back(cpu.features.substr(a, b - a));
    }
    jtmb.addFeatures(features);
    // kiln adds only object files to this JIT (compile_objects uses its
    // own TargetMachine, made on the first cold compile), so the JIT's IR
    // compiler is never called and its data layout only mangles symbol
    // names. Left to LLJIT, each would build a TargetMachine: ~0.3 ms of
    // a warm start that loads every kernel from the disk cache in 1.5.
    // ELF's mangling ("m:e": no global prefix) is the part that matters.
    struct NoIRCompiler : llvm::orc::IRCompileLayer::IRCompiler {
      NoIRCompiler() : IRCompiler(llvm::orc::IRSymbolMapper::ManglingOptions{}) {}
      llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module& m) override {
        return llvm::make_error<llvm::StringError>("kiln's JIT takes object files only; IR module " +
                                                       m.getModuleIdentifier() + " was added",
                                                   llvm::inconvertibleErrorCode());
      }
    };
    auto built = llvm::orc::LLJITBuilder()
                     .setJITTargetMachineBuilder(std::move(jtmb))
                     .setDataLayout(llvm::DataLayout("e-m:e"))
                     .setCompileFunctionCreator([](llvm::orc::JITTargetMachineBuilder)
                                                    -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                                                  return std::make_unique<NoIRCompiler>();
                                                })
                     .create();
    if (!built) fail("cannot create the JIT: " + llvm::toString(built.takeError()));
    out->jit = std::move(*built);
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        out->jit->getDataLayout().getGlobalPrefix());
    if (!gen) fail("cannot search the process for symbols: " + llvm::toString(gen.takeError()));
    out->jit->getMainJITDylib().addGenerator(std::move(*gen));
    if (auto* lg = log::get("output_code")) lg->info("JIT start-up: {:.2f} ms", ms_since(t0));
    return out;
  }();
  return *j;
}

std::string symbol_of(const std::string& prefix, size_t i) { return prefix + "_" + std::to_string(i); }

}  // namespace

// The optimisation pipeline (KILN_LLVM_PIPELINE, for measuring; see
// optimize_module and benchmarks/RESULTS.md, issue 17).
const std::string& llvm_pipeline() {
  static const std::string p = [] {
    const char* e = std::getenv("KILN_LLVM_PIPELINE");
    std::string v = e && *e ? e : "kiln";
    if (v != "kiln" && v != "O1" && v != "O2" && v != "O3")
      fail("KILN_LLVM_PIPELINE: expected kiln, O1, O2 or O3, got '" + v + "'");
    return v;
  }();
  return p;
}

namespace {

// The fingerprint is raw bytes (it is only hashed): every field lowering
// reads, each with a tag, in a fixed order. Built on every compile, warm
// ones included, so it is kept cheap (no text formatting).
struct Bytes {
  std::string s;
  template <class T>
  void put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void dim(const Dim& d) {
    put(d.coef);
    put(uint32_t(d.syms.size()));
    for (int x : d.syms) put(int32_t(x));
  }
  void dims(const Dims& ds) {
    put(uint32_t(ds.size()));
    for (const Dim& d : ds) dim(d);
  }
  void access(const Access& a) {
    put(int32_t(a.buffer));
    dim(a.offset);
    dims(a.strides);
  }
};

}  // namespace

const std::string& codegen_environment() {
  static const std::string env = std::string("kiln ") + KILN_VERSION + "; LLVM " + LLVM_VERSION_STRING +
                                 "; kernel ABI 2; lowering " + lowering_build_stamp() + "; pipeline " +
                                 llvm_pipeline() + " " + __DATE__ + " " + __TIME__ + "; " + host_cpu().fingerprint();
  return env;
}

namespace {

// One kernel's content, with its buffers as its own indices (and their
// dtypes): kernels equal here compile to the same function whatever
// program buffers they read (a deep model's identical blocks).
void put_kernel(Bytes& b, const Program& p, const Kernel& k) {
  auto local = [&](int buffer) {
    for (size_t l = 0; l < k.buffers.size(); ++l)
      if (k.buffers[l] == buffer) return int32_t(l);
    return int32_t(-1);
  };
  auto access = [&](const Access& a) {
    b.put(local(a.buffer));
    b.dim(a.offset);
    b.dims(a.strides);
  };
  b.put(uint32_t(p.syms.size()));
  b.put(uint32_t(k.buffers.size()));
  for (int buf : k.buffers) b.put(uint8_t(p.buffers[size_t(buf)].dtype));
  b.put(uint8_t(k.kind));
  b.put(uint8_t(k.compute));
  b.put(int32_t(k.input));
  b.put(int32_t(k.weight));
  b.put(int32_t(k.bias));
  b.put(k.eps);
  b.put(int32_t(k.epilogue));
  b.dims(k.outer);
  b.dims(k.inner);
  b.put(uint32_t(k.exprs.size()));
  for (const Expr& e : k.exprs) {
    b.put(uint8_t(e.kind));
    b.put(uint8_t(e.dtype));
    b.put(uint16_t(e.op));
    b.put(int32_t(e.a));
    b.put(int32_t(e.b));
    b.put(int32_t(e.c));
    b.put(int32_t(e.access));
    b.put(e.value);
  }
  b.put(uint32_t(k.accesses.size()));
  for (const Access& a : k.accesses) access(a);
  access(k.store);
}

}  // namespace

std::string kernel_key(const Program& p, const Kernel& k) {
  Bytes b;
  put_kernel(b, p, k);
  return std::move(b.s);
}

std::string kernel_fingerprint(const Program& p) {
  Bytes b;
  b.s.reserve(4096);
  b.put(uint32_t(p.kernels.size()));
  for (const Kernel& k : p.kernels) {
    const size_t at = b.s.size();
    b.put(uint32_t(0));  // this kernel's length, so the concatenation parses one way
    put_kernel(b, p, k);
    const uint32_t len = uint32_t(b.s.size() - at - 4);
    std::memcpy(&b.s[at], &len, 4);
  }
  return std::move(b.s);
}

size_t distinct_kernels(const Program& p) {
  std::unordered_set<std::string> keys;
  for (const Kernel& k : p.kernels) keys.insert(kernel_key(p, k));
  return keys.size();
}

namespace {

// One TargetMachine per thread: LLVM's are not safe to share between
// compiles running at once (compile_kernels compiles a program's parts in
// parallel), and the pool's threads live as long as the process.
llvm::TargetMachine& target_machine() {
  thread_local std::unique_ptr<llvm::TargetMachine> tm;
  if (!tm) {
    const HostCpu& cpu = host_cpu();
    std::string err;
    const llvm::Target* target = llvm::TargetRegistry::lookupTarget(cpu.triple, err);
    if (!target) fail("no LLVM target for " + cpu.triple + ": " + err);
    llvm::TargetOptions opts;
    // Code generation at the pipeline's level: O1 and kiln's clean-up list
    // at Less, O2 at Default, O3 at Aggressive.
    const std::string& pl = llvm_pipeline();
    const llvm::CodeGenOptLevel cg = pl == "O3"   ? llvm::CodeGenOptLevel::Aggressive
                                     : pl == "O2" ? llvm::CodeGenOptLevel::Default
                                                  : llvm::CodeGenOptLevel::Less;
    tm.reset(target->createTargetMachine(cpu.triple, cpu.name, cpu.features, opts, llvm::Reloc::PIC_, std::nullopt,
                                         cg));
    if (!tm) fail("cannot create a target machine for " + cpu.name);
  }
  return *tm;
}

}  // namespace

std::string compile_object(const Program& program, const std::string& prefix, CompileTimes* times, size_t begin,
                           size_t end) {
  end = std::min(end, program.kernels.size());
  jit();  // LLVM's targets initialized
  auto t0 = std::chrono::steady_clock::now();
  const HostCpu& cpu = host_cpu();
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>("kiln", ctx);
  llvm::TargetMachine& tm = target_machine();
  module->setDataLayout(tm.createDataLayout());
  module->setTargetTriple(cpu.triple);
  // A kernel equal to one already lowered here (kernel_key) is an alias of
  // its function: a model's repeated blocks cost LLVM once.
  std::unordered_map<std::string, std::string> lowered;  // kernel key -> symbol
  for (size_t i = begin; i < end; ++i) {
    const std::string sym = symbol_of(prefix, i);
    auto [it, fresh] = lowered.emplace(kernel_key(program, program.kernels[i]), sym);
    if (fresh) {
      lower_kernel(*module, program, program.kernels[i], sym, cpu);
      continue;
    }
    llvm::Function* f = module->getFunction(it->second);
    if (!f) fail("lowered kernel " + it->second + " is missing from its module (a kiln bug)");
    llvm::GlobalAlias::create(f->getValueType(), 0, llvm::GlobalValue::ExternalLinkage, sym, f, module.get());
  }
  std::string verify;
  llvm::raw_string_ostream vs(verify);
  if (llvm::verifyModule(*module, &vs)) fail("lowering produced invalid IR (a kiln bug): " + verify);
  auto t1 = std::chrono::steady_clock::now();

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  // Lowering vectorizes explicitly; LLVM's loop and SLP vectorizers would
  // only re-examine (and re-vectorize the scalar tails of) what is already
  // vector code, at a large share of the compile time.
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = false;
  tuning.SLPVectorization = false;
  llvm::PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // Lowering vectorizes explicitly, so every pipeline runs without LLVM's
  // vectorizers (tuning above). "kiln": the clean-up list kiln ran before
  // issue 17 (accumulators into registers, address arithmetic simplified
  // and hoisted, a tidy CFG: 8 passes), code generation at Less; "O1".."O3":
  // the new pass manager's default module pipeline. Chosen by measurement
  // (benchmarks/RESULTS.md, issue 17): O2/O3 cost 2-3x the compile time
  // (12-16 ms a kernel against 5-9, a whole MLP 104-151 ms cold against
  // 42-60) and ran no kernel of the codegen and kernel benchmarks faster
  // (O3 made layer_norm ~3x slower), so the clean-up list stays the default.
  llvm::ModulePassManager mpm;
  const std::string& pl = llvm_pipeline();
  if (pl == "kiln") {
    llvm::FunctionPassManager fpm;
    fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
    fpm.addPass(llvm::EarlyCSEPass(true));
    fpm.addPass(llvm::InstCombinePass());
    fpm.addPass(llvm::SimplifyCFGPass());
    {
      llvm::LoopPassManager lpm;
      lpm.addPass(llvm::LICMPass(llvm::LICMOptions()));
      fpm.addPass(llvm::createFunctionToLoopPassAdaptor(std::move(lpm), /*UseMemorySSA=*/true));
    }
    fpm.addPass(llvm::EarlyCSEPass(true));
    fpm.addPass(llvm::InstCombinePass());
    fpm.addPass(llvm::SimplifyCFGPass());
    mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  } else {
    mpm = pb.buildPerModuleDefaultPipeline(pl == "O1"   ? llvm::OptimizationLevel::O1
                                           : pl == "O2" ? llvm::OptimizationLevel::O2
                                                        : llvm::OptimizationLevel::O3);
  }
  mpm.run(*module, mam);
  auto t2 = std::chrono::steady_clock::now();

  if (auto* lg = log::get("output_code")) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    module->print(os, nullptr);
    lg->info("kernels {}:\n{}\n{}", prefix, program.summary(), ir);
  }
  llvm::SmallVector<char, 0> obj;
  llvm::raw_svector_ostream os(obj);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    fail("the target cannot emit object files");
  pm.run(*module);
  if (times) {
    times->lower_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    times->optimize_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    times->codegen_ms = ms_since(t2);
  }
  return std::string(obj.begin(), obj.end());
}

namespace {

// One object file: kernels [begin, end) of a program.
struct Part {
  uint32_t begin = 0, end = 0;
  std::string object;
};

// The cache entry of a program compiled in shares (one object per rank):
// "KBDL", a u32 count, then per part u32 begin, u32 end, u64 length and the
// bytes. It lives inside a verified cache entry (header, checksum), so this
// only has to refuse what kiln itself would not write: parts must tile
// [0, kernels) in order.
std::string encode_bundle(const std::vector<Part>& parts) {
  Bytes b;
  b.s = "KBDL";
  b.put(uint32_t(parts.size()));
  for (const Part& p : parts) {
    b.put(p.begin);
    b.put(p.end);
    b.put(uint64_t(p.object.size()));
    b.s += p.object;
  }
  return std::move(b.s);
}

std::optional<std::vector<Part>> decode_bundle(const std::string& s, size_t kernels) {
  size_t at = 4;
  auto get = [&](auto& v) {
    if (s.size() - at < sizeof v) return false;
    std::memcpy(&v, s.data() + at, sizeof v);
    at += sizeof v;
    return true;
  };
  uint32_t count = 0;
  if (s.size() < 4 || s.compare(0, 4, "KBDL") != 0 || !get(count) || count == 0 || count > kernels)
    return std::nullopt;
  std::vector<Part> parts(count);
  uint32_t next = 0;
  for (Part& p : parts) {
    uint64_t len = 0;
    if (!get(p.begin) || !get(p.end) || !get(len) || p.begin != next || p.end <= p.begin || len > s.size() - at)
      return std::nullopt;
    p.object = s.substr(at, len);
    at += len;
    next = p.end;
  }
  if (next != kernels || at != s.size()) return std::nullopt;
  return parts;
}

}  // namespace

uint64_t kernel_compile_cost(const Kernel& k) {
  // Base costs from the per-kind compile times of benchmarks/RESULTS.md
  // (issue 5: pointwise 5.4 ms, sum 7.6, mean 7.1, amax 12.6, layer_norm
  // 13.8, softmax 19.2, log_softmax 21.5; units of 0.1 ms), plus what grows
  // with the kernel's body.
  uint64_t base = 0;
  switch (k.kind) {
    case KernelKind::Pointwise: base = 50; break;
    case KernelKind::Sum: base = 70; break;
    case KernelKind::Mean: base = 70; break;
    case KernelKind::Amax: base = 120; break;
    case KernelKind::LayerNorm: base = 130; break;
    case KernelKind::Softmax: base = 180; break;
    case KernelKind::LogSoftmax: base = 200; break;
  }
  return base + 4 * k.exprs.size() + 2 * k.accesses.size() + 3 * (k.outer.size() + k.inner.size());
}

std::vector<std::pair<uint32_t, uint32_t>> partition_kernels(const Program& program, int parts) {
  std::vector<uint64_t> cost;
  for (const Kernel& k : program.kernels) cost.push_back(kernel_compile_cost(k));
  return partition_by_cost(cost, parts);
}

std::vector<std::pair<uint32_t, uint32_t>> partition_by_cost(const std::vector<uint64_t>& cost, int parts) {
  const size_t n = cost.size();
  if (parts < 1) parts = 1;
  std::vector<uint64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const uint64_t total = prefix[n];
  const uint64_t P = uint64_t(parts);
  // Boundary k sits at the prefix sum nearest to k/P of the total (scaled
  // by P, so all in integers), never before the previous boundary.
  std::vector<std::pair<uint32_t, uint32_t>> out;
  size_t prev = 0;
  for (uint64_t k = 1; k <= P; ++k) {
    size_t cut = n;
    if (k < P) {
      const uint64_t target = k * total;  // compare prefix[i] * P with it
      cut = prev;
      while (cut < n && prefix[cut + 1] * P <= target) ++cut;
      if (cut < n && prefix[cut] * P <= target) {
        const uint64_t below = target - prefix[cut] * P, above = prefix[cut + 1] * P - target;
        if (above < below) ++cut;
      }
    }
    out.emplace_back(uint32_t(prev), uint32_t(cut));
    prev = cut;
  }
  return out;
}

CompiledKernels compile_kernels(const Program& program) {
  CompiledKernels out;
  if (program.kernels.empty()) return out;
  const size_t n = program.kernels.size();
  const std::string fingerprint = kernel_fingerprint(program);
  const CacheKey key = cache_key({"kernels", fingerprint});
  out.key = key.hex();
  const std::string prefix = "kiln_" + out.key;
  Jit& J = jit();
  output_graph::SharedCompile* sc = output_graph::current_shared_compile();
  if (sc && sc->size < 2) sc = nullptr;
  bool in_process = false;
  {
    std::lock_guard<std::mutex> lock(J.mu);
    if (auto it = J.loaded.find(out.key); it != J.loaded.end()) {
      out.fns = it->second;
      out.from = CompiledKernels::From::Process;
      in_process = true;
    }
  }
  // Alone, a program already loaded is simply reused. With other ranks it
  // still takes part in the plan: they may lack it.
  if (in_process && !sc) return out;
  CompileCache& cache = CompileCache::global(codegen_environment());
  // A program compiled in shares is cached as a bundle of their objects,
  // under its own key (a lone compile's single object stays under `key`).
  const CacheKey bundle_key = cache_key({"kernel bundle", fingerprint});
  std::vector<Part> parts;  // what this process links
  if (!in_process) {
    const CacheStats before = cache.stats();
    if (std::optional<std::string> obj = cache.get(key)) {
      parts.push_back(Part{0, uint32_t(n), std::move(*obj)});
    } else if (std::optional<std::string> bundle = cache.get(bundle_key)) {
      if (auto decoded = decode_bundle(*bundle, n)) parts = std::move(*decoded);
    }
    if (!parts.empty())
      out.from = cache.stats().disk_hits > before.disk_hits ? CompiledKernels::From::DiskCache
                                                            : CompiledKernels::From::MemoryCache;
  }
  const bool have = in_process || !parts.empty();

  if (sc) {
    // The program key the ranks compare also names this host's CPU: code
    // compiled for another CPU is another program, never linked here.
    const CacheKey program_key = cache_key({"shared kernels", codegen_environment(), fingerprint});
    auto t0 = std::chrono::steady_clock::now();
    const int writer = sc->agree(program_key.hi, program_key.lo, uint32_t(n), have);
    out.exchange_ms += ms_since(t0);
    if (writer >= 0) {
      const auto ranges = partition_kernels(program, sc->size);
      const auto [b, e] = ranges[size_t(sc->rank)];
      output_graph::KernelPart mine{b, e, {}};
      if (b < e) {
        CompileTimes times;
        mine.object = compile_object(program, prefix, &times, b, e);
        out.lower_ms = times.lower_ms;
        out.optimize_ms = times.optimize_ms;
        out.codegen_ms = times.codegen_ms;
      }
      out.compiled_here = e - b;
      auto t1 = std::chrono::steady_clock::now();
      std::vector<output_graph::KernelPart> all = sc->exchange(mine);
      out.exchange_ms += ms_since(t1);
      // Checksums and program keys were verified by the exchange; the
      // ranges are this rank's own split, so a rank that sent other
      // kernels than its share is refused here, before anything links.
      if (all.size() != size_t(sc->size))
        fail("shared compile: " + std::to_string(all.size()) + " shares for " + std::to_string(sc->size) + " ranks");
      for (size_t r = 0; r < all.size(); ++r)
        if (all[r].begin != ranges[r].first || all[r].end != ranges[r].second || (all[r].begin < all[r].end) != !all[r].object.empty())
          fail("shared compile: rank " + std::to_string(r) + " sent kernels [" + std::to_string(all[r].begin) + ", " +
               std::to_string(all[r].end) + ") of program " + out.key + " but its share is [" +
               std::to_string(ranges[r].first) + ", " + std::to_string(ranges[r].second) + "); not linking them");
      out.ranks = sc->size;
      out.received = uint32_t(n) - out.compiled_here;
      if (!have) {
        parts.clear();
        for (auto& p : all)
          if (p.begin < p.end) parts.push_back(Part{p.begin, p.end, std::move(p.object)});
        out.from = CompiledKernels::From::Compiled;
        // The disk gets the combined result once: from the first rank that
        // lacked it (ranks sharing a cache directory then all find it);
        // every rank keeps it in memory.
        cache.put(bundle_key, encode_bundle(parts), sc->rank == writer);
      }
      // A rank that had the code compiled its share for the others only,
      // and links its own copy.
    }
  }
  if (in_process) return out;
  if (parts.empty()) {
    // Alone, the program's kernels are compiled in parts on the thread
    // pool, one LLVM module each: LLVM compiles one module on one thread.
    // A kernel equal to an earlier one costs nothing where it can be an
    // alias; in another part than its first it is compiled again there.
    std::vector<uint64_t> cost(n);
    std::vector<std::string> keys(n);
    std::unordered_set<std::string> seen;
    for (size_t i = 0; i < n; ++i) {
      keys[i] = kernel_key(program, program.kernels[i]);
      cost[i] = seen.insert(keys[i]).second ? kernel_compile_cost(program.kernels[i]) : 0;
    }
    int nparts = std::min<int>(runtime::num_threads(), int(seen.size()));
    uint64_t total = 0;
    for (uint64_t c : cost) total += c;
    if (total < 100) nparts = 1;  // under ~10 ms of compiling (cost units of 0.1 ms): not worth a second LLVM set-up
    auto ranges = partition_by_cost(cost, nparts);
    // What each part really compiles: every key first seen in it. Repeated
    // blocks spread over all parts (a GRU's unrolled steps) would make each
    // part compile nearly everything: then one part is faster.
    uint64_t slowest = 0;
    for (const auto& [b, e] : ranges) {
      std::unordered_set<std::string> mine;
      uint64_t c = 0;
      for (uint32_t i = b; i < e; ++i)
        if (mine.insert(keys[i]).second) c += kernel_compile_cost(program.kernels[i]);
      slowest = std::max(slowest, c);
    }
    if (ranges.size() > 1 && 4 * slowest > 3 * total) ranges = partition_by_cost(cost, 1);
    std::vector<CompileTimes> times(ranges.size());
    parts.resize(ranges.size());
    runtime::parallel_for(int64_t(ranges.size()), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const auto [b, e] = ranges[size_t(p)];
        parts[size_t(p)] = Part{b, e, b < e ? compile_object(program, prefix, &times[size_t(p)], b, e) : std::string()};
      }
    });
    parts.erase(std::remove_if(parts.begin(), parts.end(), [](const Part& p) { return p.begin == p.end; }),
                parts.end());
    for (const CompileTimes& t : times) {  // CPU time, summed over the parts
      out.lower_ms += t.lower_ms;
      out.optimize_ms += t.optimize_ms;
      out.codegen_ms += t.codegen_ms;
    }
    out.compiled_here = uint32_t(n);
    out.from = CompiledKernels::From::Compiled;
    if (parts.size() == 1) cache.put(key, parts[0].object);
    else cache.put(bundle_key, encode_bundle(parts));
  }
  auto t1 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(J.mu);
  if (auto it = J.loaded.find(out.key); it != J.loaded.end()) {  // another thread got here first
    out.fns = it->second;
    return out;
  }
  for (const Part& p : parts) {
    auto buf = llvm::MemoryBuffer::getMemBufferCopy(p.object, prefix + "_" + std::to_string(p.begin));
    if (auto err = J.jit->addObjectFile(std::move(buf))) fail("cannot load kernels: " + llvm::toString(std::move(err)));
  }
  out.objects = parts.size();
  for (const Part& p : parts) out.object_bytes += p.object.size();
  for (size_t i = 0; i < n; ++i) {
    auto addr = J.jit->lookup(symbol_of(prefix, i));
    if (!addr) fail("kernel " + symbol_of(prefix, i) + " not found: " + llvm::toString(addr.takeError()));
    out.fns.push_back(addr->toPtr<KernelFn>());
  }
  J.loaded[out.key] = out.fns;
  out.load_ms = ms_since(t1);
  return out;
}

}  // namespace kiln::codegen
