// Benchmarks of the llvm backend (issue 5), one JSON object per line; run by
// benchmarks/codegen.py, which measures the peers (numpy, numba, torch) and
// checks kiln's results against numpy's.
//
//   bench_codegen triad N REPS            STREAM-like a[i] = b[i] + s*c[i] on float32
//                                         arrays, one std::thread per core: GB/s (3 arrays)
//   bench_codegen pointwise CHAIN N REPS [DIR]
//                                         f(x) = CHAIN on N float32 (CHAIN: "tanh" is the
//                                         8-op tanh(x*1.5+0.5)*x + exp(-x*x), "arith" is
//                                         (x*1.5+0.5)*x - x*0.25), llvm and eager backends;
//                                         DIR: write x.bin, y.bin (raw float32) for checking
//   bench_codegen mlp B D H BLOCKS REPS [DIR]
//                                         Sequential of BLOCKS x LayerNorm(x + fc2(gelu(fc1(x))))
//                                         (d=D, hidden=H) on randn(B, D): llvm and the same
//                                         sgemm calls alone (taking turns, REPS each: the best
//                                         and every sample), eager; DIR: x.bin, y.bin, params.json
//                                         and one .bin per parameter
//   bench_codegen kernels COUNT           compile COUNT distinct small graphs one at a time:
//                                         schedule/compile ms and kernels of each
//   bench_codegen blas                    which BLAS kernels kiln runs (runtime/kernels/blas.h)
//   bench_codegen model B D H BLOCKS      compile the MLP once in this process (cold or warm,
//                                         as KILN_CACHE_DIR makes it): the backend's report

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "codegen/llvm_backend.h"
#include "interpreter/kiln_api.h"
#include "interpreter/vm.h"
#include "runtime/kernels/blas.h"
#include "runtime/nn/module.h"

using namespace kiln;
using namespace kiln::runtime;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double best_of(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o + "\"";
}

Options llvm_options() {
  Options o;
  o.backend = "llvm";
  return o;
}

Options eager_options() {
  Options o;
  o.backend = "eager";
  return o;
}

std::string report_json() {
  const codegen::BackendReport& r = codegen::last_report();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"kernels\": %zu, \"gemms\": %zu, \"eager_steps\": %zu, \"cache\": %s, \"fell_back\": %s, "
                "\"reason\": %s, \"schedule_ms\": %.3f, \"compile_ms\": %.3f, \"total_ms\": %.3f",
                r.kernels, r.gemms, r.eager_steps, json_str(r.cache).c_str(), r.fell_back ? "true" : "false",
                json_str(r.reason).c_str(), r.schedule_ms, r.compile_ms, r.total_ms);
  return buf;
}

void write_raw(const std::string& path, const Tensor& t0) {
  Tensor t = t0.contiguous();
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(t.raw_data()), std::streamsize(t.numel() * int64_t(itemsize(t.dtype()))));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// max |a-b| / max |b| over float32 tensors of one shape.
double max_rel_diff(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0.contiguous(), b = b0.contiguous();
  if (a.sizes() != b.sizes() || a.dtype() != DType::Float32 || b.dtype() != DType::Float32) return 1e30;
  const float *pa = a.data<float>(), *pb = b.data<float>();
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    num = std::max(num, double(std::fabs(pa[i] - pb[i])));
    den = std::max(den, double(std::fabs(pb[i])));
  }
  return den > 0 ? num / den : num;
}

// ---- triad ----------------------------------------------------------------

