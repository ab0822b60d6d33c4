#include "codegen/jit.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
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
#include "runtime/error.h"
#include "runtime/log.h"

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
  std::unique_ptr<llvm::TargetMachine> tm;
  std::mutex mu;  // the TargetMachine and the JIT's symbol table
  // Made on the first compile: a process that only loads cached kernels
  // never needs one (warm start-up time).
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
    auto built = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
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
                                 "; kernel ABI 1; lowering " + lowering_build_stamp() + "; pipeline " + __DATE__ +
                                 " " + __TIME__ + "; " + host_cpu().fingerprint();
  return env;
}

std::string kernel_fingerprint(const Program& p) {
  Bytes b;
  b.s.reserve(4096);
  b.put(uint32_t(p.syms.size()));
  b.put(uint32_t(p.buffers.size()));
  for (const Buffer& buf : p.buffers) b.put(uint8_t(buf.dtype));
  for (const Kernel& k : p.kernels) {
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
    for (const Access& a : k.accesses) b.access(a);
    b.access(k.store);
  }
  return std::move(b.s);
}

std::string compile_object(const Program& program, const std::string& prefix, CompileTimes* times) {
  Jit& J = jit();
  auto t0 = std::chrono::steady_clock::now();
  const HostCpu& cpu = host_cpu();
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>("kiln", ctx);
  std::lock_guard<std::mutex> lock(J.mu);
  if (!J.tm) {
    std::string err;
    const llvm::Target* target = llvm::TargetRegistry::lookupTarget(cpu.triple, err);
    if (!target) fail("no LLVM target for " + cpu.triple + ": " + err);
    llvm::TargetOptions opts;
    J.tm.reset(target->createTargetMachine(cpu.triple, cpu.name, cpu.features, opts, llvm::Reloc::PIC_,
                                           std::nullopt, llvm::CodeGenOptLevel::Less));
    if (!J.tm) fail("cannot create a target machine for " + cpu.name);
  }
  module->setDataLayout(J.tm->createDataLayout());
  module->setTargetTriple(cpu.triple);
  for (size_t i = 0; i < program.kernels.size(); ++i)
    lower_kernel(*module, program, program.kernels[i], symbol_of(prefix, i), cpu);
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
  llvm::PassBuilder pb(J.tm.get(), tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // Lowering emits straight-line vector code already, so the kernels need
  // clean-up, not a general O2: accumulators into registers (SROA),
  // address and dim arithmetic simplified and hoisted out of the loops
  // (InstCombine, EarlyCSE, LICM), and a tidy CFG. A fraction of O2's
  // compile time, for the same loops.
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
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
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
  if (J.tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    fail("the target cannot emit object files");
  pm.run(*module);
  if (times) {
    times->lower_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    times->optimize_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    times->codegen_ms = ms_since(t2);
  }
  return std::string(obj.begin(), obj.end());
}

CompiledKernels compile_kernels(const Program& program) {
  CompiledKernels out;
  if (program.kernels.empty()) return out;
  const std::string fingerprint = kernel_fingerprint(program);
  const CacheKey key = cache_key({"kernels", fingerprint});
  out.key = key.hex();
  const std::string prefix = "kiln_" + out.key;
  Jit& J = jit();
  {
    std::lock_guard<std::mutex> lock(J.mu);
    if (auto it = J.loaded.find(out.key); it != J.loaded.end()) {
      out.fns = it->second;
      out.from = CompiledKernels::From::Process;
      return out;
    }
  }
  CompileCache& cache = CompileCache::global(codegen_environment());
  const CacheStats before = cache.stats();
  std::optional<std::string> obj = cache.get(key);
  if (obj) {
    out.from = cache.stats().disk_hits > before.disk_hits ? CompiledKernels::From::DiskCache
                                                           : CompiledKernels::From::MemoryCache;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    CompileTimes times;
    obj = compile_object(program, prefix, &times);
    out.lower_ms = times.lower_ms;
    out.optimize_ms = times.optimize_ms;
    out.codegen_ms = times.codegen_ms;
    (void)t0;
    cache.put(key, *obj);
  }
  auto t1 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(J.mu);
  if (auto it = J.loaded.find(out.key); it != J.loaded.end()) {  // another thread got here first
    out.fns = it->second;
    return out;
  }
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(*obj, prefix);
  if (auto err = J.jit->addObjectFile(std::move(buf))) fail("cannot load kernels: " + llvm::toString(std::move(err)));
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    auto addr = J.jit->lookup(symbol_of(prefix, i));
    if (!addr) fail("kernel " + symbol_of(prefix, i) + " not found: " + llvm::toString(addr.takeError()));
    out.fns.push_back(addr->toPtr<KernelFn>());
  }
  J.loaded[out.key] = out.fns;
  out.load_ms = ms_since(t1);
  return out;
}

}  // namespace kiln::codegen