int triad(int64_t n, int reps) {
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  // Uninitialised: each thread first touches its own chunk, as in STREAM.
  std::unique_ptr<float[]> a(new float[size_t(n)]), b(new float[size_t(n)]), c(new float[size_t(n)]);
  auto par = [&](const std::function<void(int64_t, int64_t)>& fn) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] { fn(n * t / threads, n * (t + 1) / threads); });
    for (auto& th : ts) th.join();
  };
  par([&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) a[size_t(i)] = 0.f, b[size_t(i)] = 1.f, c[size_t(i)] = 2.f;
  });
  const float s = 3.f;
  float* __restrict pa = a.get();
  const float* __restrict pb = b.get();
  const float* __restrict pc = c.get();
  const double t = best_of(reps, [&] {
    par([&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
  });
  // The same triad writing a freshly allocated array each time (as a
  // function returning a new tensor does): page faults and the kernel's
  // zeroing of new pages included. Context for the figures, not the target.
  float check = 0;
  const double t_fresh = best_of(reps, [&] {
    std::unique_ptr<float[]> out(new float[size_t(n)]);
    float* __restrict po = out.get();
    par([&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = pb[i] + s * pc[i];
    });
    check = po[n / 3];
  });
  if (a[size_t(n / 2)] != 7.f || check != 7.f) {
    std::fprintf(stderr, "triad: wrong result\n");
    return 1;
  }
  std::printf("{\"mode\": \"triad\", \"n\": %lld, \"threads\": %d, \"seconds\": %.6f, \"gbps\": %.3f, "
              "\"fresh_out_seconds\": %.6f, \"fresh_out_gbps\": %.3f}\n",
              (long long)n, threads, t, 3.0 * 4.0 * double(n) / t / 1e9, t_fresh,
              3.0 * 4.0 * double(n) / t_fresh / 1e9);
  return 0;
}

// ---- pointwise ------------------------------------------------------------

const char* kSetup = R"(
.func setup(n)
    LOAD_GLOBAL manual_seed
    LOAD_CONST 0
    CALL 1
    POP_TOP
    LOAD_GLOBAL randn
    LOAD_FAST n
    CALL 1
    RETURN_VALUE
.end
)";

// tanh(x*1.5+0.5)*x + exp(-x*x): mul add tanh mul neg mul exp add (8 ops)
const char* kTanhChain = R"(
.func f(x)
    LOAD_GLOBAL tanh
    LOAD_FAST x
    LOAD_CONST 1.5
    BINARY_OP *
    LOAD_CONST 0.5
    BINARY_OP +
    CALL 1
    LOAD_FAST x
    BINARY_OP *
    LOAD_GLOBAL exp
    LOAD_FAST x
    UNARY_OP -
    LOAD_FAST x
    BINARY_OP *
    CALL 1
    BINARY_OP +
    RETURN_VALUE
.end
)";

// (x*1.5+0.5)*x - x*0.25: mul add mul mul sub (5 ops)
const char* kArithChain = R"(
.func f(x)
    LOAD_FAST x
    LOAD_CONST 1.5
    BINARY_OP *
    LOAD_CONST 0.5
    BINARY_OP +
    LOAD_FAST x
    BINARY_OP *
    LOAD_FAST x
    LOAD_CONST 0.25
    BINARY_OP *
    BINARY_OP -
    RETURN_VALUE
.end
)";

int pointwise(const std::string& chain, int64_t n, int reps, const std::string& dir) {
  Program p = assemble(std::string(kSetup) + (chain == "arith" ? kArithChain : kTanhChain), "pointwise.kbc");
  interpreter::VM vm;
  Value x = vm.run(p, "setup", {Value::integer(n)});
  CompiledFunction fl = compile(p.global("f"), llvm_options());
  auto t0 = Clock::now();
  Value y = fl({x});  // trace + backend compile + one run
  const double first = seconds_since(t0);
  const std::string rep = report_json();
  const double t_llvm = best_of(reps, [&] { y = fl({x}); });

  // The eager backend. reset() first: kiln's compiled entries are kept per
  // code object whatever the backend, so without it this would reuse the
  // llvm entry.
  reset();
  CompiledFunction fe = compile(p.global("f"), eager_options());
  Value ye = fe({x});
  const double t_eager = best_of(std::max(3, reps / 4), [&] { ye = fe({x}); });
  const double vs_eager = max_rel_diff(y.as_tensor(), ye.as_tensor());
  if (!dir.empty()) {
    write_raw(dir + "/x.bin", x.as_tensor());
    write_raw(dir + "/y.bin", y.as_tensor());
  }
  const double bytes = 2.0 * 4.0 * double(n);  // x read, y written
  std::printf("{\"mode\": \"pointwise\", \"chain\": %s, \"n\": %lld, \"first_call_s\": %.6f, \"seconds\": %.6f, "
              "\"gbps\": %.3f, \"eager_seconds\": %.6f, \"eager_gbps\": %.3f, \"rel_diff_vs_eager\": %.3g, "
              "\"dtype\": %s, %s}\n",
              json_str(chain).c_str(), (long long)n, first, t_llvm, bytes / t_llvm / 1e9, t_eager,
              bytes / t_eager / 1e9, vs_eager, json_str(dtype_name(y.as_tensor().dtype())).c_str(), rep.c_str());
  return 0;
}

// ---- the MLP ----------------------------------------------------------------

// Block from examples/demo_model.kbc: LayerNorm(x + fc2(gelu(fc1(x)))).
std::string mlp_program(int64_t b, int64_t d, int64_t h, int blocks) {
  std::string s = R"(
.class Block(Module)
.func __init__(self, d, hidden)
    LOAD_GLOBAL Linear
    LOAD_FAST d
    LOAD_FAST hidden
    CALL 2
    LOAD_FAST self
    STORE_ATTR fc1
    LOAD_GLOBAL GELU
    CALL 0
    LOAD_FAST self
    STORE_ATTR act
    LOAD_GLOBAL Linear
    LOAD_FAST hidden
    LOAD_FAST d
    CALL 2
    LOAD_FAST self
    STORE_ATTR fc2
    LOAD_GLOBAL LayerNorm
    LOAD_FAST d
    CALL 1
    LOAD_FAST self
    STORE_ATTR norm
    LOAD_CONST None
    RETURN_VALUE
.end
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR norm
    LOAD_FAST x
    LOAD_FAST self
    LOAD_ATTR fc2
    LOAD_FAST self
    LOAD_ATTR act
    LOAD_FAST self
    LOAD_ATTR fc1
    LOAD_FAST x
    CALL 1
    CALL 1
    CALL 1
    BINARY_OP +
    CALL 1
    RETURN_VALUE
.end
.endclass

.func f(m, x)
    LOAD_FAST m
    LOAD_FAST x
    CALL 1
    RETURN_VALUE
.end

.func make_model()
    LOAD_GLOBAL manual_seed
    LOAD_CONST 0
    CALL 1
    POP_TOP
    LOAD_GLOBAL Sequential
)";
  for (int i = 0; i < blocks; ++i)
    s += "    LOAD_GLOBAL Block\n    LOAD_CONST " + std::to_string(d) + "\n    LOAD_CONST " + std::to_string(h) +
         "\n    CALL 2\n";
  s += "    CALL " + std::to_string(blocks) + R"(
    LOAD_METHOD eval
    CALL_METHOD 0
    RETURN_VALUE
.end

.func make_input()
    LOAD_GLOBAL randn
    LOAD_CONST )" + std::to_string(b) + "\n    LOAD_CONST " + std::to_string(d) + R"(
    CALL 2
    RETURN_VALUE
.end
)";
  return s;
}

int mlp(int64_t b, int64_t d, int64_t h, int blocks, int reps, const std::string& dir) {
  Program p = assemble(mlp_program(b, d, h, blocks), "mlp.kbc");
  interpreter::VM vm;
  Value m = vm.run(p, "make_model");
  Value x = vm.run(p, "make_input");

  CompiledFunction fl = compile(p.global("f"), llvm_options());
  auto t0 = Clock::now();
  Value y = fl({m, x});
  const double first = seconds_since(t0);
  const std::string rep = report_json();
  const std::string summary = codegen::last_report().summary;
  fl({m, x});

  // The same sgemm calls alone: per block x[B,D] W1[H,D]^T -> [B,H], then
  // [B,H] W2[D,H]^T -> [B,D] (what Linear does, before bias and the rest),
  // on the model's own weights, into preallocated buffers.
  std::vector<Tensor> w1, w2;
  for (auto& [name, v] : named_parameters(m.as<ModuleObj>())) {
    auto ends = [&](const char* suf) {
      const std::string s(suf);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends("fc1.weight")) w1.push_back(v.as_tensor().contiguous());
    if (ends("fc2.weight")) w2.push_back(v.as_tensor().contiguous());
  }
  std::vector<float> act(size_t(b * d)), hid(size_t(b * h)), out(size_t(b * d));
  std::copy_n(x.as_tensor().contiguous().data<float>(), b * d, act.data());
  auto blas_alone = [&] {
    const float* in = act.data();
    for (int i = 0; i < blocks; ++i) {
      // The BLAS kiln calls (runtime/kernels/blas.h), on the same shapes.
      kiln::runtime::gemm_f32(false, true, b, h, d, in, d, w1[size_t(i)].data<float>(), d, hid.data(), h);
      kiln::runtime::gemm_f32(false, true, b, d, h, hid.data(), h, w2[size_t(i)].data<float>(), h, out.data(), d);
      in = out.data();
    }
  };
  blas_alone();
  // kiln's forward and the sgemm calls alone take turns, `reps` times each:
  // on a shared machine, load from other processes then falls on both
  // alike, not on whichever would have run second. Every pair is reported.
  std::vector<double> ts_llvm, ts_blas;
  for (int r = 0; r < reps; ++r) {
    ts_llvm.push_back(best_of(1, [&] { y = fl({m, x}); }));
    ts_blas.push_back(best_of(1, blas_alone));
  }
  auto json_list = [](const std::vector<double>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + std::to_string(v[i]);
    return o + "]";
  };
  const double t_llvm = *std::min_element(ts_llvm.begin(), ts_llvm.end());
  const double t_blas = *std::min_element(ts_blas.begin(), ts_blas.end());

  reset();  // see pointwise()
  CompiledFunction fe = compile(p.global("f"), eager_options());
  Value ye = fe({m, x});
  const double t_eager = best_of(reps, [&] { ye = fe({m, x}); });
  const double vs_eager = max_rel_diff(y.as_tensor(), ye.as_tensor());

  if (!dir.empty()) {
    write_raw(dir + "/x.bin", x.as_tensor());
    write_raw(dir + "/y.bin", y.as_tensor());
    std::ofstream js(dir + "/params.json");
    js << "[";
    int i = 0;
    for (auto& [name, v] : named_parameters(m.as<ModuleObj>())) {
      const std::string file = "p" + std::to_string(i) + ".bin";
      write_raw(dir + "/" + file, v.as_tensor());
      js << (i++ ? ", " : "") << "{\"name\": " << json_str(name) << ", \"file\": \"" << file << "\", \"shape\": [";
      const Shape& sz = v.as_tensor().sizes();
      for (size_t k = 0; k < sz.size(); ++k) js << (k ? ", " : "") << sz[k];
      js << "]}";
    }
    js << "]\n";
  }
  const double flops = double(blocks) * 2.0 * 2.0 * double(b) * double(d) * double(h);
  std::printf("{\"mode\": \"mlp\", \"batch\": %lld, \"d\": %lld, \"hidden\": %lld, \"blocks\": %d, "
              "\"first_call_s\": %.6f, \"seconds\": %.6f, \"eager_seconds\": %.6f, \"blas_seconds\": %.6f, "
              "\"samples\": %s, \"blas_samples\": %s, "
              "\"gemm_gflops\": %.2f, \"rel_diff_vs_eager\": %.3g, \"summary\": %s, %s}\n",
              (long long)b, (long long)d, (long long)h, blocks, first, t_llvm, t_eager, t_blas,
              json_list(ts_llvm).c_str(), json_list(ts_blas).c_str(), flops / t_blas / 1e9, vs_eager,
              json_str(summary).c_str(), rep.c_str());
  return 0;
}

// ---- compile time -----------------------------------------------------------

// Graph i of `kernels`: eight shapes of small graph (pointwise chains,
// softmax, log_softmax, layer_norm, sum/mean/amax rows), with constants and
// sizes taken from i so no two share a cache key.
std::string small_graph(int i) {
  const std::string c1 = std::to_string(1.0 + 0.01 * i), c2 = std::to_string(0.5 + 0.003 * i);
  auto L = [](const std::string& s) { return "    " + s + "\n"; };
  std::string b;
  auto affine = [&] {  // pushes x*c1 + c2
    b += L("LOAD_FAST x") + L("LOAD_CONST " + c1) + L("BINARY_OP *") + L("LOAD_CONST " + c2) + L("BINARY_OP +");
  };
  switch (i % 8) {
    case 0:  // sigmoid(x*c1+c2) * tanh(x) - x*c2
      b += L("LOAD_GLOBAL sigmoid");
      affine();
      b += L("CALL 1") + L("LOAD_GLOBAL tanh") + L("LOAD_FAST x") + L("CALL 1") + L("BINARY_OP *") +
           L("LOAD_FAST x") + L("LOAD_CONST " + c2) + L("BINARY_OP *") + L("BINARY_OP -");
      break;
    case 1:  // softmax(x*c1+c2, -1)
      b += L("LOAD_GLOBAL softmax");
      affine();
      b += L("LOAD_CONST -1") + L("CALL 2");
      break;
    case 2:  // sum(exp(x*c1+c2), 1)
      b += L("LOAD_GLOBAL sum") + L("LOAD_GLOBAL exp");
      affine();
      b += L("CALL 1") + L("LOAD_CONST 1") + L("CALL 2");
      break;
    case 3:  // layer_norm(x*c1+c2, (C,))
      b += L("LOAD_GLOBAL layer_norm");
      affine();
      b += L("LOAD_FAST x") + L("LOAD_ATTR shape") + L("LOAD_CONST -1") + L("BINARY_SUBSCR") + L("BUILD_TUPLE 1") +
           L("CALL 2");
      break;
    case 4:  // gelu(x) * relu(x + c1) + abs(x - c2)
      b += L("LOAD_GLOBAL gelu") + L("LOAD_FAST x") + L("CALL 1") + L("LOAD_GLOBAL relu") + L("LOAD_FAST x") +
           L("LOAD_CONST " + c1) + L("BINARY_OP +") + L("CALL 1") + L("BINARY_OP *") + L("LOAD_GLOBAL abs") +
           L("LOAD_FAST x") + L("LOAD_CONST " + c2) + L("BINARY_OP -") + L("CALL 1") + L("BINARY_OP +");
      break;
    case 5:  // log_softmax(tanh(x) * c1, -1)
      b += L("LOAD_GLOBAL log_softmax") + L("LOAD_GLOBAL tanh") + L("LOAD_FAST x") + L("CALL 1") +
           L("LOAD_CONST " + c1) + L("BINARY_OP *") + L("LOAD_CONST -1") + L("CALL 2");
      break;
    case 6:  // mean(x*x + c1, 1) * c2
      b += L("LOAD_GLOBAL mean") + L("LOAD_FAST x") + L("LOAD_FAST x") + L("BINARY_OP *") + L("LOAD_CONST " + c1) +
           L("BINARY_OP +") + L("LOAD_CONST 1") + L("CALL 2") + L("LOAD_CONST " + c2) + L("BINARY_OP *");
      break;
    default:  // amax(sqrt(abs(x) + c1), 1)
      b += L("LOAD_GLOBAL amax") + L("LOAD_GLOBAL sqrt") + L("LOAD_GLOBAL abs") + L("LOAD_FAST x") + L("CALL 1") +
           L("LOAD_CONST " + c1) + L("BINARY_OP +") + L("CALL 1") + L("LOAD_CONST 1") + L("CALL 2");
      break;
  }
  return ".func f(x)\n" + b + L("RETURN_VALUE") + ".end\n";
}

int kernels(int count) {
  interpreter::VM vm;
  for (int i = -1; i < count; ++i) {  // i = -1: a warm-up graph (the JIT's one-time start)
    const int g = i < 0 ? 1000 : i;
    Program p = assemble(std::string(kSetup) + small_graph(g), "g" + std::to_string(g) + ".kbc");
    Value x = call_op(OpId::randn, {Value::integer(64), Value::integer(96 + g % 97)});
    CompiledFunction f = compile(p.global("f"), llvm_options());
    auto t0 = Clock::now();
    Value y = f({x});
    const double first = seconds_since(t0);
    reset();  // see pointwise()
    CompiledFunction fe = compile(p.global("f"), eager_options());
    Value ye = fe({x});
    const double diff = max_rel_diff(y.as_tensor(), ye.as_tensor());
    std::printf("{\"mode\": \"kernels\", \"graph\": %d, \"variant\": %d, \"warmup\": %s, \"first_call_ms\": %.3f, "
                "\"rel_diff_vs_eager\": %.3g, %s}\n",
                i, g % 8, i < 0 ? "true" : "false", first * 1e3, diff, report_json().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int model(int64_t b, int64_t d, int64_t h, int blocks) {
  auto t_start = Clock::now();
  Program p = assemble(mlp_program(b, d, h, blocks), "mlp.kbc");
  interpreter::VM vm;
  Value m = vm.run(p, "make_model");
  Value x = vm.run(p, "make_input");
  CompiledFunction fl = compile(p.global("f"), llvm_options());
  auto t0 = Clock::now();
  Value y = fl({m, x});
  const double first = seconds_since(t0);
  auto t1 = Clock::now();
  fl({m, x});
  const double second = seconds_since(t1);
  const char* dir = std::getenv("KILN_CACHE_DIR");
  std::printf("{\"mode\": \"model\", \"blocks\": %d, \"cache_dir\": %s, \"setup_s\": %.6f, \"first_call_s\": %.6f, "
              "\"cached_call_s\": %.6f, %s}\n",
              blocks, json_str(dir ? dir : "").c_str(), std::chrono::duration<double>(t0 - t_start).count(), first,
              second, report_json().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  auto arg = [&](size_t i, const char* def) { return i < a.size() ? a[i] : std::string(def); };
  if (a.empty()) {
    std::fprintf(stderr, "usage: bench_codegen triad|pointwise|mlp|kernels|model ... (see the file's header)\n");
    return 2;
  }
  try {
    const std::string& mode = a[0];
    if (mode == "triad") return triad(std::stoll(arg(1, "10000000")), std::stoi(arg(2, "20")));
    if (mode == "pointwise")
      return pointwise(arg(1, "tanh"), std::stoll(arg(2, "10000000")), std::stoi(arg(3, "20")), arg(4, ""));
    if (mode == "blas") {
      std::printf("%s\n", kiln::runtime::blas_info().c_str());
      return 0;
    }
    if (mode == "mlp")
      return mlp(std::stoll(arg(1, "256")), std::stoll(arg(2, "512")), std::stoll(arg(3, "2048")),
                 std::stoi(arg(4, "4")), std::stoi(arg(5, "10")), arg(6, ""));
    if (mode == "kernels") return kernels(std::stoi(arg(1, "24")));
    if (mode == "model")
      return model(std::stoll(arg(1, "256")), std::stoll(arg(2, "512")), std::stoll(arg(3, "2048")),
                   std::stoi(arg(4, "4")));
    std::fprintf(stderr, "bench_codegen: unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_codegen: %s\n", e.full().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_codegen: %s\n", e.what());
    return 1;
  }
}
