// The llvm backend (codegen/) against the eager backend, the reference.
//
// Graphs are built by hand: placeholders from real tensors (their sizes,
// strides and dtype; dynamic dims marked in the meta), call_function nodes
// typed by runtime::infer_meta over the meta tensors of their arguments,
// get_attr nodes for parameters, one output node. Both backends run the same
// graph on the same inputs and every output is compared:
//
//   * pointwise ops: every Pointwise row of ops.def, for every dtype its
//     typing rule accepts, tensor-tensor (same shape, broadcast [5,1]x[1,19],
//     [19]x[5,19], 0-d tensors), weak scalars (int, float, bool),
//     non-contiguous inputs (transposed, sliced with a step, expanded),
//     size-1 dims, odd sizes (vector tails) and a 300x1000 input (threads),
//     mixed dtypes, NaN/inf through maximum/minimum/relu;
//   * reductions: sum/mean/amax over None, single dims (first, middle,
//     last, negative), tuples, keepdim, contiguous and permuted inputs,
//     int64/bool sums; softmax/log_softmax over each dim; layer_norm with and
//     without weight/bias over 1 and 2 trailing dims;
//   * matmul (the four transpose layouts), linear (bias or not, 2-d/3-d);
//   * views feeding pointwise ops and as outputs; to/contiguous/clone;
//   * ops without a lowering (cat, embedding, arange) as eager steps;
//   * fusion decisions (kernel / gemm / eager-step counts of small graphs);
//   * dynamic shapes: one compiled program serving many sizes.
//
// Tolerances are named below, per op class. Everything that is data
// movement, integer/bool arithmetic, a comparison, or a single correctly
// rounded IEEE operation computed in the same dtype by both backends is
// compared exactly (bit for bit; NaN equals NaN whatever its payload).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/host_cpu.h"
#include "codegen/jit.h"
#include "codegen/llvm_backend.h"
#include "interpreter/vm.h"
#include "ops_test_util.h"
#include "output_graph/backend.h"
#include "output_graph/graph.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/value/tensor.h"

using namespace kiln;
using output_graph::Arg;
using output_graph::Graph;
using output_graph::Node;
using output_graph::TensorMeta;
using runtime::CallArgs;
using runtime::DType;
using runtime::OpId;
using runtime::Shape;
using runtime::Tensor;
using runtime::Value;

namespace {

// ------------------------------------------------------------ tolerances --
//
// |got - want| <= atol + rtol * |want|; NaN must meet NaN, an infinity the
// same infinity.
struct Tol {
  double rtol = 0, atol = 0;
  bool exact() const { return rtol == 0 && atol == 0; }
};

constexpr double kEps32 = 1.1920928955078125e-07;  // float32 ULP at 1.0
constexpr double kEps64 = 2.220446049250313e-16;   // float64 ULP at 1.0

// Integers, bools, comparisons, views/copies/casts, and single IEEE-754
// operations (+ - * / sqrt, abs, neg, max/min, fmod-based floor_divide and
// remainder, where) that both backends compute in the same compute dtype:
// there is one correctly rounded answer, so it must match bit for bit.
constexpr Tol kExact{0, 0};
// Transcendentals (exp, log, tanh, pow, sigmoid): SLEEF's u10 functions are
// within 1.0 ULP of the true value and glibc's within 1 ULP, so the two
// backends may differ by 2 ULP of the result.
constexpr Tol kTranscendental32{2 * kEps32, 0};
constexpr Tol kTranscendental64{2 * kEps64, 0};
// gelu = 0.5*x*(1 + erf(x/sqrt2)): the 2 ULP erf difference is absolute
// (~2 ULP of 1.0) before 1 + erf cancels for negative x, so the error is
// relative to |x|, not to the result: 2 ULP relative plus 0.5 * |x| * 2 ULP
// with |x| <= 4 in the data, i.e. an absolute 4 ULP at 1.0. (Observed: 0.7
// ULP absolute, up to 86 ULP relative where 1 + erf cancels.)
constexpr Tol kGelu32{2 * kEps32, 4 * kEps32};
constexpr Tol kGelu64{2 * kEps64, 4 * kEps64};
// float32 sum/mean: both accumulate in double (in a different order: the
// compiled kernel uses vector lanes), then round to float32 once; the
// double sums differ far below float32's ULP, so the rounded results differ
// by at most 1 ULP.
constexpr Tol kReduce32{1 * kEps32, 0};
// float64 sum/mean: no wider accumulator, so the summation order shows: each
// order rounds its partial sums, |partial| <= ~60 for the data here (|x| <= 3,
// random signs, n <= 1000), a few dozen roundings of those: 1e-13 absolute
// (observed: 7e-15), plus 4 ULP relative.
constexpr Tol kReduce64{4 * kEps64, 1e-13};
// softmax / log_softmax / layer_norm in float32: the eager kernel computes
// each element in double and rounds once; the compiled kernel works in
// float32 lanes (x - max, exp, the row sums blocked with float64 per block,
// one multiply; or (x - mean) * rstd * w + b with the mean split in two
// floats): a few roundings, 8 ULP of the result, plus an absolute 4 ULP at
// the row's magnitude (~1) times the weight (|w| <= 3 here) for results that
// come out of a cancellation (log_softmax near 0, layer_norm near the mean).
// float64: the same operations in double, differing only in the order of
// the row sums. (Observed: 10 ULP relative / 5e-8 absolute for float32
// softmax, 4 ULP absolute for layer_norm; 8 ULP absolute for float64
// layer_norm with |w| <= 3.) Adversarial rows: "codegen row kernels in
// float32", with the schemes' own bounds.
constexpr Tol kNorm32{8 * kEps32, 16 * kEps32};
constexpr Tol kNorm64{8 * kEps64, 16 * kEps64};
// BLAS: eager and codegen may call sgemm/dgemm with different layouts
// (transposes folded into flags vs. made contiguous), which changes the
// kernel's blocking and summation order. With K <= 64 and |a|,|b| <= 1 the
// partial sums stay below ~8 (random signs), so a differently ordered sum
// differs by a few ULP of 8: 64 ULP at 1.0 absolute, 16 ULP relative.
// (Observed: 10 ULP at 1.0 for float32, 12 for float64.)
constexpr Tol kGemm32{16 * kEps32, 64 * kEps32};
constexpr Tol kGemm64{16 * kEps64, 64 * kEps64};

Tol float_tol(DType d, Tol t32, Tol t64) { return d == DType::Float64 ? t64 : d == DType::Float32 ? t32 : kExact; }

// ----------------------------------------------------------- random data --

std::mt19937& rng() {
  static std::mt19937 g(20240917);
  return g;
}

// Values in [lo, hi]: uniform reals for floats, uniform integers for int64,
// fair coins for bool. `nonzero` replaces zeros (divisors of integer ops).
Tensor rand_tensor(const Shape& sizes, DType dt, double lo = -3, double hi = 3, bool nonzero = false) {
  Tensor t = Tensor::empty(sizes, dt);
  const int64_t n = t.numel();
  runtime::dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = nonzero ? true : (rng()() & 1) != 0;
      } else if constexpr (std::is_same_v<T, int64_t>) {
        int64_t v = std::uniform_int_distribution<int64_t>(int64_t(lo), int64_t(hi))(rng());
        if (nonzero && v == 0) v = 1;
        p[i] = v;
      } else {
        T v = T(std::uniform_real_distribution<double>(lo, hi)(rng()));
        if (nonzero && v == 0) v = T(1);
        p[i] = v;
      }
    }
  });
  return t;
}

Tensor transposed(const Tensor& t, int64_t a = 0, int64_t b = 1) {
  return test::opt(OpId::transpose, {test::tv(t), test::iv(a), test::iv(b)});
}
// A [rows, cols] tensor laid out column-major (strides [1, rows]).
Tensor col_major(const Shape& s, DType dt, double lo = -3, double hi = 3, bool nonzero = false) {
  return transposed(rand_tensor({s[1], s[0]}, dt, lo, hi, nonzero));
}
// Every `step`-th column of a wider tensor: strides [cols*step, step].
Tensor strided_cols(const Shape& s, DType dt, int64_t step, double lo = -3, double hi = 3, bool nonzero = false) {
  Tensor wide = rand_tensor({s[0], s[1] * step}, dt, lo, hi, nonzero);
  return test::opt(OpId::slice, {test::tv(wide), test::iv(1), test::iv(0), Value::none(), test::iv(step)});
}
// A row repeated: strides [0, 1].
Tensor expanded_rows(const Shape& s, DType dt, double lo = -3, double hi = 3, bool nonzero = false) {
  Tensor row = rand_tensor({1, s[1]}, dt, lo, hi, nonzero);
  return test::opt(OpId::expand, {test::tv(row), test::iv(s[0]), test::iv(s[1])});
}

// ------------------------------------------------------------ graph build --

Arg N(Node* n) { return Arg::of(n); }
Arg I(int64_t v) { return Arg::constant(Value::integer(v)); }
Arg F(double v) { return Arg::constant(Value::floating(v)); }
Arg B(bool v) { return Arg::constant(Value::boolean(v)); }
Arg None() { return Arg::constant(Value::none()); }
Arg S(const char* s) { return Arg::constant(Value::str(s)); }
Arg Ints(std::vector<int64_t> v) {
  std::vector<Value> items;
  for (int64_t i : v) items.push_back(Value::integer(i));
  return Arg::constant(runtime::make_tuple(std::move(items)));
}

Value meta_value(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Node: {
      const TensorMeta& m = *a.node->meta;
      return Value::tensor(Tensor::meta(m.sizes, m.dtype, m.strides));
    }
    case Arg::Kind::Const: return a.value;
    case Arg::Kind::List: {
      std::vector<Value> items;
      for (const Arg& i : a.items) items.push_back(meta_value(i));
      return runtime::make_tuple(std::move(items));
    }
  }
  return Value::none();
}

using Kwargs = std::vector<std::pair<std::string, Arg>>;

struct GraphBuilder {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  std::vector<Value> inputs;
  std::vector<Arg> outs;
  std::vector<std::string> out_names;  // what each output computes, for messages

  Node* input(const Tensor& t, std::vector<bool> dynamic = {}) {
    TensorMeta m;
    m.sizes = t.sizes();
    m.strides = t.strides();
    m.dtype = t.dtype();
    m.dynamic = std::move(dynamic);
    inputs.push_back(Value::tensor(t));
    return g->placeholder("x" + std::to_string(inputs.size() - 1), m);
  }
  Node* param(const std::string& name, const Tensor& t) {
    g->set_attr(name, Value::tensor(t));
    TensorMeta m;
    m.sizes = t.sizes();
    m.strides = t.strides();
    m.dtype = t.dtype();
    return g->get_attr(name, m);
  }
  // The node, typed by the op's shape rule; nullptr (no node) when the
  // shape rule rejects the arguments (a dtype the op's rule refuses).
  Node* try_call(OpId id, std::vector<Arg> args, Kwargs kw = {}) {
    std::vector<Value> argv, names;
    for (const Arg& a : args) argv.push_back(meta_value(a));
    for (const auto& [k, a] : kw) {
      argv.push_back(meta_value(a));
      names.push_back(Value::str(k));
    }
    const Value kwnames = runtime::make_tuple(std::move(names));
    Tensor m;
    try {
      m = runtime::infer_meta(id, CallArgs{argv.data(), argv.size(),
                                           kw.empty() ? nullptr : kwnames.as<runtime::TupleObj>()});
    } catch (const Error&) {
      return nullptr;
    }
    TensorMeta tm;
    tm.sizes = m.sizes();
    tm.strides = m.strides();
    tm.dtype = m.dtype();
    return g->call_function(id, std::move(args), std::move(kw), tm);
  }
  Node* call(OpId id, std::vector<Arg> args, Kwargs kw = {}) {
    Node* n = try_call(id, args, kw);
    INFO("shape rule of " << runtime::op_def(id).name << " rejected its arguments");
    REQUIRE(n != nullptr);
    return n;
  }
  void out(Node* n, std::string what = "") {
    outs.push_back(N(n));
    out_names.push_back(what.empty() ? n->name : what);
  }
  void finish() {
    if (!g->output_node()) g->output(outs);
  }
};

interpreter::VM& vm() {
  static interpreter::VM v;
  return v;
}

// ------------------------------------------------------------- comparing --

struct Mismatch {
  int64_t count = 0, first = -1;
  double got = 0, want = 0;
  double worst_ulps = 0;  // of float results, in ULPs of the eager value
  double worst_abs = 0;   // of float results
};

// Same dtype, same sizes, values within tol (exact: bit for bit). Returns
// false with one CHECK failure describing the first mismatch.
bool check_tensor(const Value& gotv, const Value& wantv, Tol tol, const std::string& what) {
  INFO(what);
  if (!gotv.is(runtime::Kind::Tensor) || !wantv.is(runtime::Kind::Tensor)) {
    CHECK(gotv.is(runtime::Kind::Tensor));
    CHECK(wantv.is(runtime::Kind::Tensor));
    return false;
  }
  const Tensor got = gotv.as_tensor().contiguous(), want = wantv.as_tensor().contiguous();
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes()) {
    INFO("got " << runtime::dtype_name(got.dtype()) << runtime::shape_str(got.sizes()) << ", want "
                << runtime::dtype_name(want.dtype()) << runtime::shape_str(want.sizes()));
    CHECK(false);
    return false;
  }
  Mismatch mm;
  runtime::dispatch_dtype(got.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = got.data<T>();
    const T* w = want.data<T>();
    for (int64_t i = 0; i < got.numel(); ++i) {
      bool ok;
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(g[i]) || std::isnan(w[i])) ok = std::isnan(g[i]) && std::isnan(w[i]);
        else if (tol.exact()) ok = std::memcmp(&g[i], &w[i], sizeof(T)) == 0;
        else if (std::isinf(g[i]) || std::isinf(w[i])) ok = g[i] == w[i];
        else ok = std::abs(double(g[i]) - double(w[i])) <= tol.atol + tol.rtol * std::abs(double(w[i]));
        if (!std::isnan(w[i]) && !std::isinf(w[i]) && w[i] != 0 && std::isfinite(g[i])) {
          const double ulp = std::nextafter(std::abs(w[i]), std::numeric_limits<T>::infinity()) - std::abs(w[i]);
          mm.worst_ulps = std::max(mm.worst_ulps, std::abs(double(g[i]) - double(w[i])) / ulp);
          mm.worst_abs = std::max(mm.worst_abs, std::abs(double(g[i]) - double(w[i])));
        }
      } else {
        ok = g[i] == w[i];
      }
      if (!ok) {
        if (mm.count++ == 0) {
          mm.first = i;
          mm.got = double(g[i]);
          mm.want = double(w[i]);
        }
      }
    }
  });
  // KILN_CODEGEN_ULPS=1 prints the observed error of every float output
  // (how the tolerances above were calibrated).
  static const bool print_ulps = std::getenv("KILN_CODEGEN_ULPS") != nullptr;
  if (print_ulps && runtime::is_floating(got.dtype()))
    std::printf("ulps %10.3g abs %10.3g  %s\n", mm.worst_ulps, mm.worst_abs, what.c_str());
  if (mm.count) {
    std::ostringstream o;
    o.precision(17);
    o << mm.count << " of " << got.numel() << " elements differ; first at flat index " << mm.first << ": llvm "
      << mm.got << ", eager " << mm.want << " (" << runtime::dtype_name(got.dtype())
      << runtime::shape_str(got.sizes()) << ", rtol " << tol.rtol << ", atol " << tol.atol << ")";
    FAIL_CHECK(o.str());
    return false;
  }
  return true;
}

// Runs the graph on both backends (a fresh compile) and compares every
// output with `tol` (per output, when given a vector).
struct Result {
  std::vector<Value> got, want;
  codegen::BackendReport report;
};

Result run_both(GraphBuilder& b) {
  b.finish();
  std::shared_ptr<const Graph> g = b.g;
  Result r;
  r.want = output_graph::eager_backend(g, b.inputs)(vm(), b.inputs);
  output_graph::CompiledGraph compiled = codegen::llvm_backend(g, b.inputs);
  r.report = codegen::last_report();
  r.got = compiled(vm(), b.inputs);
  return r;
}

std::string graph_info(const GraphBuilder& b, const Result& r) {
  return b.g->code() + "\n--- program ---\n" + r.report.summary +
         (r.report.fell_back ? "\n(fell back: " + r.report.reason + ")" : "");
}

Result compare(GraphBuilder& b, const std::vector<Tol>& tols, bool expect_compiled = true) {
  Result r = run_both(b);
  INFO(graph_info(b, r));
  if (expect_compiled) CHECK_FALSE(r.report.fell_back);
  REQUIRE(r.got.size() == r.want.size());
  for (size_t i = 0; i < r.got.size(); ++i) check_tensor(r.got[i], r.want[i], tols[i < tols.size() ? i : tols.size() - 1], "output " + std::to_string(i) + ": " + b.out_names[i]);
  return r;
}
Result compare(GraphBuilder& b, Tol tol, bool expect_compiled = true) {
  return compare(b, std::vector<Tol>{tol}, expect_compiled);
}

// ---------------------------------------------------- pointwise op table --

// What data an op's operands need so that neither backend raises and the
// values exercise the op (not just NaN).
struct Domain {
  double lo0 = -3, hi0 = 3;  // operand 0
  double lo1 = -3, hi1 = 3;  // operand 1 (and 2)
  bool nonzero1 = false;     // operand 1 never 0 (integer // and %)
};

Domain domain_of(OpId id, DType dt) {
  Domain d;
  const bool integral = runtime::is_integral(dt);
  switch (id) {
    case OpId::log:
    case OpId::sqrt:
    case OpId::rsqrt:
      d.lo0 = integral ? 1 : 0.05;
      d.hi0 = integral ? 50 : 4;
      break;
    case OpId::pow:
      // float: positive base, any exponent; int: exponents >= 0 (negative
      // ones raise), small enough not to overflow.
      if (integral) {
        d.lo0 = -5, d.hi0 = 5, d.lo1 = 0, d.hi1 = 4;
      } else {
        d.lo0 = 0.1, d.hi0 = 3, d.lo1 = -3, d.hi1 = 3;
      }
      break;
    case OpId::floor_divide:
    case OpId::remainder:
    case OpId::div:
      d.nonzero1 = true;
      if (integral) d.lo0 = -20, d.hi0 = 20, d.lo1 = -7, d.hi1 = 7;
      break;
    case OpId::exp:
    case OpId::sigmoid:
    case OpId::tanh:
    case OpId::gelu:
    case OpId::_gelu_tanh: d.lo0 = -4, d.hi0 = 4; break;
    default:
      if (integral) d.lo0 = -20, d.hi0 = 20, d.lo1 = -20, d.hi1 = 20;
      break;
  }
  return d;
}

Tol pointwise_tol(OpId id, DType result) {
  switch (id) {
    case OpId::exp:
    case OpId::log:
    case OpId::tanh:
    case OpId::sin:
    case OpId::cos:
    case OpId::pow:
    case OpId::sigmoid: return float_tol(result, kTranscendental32, kTranscendental64);
    // tanh-GELU: 0.5*x*(1 + tanh(...)); tanh's 2 ULP turn absolute where
    // 1 + tanh cancels, as erf's do in gelu.
    case OpId::gelu:
    case OpId::_gelu_tanh: return float_tol(result, kGelu32, kGelu64);
    default: return kExact;
  }
}

std::vector<OpId> pointwise_ops() {
  std::vector<OpId> ops;
  for (int i = 0; i < runtime::kNumOps; ++i)
    if (runtime::op_def(OpId(i)).kind == runtime::OpKind::Pointwise) ops.push_back(OpId(i));
  return ops;
}

const DType kAllDtypes[] = {DType::Float32, DType::Float64, DType::Int64, DType::Bool};

// Adds op(args) as an output when the op's rule accepts these operands;
// records its tolerance.
struct PwGraph : GraphBuilder {
  std::vector<Tol> tols;
  bool add(OpId id, std::vector<Arg> args, const std::string& what) {
    Node* n = try_call(id, std::move(args));
    if (!n) return false;
    out(n, std::string(runtime::op_def(id).name) + " " + what);
    tols.push_back(pointwise_tol(id, n->meta->dtype));
    return true;
  }
};

}  // namespace

// =================================================================== tests

namespace {

// Operand k's data for op `id` in dtype dt (the op's domain), as inputs of b.
struct Operands {
  PwGraph& b;
  OpId id;
  DType dt;
  Domain d;
  Operands(PwGraph& g, OpId op, DType t) : b(g), id(op), dt(t), d(domain_of(op, t)) {}
  double lo(int k) const { return k == 0 ? d.lo0 : d.lo1; }
  double hi(int k) const { return k == 0 ? d.hi0 : d.hi1; }
  bool nz(int k) const { return k > 0 && d.nonzero1; }
  Node* contig(const Shape& s, int k) { return b.input(rand_tensor(s, dt, lo(k), hi(k), nz(k))); }
  Node* colmajor(const Shape& s, int k) { return b.input(col_major(s, dt, lo(k), hi(k), nz(k))); }
  Node* strided(const Shape& s, int k, int64_t step) { return b.input(strided_cols(s, dt, step, lo(k), hi(k), nz(k))); }
  Node* expanded(const Shape& s, int k) { return b.input(expanded_rows(s, dt, lo(k), hi(k), nz(k))); }
  Node* cond(const Shape& s) { return b.input(rand_tensor(s, DType::Bool)); }
  // Weak scalars in the operand's domain (a nonzero divisor, a small exponent).
  int64_t int_scalar() const { return id == OpId::pow ? 3 : d.nonzero1 ? -3 : 2; }
  double float_scalar() const { return id == OpId::pow ? 1.5 : -1.25; }
};

}  // namespace

// The JIT targets the host's CPU name *and* every feature with its sign: a
// name implies features (znver4: AVX-512) that a virtual machine may hide.
// With only the enabled ones listed, an AMD EPYC guest without AVX-512 got
// AVX-512 kernels and every compiled graph died of SIGILL.
TEST_CASE("codegen targets the host's features, the ones it lacks named as lacking", "[codegen]") {
  const kiln::codegen::HostCpu& cpu = kiln::codegen::host_cpu();
  std::vector<std::string> list;
  std::stringstream in(cpu.features);
  for (std::string f; std::getline(in, f, ',');) list.push_back(f);
  REQUIRE(!list.empty());
  for (const std::string& f : list) CHECK((f[0] == '+' || f[0] == '-'));
  auto listed = [&](const std::string& f) { return std::find(list.begin(), list.end(), f) != list.end(); };
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  CHECK(cpu.avx512f == avx512);
  CHECK(listed(avx512 ? "+avx512f" : "-avx512f"));
  CHECK(listed(__builtin_cpu_supports("avx2") ? "+avx2" : "-avx2"));
#endif
}

// Every Pointwise row of ops.def, for each dtype its typing rule accepts
// (a combination the shape rule refuses is skipped: eager refuses it too):
// contiguous operands (a vector body and a tail), non-contiguous ones
// (column-major with every-other-column), a [5,1] x [1,19] broadcast, weak
// int / float / bool scalars, and for float32 a 0-d tensor operand (0-d
// operands of the other dtypes: the layouts and mixed-dtype tests).
TEST_CASE("codegen pointwise: every op, every dtype", "[codegen]") {
  for (OpId id : pointwise_ops()) {
    const runtime::OpDef& def = runtime::op_def(id);
    for (DType dt : kAllDtypes) {
      DYNAMIC_SECTION(def.name << " " << runtime::dtype_name(dt)) {
        PwGraph b;
        Operands o(b, id, dt);
        const Shape S{5, 19};  // 95 elements: whole vectors and a tail
        if (def.arity == 1) {
          b.add(id, {N(o.contig(S, 0))}, "contiguous [5,19]");
          b.add(id, {N(o.strided(S, 0, 3))}, "every 3rd column [5,19]");
          if (dt == DType::Float32) b.add(id, {N(o.contig({}, 0))}, "0-d");
        } else if (def.arity == 2) {
          b.add(id, {N(o.contig(S, 0)), N(o.contig(S, 1))}, "contiguous");
          b.add(id, {N(o.colmajor(S, 0)), N(o.strided(S, 1, 2))}, "column-major with every other column");
          b.add(id, {N(o.contig({5, 1}, 0)), N(o.contig({1, 19}, 1))}, "broadcast [5,1] x [1,19]");
          if (dt == DType::Float32) b.add(id, {N(o.contig(S, 0)), N(o.contig({}, 1))}, "tensor x 0-d");
          b.add(id, {N(o.contig(S, 0)), I(o.int_scalar())}, "with int scalar");
          b.add(id, {N(o.contig(S, 0)), F(o.float_scalar())}, "with float scalar");
          if (runtime::is_integral(dt)) b.add(id, {N(o.contig(S, 0)), B(true)}, "with bool scalar True");
        } else if (def.rule == runtime::PwRule::Fill) {
          // masked_fill: input, a bool mask (broadcast), a number or 0-d value
          b.add(id, {N(o.contig(S, 0)), N(o.cond(S)), I(o.int_scalar())}, "contiguous, int value");
          b.add(id, {N(o.colmajor(S, 0)), N(o.cond({5, 1})), F(o.float_scalar())}, "column-major, broadcast mask");
          b.add(id, {N(o.strided(S, 0, 3)), N(o.cond({19})), N(o.contig({}, 1))}, "every 3rd column, 0-d value");
          b.add(id, {N(o.contig({1, 19}, 0)), N(o.cond(S)), B(true)}, "input broadcast up to the mask");
        } else {
          REQUIRE(def.rule == runtime::PwRule::Where);  // operand 0: the bool condition
          b.add(id, {N(o.cond(S)), N(o.contig(S, 1)), N(o.contig(S, 1))}, "contiguous");
          b.add(id, {N(o.cond({5, 1})), N(o.colmajor(S, 1)), N(o.contig({19}, 1))}, "broadcast, column-major");
          b.add(id, {N(o.cond(S)), N(o.contig({}, 1)), I(2)}, "0-d input, int scalar other");
          b.add(id, {N(o.cond(S)), F(-0.5), N(o.contig(S, 1))}, "float scalar input");
        }
        if (b.outs.empty()) {
          SUCCEED("the typing rule of " << def.name << " refuses " << runtime::dtype_name(dt));
        } else {
          Result r = compare(b, b.tols);
          // Integer // % pow can raise: those run as eager steps, the rest compiles.
          if (!runtime::is_integral(dt) || (id != OpId::floor_divide && id != OpId::remainder && id != OpId::pow))
            CHECK(r.report.eager_steps == 0);
        }
      }
    }
  }
}

// Layouts, broadcasting and scalars are op-independent index arithmetic:
// the full set on a few representative ops (an arithmetic op, a
// transcendental, a comparison, a bitwise op, where).
TEST_CASE("codegen pointwise: layouts, broadcasting, scalars, size-1 dims, threads", "[codegen]") {
  const std::pair<OpId, DType> cases[] = {{OpId::add, DType::Float32},     {OpId::exp, DType::Float32},
                                          {OpId::ge, DType::Float64},      {OpId::bitwise_xor, DType::Int64},
                                          {OpId::mul, DType::Bool},        {OpId::where, DType::Float32}};
  for (auto [id, dt] : cases) {
    const runtime::OpDef& def = runtime::op_def(id);
    DYNAMIC_SECTION(def.name << " " << runtime::dtype_name(dt)) {
      PwGraph b;
      Operands o(b, id, dt);
      const Shape S{5, 19};
      const Shape L{300, 1000};
      // ops of arity 1, 2 or 3 (where) over tensors made for slot k
      auto add = [&](std::vector<Node*> ts, const std::string& what) {
        std::vector<Arg> a;
        if (def.arity == 3) a.push_back(N(o.cond(ts[0]->meta->sizes)));
        for (size_t i = 0; i < ts.size() && int(a.size()) < def.arity; ++i) a.push_back(N(ts[i]));
        REQUIRE(b.add(id, a, what));
      };
      add({o.colmajor(S, 0), o.contig(S, 1)}, "column-major [5,19]");
      add({o.strided(S, 0, 3), o.colmajor(S, 1)}, "every 3rd column with column-major");
      add({o.expanded(S, 0), o.contig(S, 1)}, "expanded row [5,19] (stride 0)");
      add({o.contig({3, 1}, 0), o.contig({1, 4}, 1)}, "broadcast [3,1] x [1,4]");
      add({o.contig({19}, 0), o.contig(S, 1)}, "broadcast [19] x [5,19]");
      add({o.contig({2, 5}, 0), o.contig({5}, 1)}, "broadcast [2,5] x [5]");
      add({o.contig({5, 1, 3}, 0), o.contig({4, 1}, 1)}, "broadcast [5,1,3] x [4,1]");
      add({o.contig({}, 0), o.contig(S, 1)}, "0-d x tensor");
      add({o.contig({}, 0), o.contig({}, 1)}, "0-d x 0-d");
      add({o.contig({1, 1, 7}, 0), o.contig({1, 1, 7}, 1)}, "size-1 dims [1,1,7]");
      add({o.contig({1}, 0), o.contig({1}, 1)}, "[1]");
      add({o.contig({16}, 0), o.contig({16}, 1)}, "exactly one vector [16]");
      add({o.contig({3}, 0), o.contig({3}, 1)}, "tail only [3]");
      add({o.contig({0, 4}, 0), o.contig({0, 4}, 1)}, "empty [0,4]");
      add({o.contig(L, 0), o.colmajor(L, 1)}, "large [300,1000] with column-major (threads)");
      add({o.contig({1000, 1}, 0), o.contig({1, 300}, 1)}, "large broadcast [1000,1] x [1,300]");
      if (def.arity >= 2) {
        for (Value s : {Value::integer(o.int_scalar()), Value::floating(o.float_scalar()), Value::boolean(true), Value::boolean(false)}) {
          std::vector<Arg> a;
          if (def.arity == 3) a.push_back(N(o.cond(S)));
          a.push_back(N(o.contig(S, 0)));
          a.push_back(Arg::constant(s));
          b.add(id, a, "with scalar " + runtime::repr(s));
          // ... and the scalar first.
          std::vector<Arg> r;
          if (def.arity == 3) r.push_back(N(o.cond(S)));
          r.push_back(Arg::constant(s));
          r.push_back(N(o.contig(S, 1)));
          b.add(id, r, "scalar " + runtime::repr(s) + " first");
        }
      }
      Result r = compare(b, b.tols);
      CHECK(r.report.eager_steps == 0);
    }
  }
}

TEST_CASE("codegen pointwise: mixed operand dtypes promote like eager", "[codegen]") {
  PwGraph b;
  const Shape S{4, 21};
  const OpId ops[] = {OpId::add, OpId::sub, OpId::div, OpId::maximum, OpId::lt, OpId::where};
  for (OpId id : ops)
    for (DType x : kAllDtypes)
      for (DType y : kAllDtypes) {
        if (x == y) continue;
        const std::string what = std::string(runtime::dtype_name(x)) + " with " + runtime::dtype_name(y);
        if (id == OpId::where) {
          b.add(id, {N(b.input(rand_tensor(S, DType::Bool))), N(b.input(rand_tensor(S, x))), N(b.input(rand_tensor(S, y)))}, what);
          continue;
        }
        b.add(id, {N(b.input(rand_tensor(S, x, -3, 3, id == OpId::div))), N(b.input(rand_tensor(S, y, -3, 3, id == OpId::div)))}, what);
        // 0-d tensors take part in promotion only within a higher category.
        if (id == OpId::add || id == OpId::lt) b.add(id, {N(b.input(rand_tensor(S, x))), N(b.input(rand_tensor({}, y, -3, 3, id == OpId::div)))}, what + " 0-d");
      }
  REQUIRE(b.outs.size() > 50);
  compare(b, b.tols);
}

TEST_CASE("codegen pointwise: NaN, inf and signed zeros", "[codegen]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> special = {nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-30, -1e30, nan, 0.0, -0.0, inf, 3.0, -7.0};
  for (DType dt : {DType::Float32, DType::Float64}) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      const int64_t n = int64_t(special.size());
      // x runs through the specials; y through them in every pairing.
      std::vector<double> xs, ys;
      for (double a : special)
        for (double c : special) xs.push_back(a), ys.push_back(c);
      const Shape S{n, n};
      auto make = [&](const std::vector<double>& v) {
        Tensor t = Tensor::empty(S, dt);
        runtime::dispatch_dtype(dt, [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>)
            for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = T(v[i]);
        });
        return t;
      };
      PwGraph b;
      Node* x = b.input(make(xs));
      Node* y = b.input(make(ys));
      for (OpId id : {OpId::maximum, OpId::minimum, OpId::add, OpId::sub, OpId::mul, OpId::div, OpId::floor_divide,
                      OpId::remainder, OpId::eq, OpId::ne, OpId::lt, OpId::le, OpId::gt, OpId::ge, OpId::pow})
        b.add(id, {N(x), N(y)}, "specials");
      for (OpId id : {OpId::relu, OpId::abs, OpId::neg, OpId::sqrt, OpId::rsqrt, OpId::exp, OpId::log, OpId::tanh,
                      OpId::sin, OpId::cos, OpId::sigmoid, OpId::gelu})
        b.add(id, {N(x)}, "specials");
      b.add(OpId::maximum, {N(x), F(nan)}, "with NaN scalar");
      b.add(OpId::minimum, {N(x), F(-inf)}, "with -inf scalar");
      compare(b, b.tols);
    }
  }
}

// gelu's float32 erf is kiln's own piecewise polynomial (lowering.cpp), so
// it gets a dense sweep: every 509th float32 bit pattern up to 6 (past
// where erf(x / sqrt 2) rounds to 1) and its negative, 4.2M values hitting
// every polynomial piece and the cut-off, through each way the lowering
// picks a lane's coefficients: 16 lanes (a float32 kernel), 8 lanes (the
// same with a float64 cast in the kernel), one lane (an innermost dim
// shorter than a vector that cannot merge with the next).
TEST_CASE("codegen gelu: a dense float32 sweep at each vector width", "[codegen]") {
  std::vector<float> xs;
  uint32_t top;
  const float six = 6.0f;
  std::memcpy(&top, &six, sizeof top);
  for (uint32_t u = 0; u <= top; u += 509) {
    float v;
    std::memcpy(&v, &u, sizeof v);
    xs.push_back(v);
    xs.push_back(-v);
  }
  const int64_t n = int64_t(xs.size()) / 5 * 5;
  Tensor flat = Tensor::empty({n}, DType::Float32);
  std::copy_n(xs.begin(), n, flat.data<float>());
  // [n/5, 5] as the even columns of [n/5, 11]: strides [11, 2], which do
  // not merge into one dim.
  Tensor wide = Tensor::empty({n / 5, 11}, DType::Float32);
  for (int64_t i = 0; i < n; ++i) wide.data<float>()[i / 5 * 11 + i % 5 * 2] = xs[size_t(i)];
  Tensor narrow = test::opt(OpId::slice, {test::tv(wide), test::iv(1), test::iv(0), test::iv(10), test::iv(2)});

  GraphBuilder b;
  Node* x = b.input(flat);
  b.out(b.call(OpId::gelu, {N(x)}), "gelu, float32 kernel");
  b.out(b.call(OpId::to, {N(b.call(OpId::gelu, {N(x)})), S("float64")}), "gelu then float64 in one kernel");
  b.out(b.call(OpId::gelu, {N(b.input(narrow))}), "gelu of [n/5, 5] with strides [11, 2]");
  // The float64 output holds float32 values (the cast is exact): float32's bound.
  Result r = compare(b, kGelu32);
  CHECK(r.report.kernels == 3);
  // gelu's tolerance hides a few ULPs of erf. Where x <= -0.68 (erf's
  // argument z <= -0.48), 1 + erf(z) is exact (Sterbenz: erf <= -0.5), so
  // the gelu result carries erf's own error plus one rounding (of the
  // product, 2^-25 absolute on erf): what erf returned is recoverable to
  // half an ULP. Its documented bound for |z| >= 1/4 is 1.15 ULP.
  for (int o : {0, 1, 2}) {
    const Tensor got = r.got[size_t(o)].as_tensor().contiguous().to(DType::Float64);
    double worst = 0, worst_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float xi = xs[size_t(i)];  // element i of every output
      if (!(xi <= -0.68f)) continue;
      const float z = xi * 0.70710678118654752440f;  // as the kernel rounds it
      const double want = std::erf(double(z));
      const double implied = got.data<double>()[i] / (0.5 * double(xi)) - 1.0;
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      if (std::abs(implied - want) / ulp > worst) worst = std::abs(implied - want) / ulp, worst_x = xi;
    }
    INFO("output " << o << ": erf off by " << worst << " ULP at x = " << worst_x);
    CHECK(worst <= 1.65);
  }
}

TEST_CASE("codegen pointwise: a 5-op chain is one kernel", "[codegen]") {
  GraphBuilder b;
  Node* x = b.input(rand_tensor({33, 65}, DType::Float32));
  Node* y = b.input(rand_tensor({65}, DType::Float32));
  Node* a = b.call(OpId::mul, {N(x), F(2.0)});
  Node* c = b.call(OpId::add, {N(a), N(y)});
  Node* e = b.call(OpId::tanh, {N(c)});
  Node* f = b.call(OpId::sub, {N(e), I(1)});
  Node* g = b.call(OpId::relu, {N(f)});
  Node* h = b.call(OpId::maximum, {N(g), N(x)});
  b.out(h);
  Result r = compare(b, kTranscendental32);
  CHECK(r.report.kernels == 1);
  CHECK(r.report.eager_steps == 0);
  CHECK(r.report.gemms == 0);
  // A second call of the same compiled graph on other data: fresh outputs,
  // the first call's result untouched.
  {
    std::shared_ptr<const Graph> g = b.g;
    output_graph::CompiledGraph compiled = codegen::llvm_backend(g, b.inputs);
    const Tensor first = compiled(vm(), b.inputs)[0].as_tensor().clone();
    std::vector<Value> first_out = compiled(vm(), b.inputs);
    const std::vector<Value> other = {Value::tensor(rand_tensor({33, 65}, DType::Float32)),
                                      Value::tensor(rand_tensor({65}, DType::Float32))};
    std::vector<Value> second = compiled(vm(), other);
    check_tensor(second[0], output_graph::eager_backend(g, other)(vm(), other)[0], kTranscendental32, "second call");
    check_tensor(first_out[0], Value::tensor(first), kExact, "first call's output after the second call");
  }

  // A value with two users is computed once (its own kernel), the rest fuses.
  GraphBuilder b2;
  Node* x2 = b2.input(rand_tensor({40, 17}, DType::Float64));
  Node* s = b2.call(OpId::exp, {N(x2)});
  Node* u = b2.call(OpId::add, {N(s), I(1)});
  Node* v = b2.call(OpId::mul, {N(s), F(2.0)});
  b2.out(b2.call(OpId::add, {N(u), N(v)}));
  // exp's 2 ULP, then sums of positive terms: one more rounding each.
  Result r2 = compare(b2, Tol{2 * kTranscendental64.rtol, 0});
  CHECK(r2.report.kernels == 2);
}

// Scheduling cost is linear in graph length (issue 17): a pending value's
// only consumer takes its expression over instead of copying it. Counted,
// not timed: Program::schedule_work is the expression nodes and loads the
// scheduler copied or re-expressed. Copying per op (the former scheduler)
// makes it ~N^2/2 for an N-op chain: 8,000,000 at N = 4,000, against the
// few per op allowed here.
int64_t schedule_work_of(GraphBuilder& b) {
  b.finish();
  return codegen::schedule(*b.g).schedule_work;
}

TEST_CASE("codegen scheduling: expression work is linear in chain length", "[codegen]") {
  const int64_t n = 4000;
  SECTION("x = x + 1 (the pending value on the left)") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({8, 5}, DType::Float32));
    for (int64_t i = 0; i < n; ++i) x = b.call(OpId::add, {N(x), F(1.0)});
    b.out(x);
    CHECK(schedule_work_of(b) <= 4 * n);
  }
  SECTION("x = y * x (on the right) with a broadcast once") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({5}, DType::Float32));
    Node* y = b.input(rand_tensor({8, 5}, DType::Float32));
    for (int64_t i = 0; i < n; ++i) x = b.call(i % 2 ? OpId::mul : OpId::sub, {N(y), N(x)});
    b.out(x);
    CHECK(schedule_work_of(b) <= 4 * n);
  }
  SECTION("two pending chains merged at every step (small into large)") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({8, 5}, DType::Float32));
    Node* acc = b.call(OpId::neg, {N(x)});
    for (int64_t i = 0; i < n / 4; ++i) {
      Node* t = b.call(OpId::mul, {N(b.call(OpId::add, {N(x), F(double(i))})), F(0.5)});
      acc = b.call(OpId::add, {N(t), N(acc)});
    }
    b.out(acc);
    CHECK(schedule_work_of(b) <= 8 * n);
  }
  SECTION("a chain after softmax is its epilogue, copied once") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({8, 5}, DType::Float32));
    x = b.call(OpId::softmax, {N(b.call(OpId::mul, {N(x), F(2.0)})), I(-1)});
    for (int64_t i = 0; i < n; ++i) x = b.call(OpId::add, {N(x), F(1.0)});
    b.out(x);
    CHECK(schedule_work_of(b) <= 6 * n);
  }
}

TEST_CASE("codegen scheduling: a 2,000-op chain is one kernel with eager's result", "[codegen]") {
  // Long chains also exercise the iterative expression copy (no recursion
  // per node) and the take-over of operands on either side.
  GraphBuilder b;
  Node* x = b.input(rand_tensor({3, 7}, DType::Float64, -1, 1));
  Node* y = b.input(rand_tensor({7}, DType::Float64, -1, 1));
  Node* v = x;
  for (int i = 0; i < 2000; ++i) {
    if (i % 3 == 0) v = b.call(OpId::mul, {N(v), F(0.999)});
    else if (i % 3 == 1) v = b.call(OpId::add, {N(y), N(v)});
    else v = b.call(OpId::sub, {N(v), N(b.call(OpId::mul, {N(y), F(0.5)}))});
  }
  b.out(v);
  // Every step is one correctly rounded operation in float64 in the same
  // order on both backends.
  Result r = compare(b, kExact);
  CHECK(r.report.kernels == 1);
}

// ----------------------------------------------------------- reductions --

TEST_CASE("codegen reductions: sum, mean, amax over every dim choice", "[codegen]") {
  struct DimChoice {
    const char* name;
    Arg dim;
    bool keepdim;
  };
  auto dc = [](const char* name, Arg dim, bool keep = false) { return DimChoice{name, std::move(dim), keep}; };
  // Every dtype: the common choices on a contiguous [6,7,19].
  const std::vector<DimChoice> some = {dc("None", None()), dc("0", I(0)), dc("1", I(1)), dc("-1", I(-1)),
                                       dc("(0, 2)", Ints({0, 2})), dc("None", None(), true), dc("1", I(1), true)};
  // float32: all of them, on a permuted layout (kept dims and reduced dims
  // both strided).
  const std::vector<DimChoice> all = {
      dc("None", None()),          dc("0", I(0)),           dc("1", I(1)),         dc("2", I(2)),
      dc("-1", I(-1)),             dc("-3", I(-3)),         dc("(0, 2)", Ints({0, 2})), dc("(1, 2)", Ints({1, 2})),
      dc("(-1, 0)", Ints({-1, 0})), dc("(0, 1, 2)", Ints({0, 1, 2})), dc("()", Ints({})),
      dc("None", None(), true),    dc("0", I(0), true),     dc("-1", I(-1), true), dc("(0, 2)", Ints({0, 2}), true)};
  const std::vector<DimChoice> size1 = {dc("1 (size 1)", I(1)), dc("(0, 1)", Ints({0, 1})), dc("-1", I(-1)),
                                        dc("1 (size 1)", I(1), true)};
  struct Case {
    OpId id;
    DType dt;
    const char* layout;
    const std::vector<DimChoice>* dims;
  };
  std::vector<Case> cases;
  for (OpId id : {OpId::sum, OpId::mean, OpId::amax}) {
    for (DType dt : kAllDtypes) cases.push_back({id, dt, "contiguous", &some});
    cases.push_back({id, DType::Float32, "permuted", &all});
    cases.push_back({id, DType::Float64, "permuted", &some});
    cases.push_back({id, id == OpId::mean ? DType::Float32 : DType::Int64, "size-1", &size1});
  }
  for (const Case& c : cases) {
    DYNAMIC_SECTION(runtime::op_def(c.id).name << " " << runtime::dtype_name(c.dt) << " " << c.layout) {
      GraphBuilder b;
      Tensor x = c.layout[0] == 'c'   ? rand_tensor({6, 7, 19}, c.dt)
                 : c.layout[0] == 'p' ? test::opt(OpId::permute, {test::tv(rand_tensor({19, 6, 7}, c.dt)), test::iv(1),
                                                                  test::iv(2), test::iv(0)})
                                      : rand_tensor({4, 1, 9}, c.dt);
      Node* xn = b.input(x);
      std::vector<Tol> tols;
      for (const DimChoice& d : *c.dims) {
        Node* n = b.try_call(c.id, {N(xn), d.dim, B(d.keepdim)});
        if (!n) continue;
        b.out(n, std::string("dim=") + d.name + " keepdim=" + (d.keepdim ? "True" : "False"));
        tols.push_back(c.id == OpId::amax ? kExact : float_tol(n->meta->dtype, kReduce32, kReduce64));
      }
      if (b.outs.empty()) {
        SUCCEED(runtime::op_def(c.id).name << " refuses " << runtime::dtype_name(c.dt));
      } else {
        Result r = compare(b, tols);
        CHECK(r.report.eager_steps == 0);
      }
    }
  }
  SECTION("keyword arguments") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({5, 33}, DType::Float32));
    b.out(b.call(OpId::sum, {N(x)}, {{"dim", I(1)}, {"keepdim", B(true)}}), "sum(x, dim=1, keepdim=True)");
    b.out(b.call(OpId::amax, {N(x)}, {{"dim", Ints({0})}}), "amax(x, dim=(0,))");
    compare(b, {kReduce32, kExact});
  }
}

TEST_CASE("codegen reductions: large rows, NaN and inf through amax and sum", "[codegen]") {
  GraphBuilder b;
  Tensor x = rand_tensor({300, 1000}, DType::Float32);
  x.data<float>()[5 * 1000 + 17] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[7 * 1000 + 999] = std::numeric_limits<float>::infinity();
  x.data<float>()[9 * 1000 + 3] = -std::numeric_limits<float>::infinity();
  Node* xn = b.input(x);
  b.out(b.call(OpId::sum, {N(xn), I(-1)}), "sum(-1)");
  b.out(b.call(OpId::amax, {N(xn), I(-1)}), "amax(-1)");
  b.out(b.call(OpId::amax, {N(xn), I(0)}), "amax(0)");
  b.out(b.call(OpId::mean, {N(xn), I(0)}), "mean(0)");
  b.out(b.call(OpId::sum, {N(xn)}), "sum()");
  compare(b, {kReduce32, kExact, kExact, kReduce32, kReduce32});
}

TEST_CASE("codegen reductions: softmax and log_softmax over each dim", "[codegen]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      GraphBuilder b;
      Node* x = b.input(rand_tensor({5, 8, 37}, dt, -6, 6));
      Node* xt = b.input(test::opt(OpId::permute, {test::tv(rand_tensor({37, 5, 8}, dt, -6, 6)), test::iv(1), test::iv(2), test::iv(0)}));
      Node* one = b.input(rand_tensor({3, 1}, dt));
      for (OpId id : {OpId::softmax, OpId::log_softmax}) {
        for (int64_t d : {0, 1, 2, -1}) {
          b.out(b.call(id, {N(x), I(d)}), std::string(runtime::op_def(id).name) + " contiguous dim " + std::to_string(d));
          b.out(b.call(id, {N(xt), I(d)}), std::string(runtime::op_def(id).name) + " permuted dim " + std::to_string(d));
        }
        b.out(b.call(id, {N(one), I(1)}), std::string(runtime::op_def(id).name) + " over a size-1 dim");
      }
      b.out(b.call(OpId::softmax, {N(b.input(rand_tensor({64, 1000}, dt, -6, 6))), I(-1)}), "softmax of large rows");
      Result r = compare(b, float_tol(dt, kNorm32, kNorm64));
      CHECK(r.report.eager_steps == 0);
    }
  }
}

// Float32 softmax / log_softmax / layer_norm run in float32 lanes with
// blocked sums (lowering.cpp: blocked_sum; float64 per block of 64 vectors,
// or per row), softmax with one exp per element. Held to eager (double
// throughout, one rounding) on rows chosen to break a careless scheme:
// lengths 1, below / at / above a vector (16 lanes with AVX-512, 8 with
// AVX2), unrolled rows (up to 8 whole vectors), at and past the block (64
// vectors: 1024 / 512 elements), long rows; large magnitudes; -inf masks (whole rows too: NaN, as eager); one
// dominant element; layer_norm rows far from 0 (mean 1e4, std 1).
// The tolerances are the schemes' bounds:
// - softmax: exp(x - max) with x - max rounded to float32 has relative
//   error <= |x - max| * eps / 2 (plus SLEEF's 1 ULP); the sum's is
//   <= (64 + 4) eps worst case; then 2 roundings. The data keeps
//   |x - max| <= 32 where exp matters: 16 + 1 + 2 + 68 -> 88 eps relative,
//   and subnormal results within 4 * 2^-149 (their relative precision is
//   gone).
// - log_softmax: (x - max) - log(sum): 3 roundings of values up to |x - max|
//   (<= 2e4 here) and the log's 0.5 ULP: 4 eps relative, 4 eps absolute
//   times log(sum) (<= log(6000) < 9).
// - layer_norm: the deviations to 1 ULP of themselves (split mean), the
//   variance's blocked sum 68 eps worst -> 34 eps in rstd, then 3 roundings:
//   40 eps relative; + 8 eps absolute times |w| (<= 3) for a result that
//   cancels against its bias. Observed (KILN_CODEGEN_ULPS=1) far below.
namespace {
Tensor row_data(int64_t rows, int64_t n, const std::function<float(int64_t, int64_t)>& f) {
  Tensor t = Tensor::empty({rows, n}, DType::Float32);
  float* p = t.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) p[r * n + i] = f(r, i);
  return t;
}
}  // namespace

TEST_CASE("codegen row kernels in float32: adversarial rows and lengths", "[codegen]") {
  const float inf = std::numeric_limits<float>::infinity();
  std::uniform_real_distribution<float> u(-1, 1);
  // 16, 64, 128: rows the row kernels unroll (whole vectors, at most 8).
  for (int64_t n : {1, 5, 7, 8, 15, 16, 17, 33, 64, 100, 128, 512, 1024, 1025, 1040, 4099}) {
    DYNAMIC_SECTION("row length " << n) {
      GraphBuilder b;
      // softmax / log_softmax rows: spread over 32 below the max, a row
      // with -inf masked entries (a causal mask), a fully masked row, a
      // row with one dominant element, a row of large magnitudes.
      Node* x = b.input(row_data(5, n, [&](int64_t r, int64_t i) -> float {
        switch (r) {
          case 0: return 16 * u(rng());
          case 1: return i > n / 2 ? -inf : 16 * u(rng());
          case 2: return -inf;
          case 3: return i == n / 3 ? 30.0f : u(rng());
          default: return 1e4f * u(rng());
        }
      }));
      b.out(b.call(OpId::softmax, {N(x), I(-1)}), "softmax");
      b.out(b.call(OpId::log_softmax, {N(x), I(-1)}), "log_softmax");
      // The causal mask as attention applies it: scores * scale + mask.
      Node* mask = b.input(row_data(5, n, [&](int64_t r, int64_t i) { return i > r * n / 5 ? -inf : 0.0f; }));
      Node* scores = b.input(row_data(5, n, [&](int64_t, int64_t) { return 8 * u(rng()); }));
      b.out(b.call(OpId::softmax, {N(b.call(OpId::add, {N(b.call(OpId::mul, {N(scores), F(0.125)})), N(mask)})), I(-1)}),
            "softmax(scores * 0.125 + causal mask)");
      // layer_norm: centred, far from 0, and large magnitudes.
      Node* y = b.input(row_data(3, n, [&](int64_t r, int64_t) {
        return r == 0 ? 2 * u(rng()) : r == 1 ? 1e4f + u(rng()) : 3e5f * u(rng());
      }));
      Node* w = b.input(row_data(1, n, [&](int64_t, int64_t) { return 3 * u(rng()); }));
      Node* bias = b.input(row_data(1, n, [&](int64_t, int64_t) { return u(rng()); }));
      Node* w1 = b.call(OpId::reshape, {N(w), Ints({n})});
      Node* b1 = b.call(OpId::reshape, {N(bias), Ints({n})});
      b.out(b.call(OpId::layer_norm, {N(y), Ints({n}), N(w1), N(b1)}), "layer_norm");
      const double e = kEps32;
      const double sub = std::ldexp(4.0, -149);  // 4 ULPs of a subnormal: exp's and the scaling's roundings there
      Result r = compare(b, {Tol{88 * e, sub}, Tol{4 * e, 36 * e}, Tol{88 * e, sub}, Tol{40 * e, 24 * e}});
      CHECK(r.report.eager_steps == 0);
    }
  }
}

TEST_CASE("codegen reductions: layer_norm with and without weight and bias", "[codegen]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      GraphBuilder b;
      Node* x = b.input(rand_tensor({6, 5, 24}, dt));
      Node* xt = b.input(transposed(rand_tensor({6, 24, 5}, dt), 1, 2));
      Node* w1 = b.param("ln1.weight", rand_tensor({24}, dt, 0.5, 1.5));
      Node* b1 = b.param("ln1.bias", rand_tensor({24}, dt));
      Node* w2 = b.param("ln2.weight", rand_tensor({5, 24}, dt, 0.5, 1.5));
      Node* b2 = b.param("ln2.bias", rand_tensor({5, 24}, dt));
      Node* w3 = b.input(rand_tensor({24}, dt));
      for (Node* in : {x, xt}) {
        const std::string l = in == x ? "contiguous " : "transposed ";
        b.out(b.call(OpId::layer_norm, {N(in), Ints({24})}), l + "no affine, 1 dim");
        b.out(b.call(OpId::layer_norm, {N(in), Ints({24}), N(w1), N(b1)}), l + "weight+bias, 1 dim");
        b.out(b.call(OpId::layer_norm, {N(in), Ints({24}), N(w1)}), l + "weight only, 1 dim");
        b.out(b.call(OpId::layer_norm, {N(in), Ints({24})}, {{"bias", N(b1)}}), l + "bias only (kwarg), 1 dim");
        b.out(b.call(OpId::layer_norm, {N(in), Ints({5, 24})}), l + "no affine, 2 dims");
        b.out(b.call(OpId::layer_norm, {N(in), Ints({5, 24}), N(w2), N(b2), F(1e-3)}), l + "weight+bias, 2 dims, eps");
        b.out(b.call(OpId::layer_norm, {N(in), Ints({24}), N(w3), None()}), l + "weight as an input");
      }
      Result r = compare(b, float_tol(dt, kNorm32, kNorm64));
      CHECK(r.report.eager_steps == 0);
    }
  }
}

TEST_CASE("codegen fusion: reductions with producers and epilogues", "[codegen]") {
  SECTION("(x*2).sum(-1) + 1 is one kernel") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({13, 37}, DType::Float32));
    Node* m = b.call(OpId::mul, {N(x), I(2)});
    Node* s = b.call(OpId::sum, {N(m), I(-1)});
    b.out(b.call(OpId::add, {N(s), I(1)}));
    Result r = compare(b, kReduce32);
    CHECK(r.report.kernels == 1);
    CHECK(r.report.eager_steps == 0);
  }
  SECTION("x - x.mean(-1, keepdim=True) is two kernels") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({13, 37}, DType::Float32));
    Node* m = b.call(OpId::mean, {N(x), I(-1), B(true)});
    b.out(b.call(OpId::sub, {N(x), N(m)}));
    // One rounding of the mean (kReduce32) then an exact subtraction: the
    // mean's 1 ULP shows as an absolute error of 1 ULP of |mean| <= 3.
    Result r = compare(b, Tol{kEps32, 4 * kEps32});
    CHECK(r.report.kernels == 2);
  }
  SECTION("softmax(x*2 + y) fuses its producer") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({9, 70}, DType::Float32));
    Node* y = b.input(rand_tensor({70}, DType::Float32));
    Node* p = b.call(OpId::add, {N(b.call(OpId::mul, {N(x), I(2)})), N(y)});
    b.out(b.call(OpId::softmax, {N(p), I(-1)}));
    Result r = compare(b, kNorm32);
    CHECK(r.report.kernels == 1);
  }
  SECTION("amax epilogue and a keepdim sum feeding a same-shaped op") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({11, 6, 23}, DType::Float64));
    Node* a = b.call(OpId::amax, {N(x), Ints({0, 2})});
    Node* e = b.call(OpId::relu, {N(b.call(OpId::sub, {N(a), F(0.5)}))});
    b.out(e, "relu(amax(x, (0,2)) - 0.5)");
    Result r = compare(b, kExact);
    CHECK(r.report.kernels == 1);
  }
  SECTION("layer_norm(linear(x)) is one gemm and one kernel") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({2, 9, 32}, DType::Float32, -1, 1));
    Node* w = b.param("fc.weight", rand_tensor({48, 32}, DType::Float32, -1, 1));
    Node* bias = b.param("fc.bias", rand_tensor({48}, DType::Float32, -1, 1));
    Node* l = b.call(OpId::linear, {N(x), N(w), N(bias)});
    b.out(b.call(OpId::layer_norm, {N(l), Ints({48})}));
    // The gemm's few-ULP differences are amplified by 1/std of the row.
    Result r = compare(b, Tol{kGemm32.rtol, kGemm32.atol * 4});
    CHECK(r.report.gemms == 1);
    CHECK(r.report.kernels == 1);
  }
}

// --------------------------------------------------------------- matmul --

TEST_CASE("codegen matmul: four transpose layouts, sliced operands, float32 and float64", "[codegen]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      const int64_t M = 37, K = 29, Nn = 23;
      GraphBuilder b;
      Node* a = b.input(rand_tensor({M, K}, dt, -1, 1));
      Node* at = b.input(rand_tensor({K, M}, dt, -1, 1));
      Node* bb = b.input(rand_tensor({K, Nn}, dt, -1, 1));
      Node* bt = b.input(rand_tensor({Nn, K}, dt, -1, 1));
      Node* a_t = b.call(OpId::transpose, {N(at), I(0), I(1)});
      Node* b_t = b.call(OpId::transpose, {N(bt), I(0), I(1)});
      b.out(b.call(OpId::matmul, {N(a), N(bb)}), "A @ B");
      b.out(b.call(OpId::matmul, {N(a_t), N(bb)}), "A^T @ B");
      b.out(b.call(OpId::matmul, {N(a), N(b_t)}), "A @ B^T");
      b.out(b.call(OpId::matmul, {N(a_t), N(b_t)}), "A^T @ B^T");
      // Non-contiguous inputs (placeholders arriving as views).
      b.out(b.call(OpId::matmul, {N(b.input(col_major({M, K}, dt, -1, 1))), N(b.input(col_major({K, Nn}, dt, -1, 1)))}),
            "column-major inputs");
      // A column slice (row-major with a leading dimension > K) and a
      // step-2 slice (neither layout: copied).
      Node* wide = b.input(rand_tensor({M, K + 7}, dt, -1, 1));
      Node* sl = b.call(OpId::slice, {N(wide), I(1), I(3), I(3 + K)});
      b.out(b.call(OpId::matmul, {N(sl), N(bb)}), "column slice @ B");
      Node* st = b.call(OpId::slice, {N(b.input(rand_tensor({M, 2 * K}, dt, -1, 1))), I(1), I(0), None(), I(2)});
      b.out(b.call(OpId::matmul, {N(st), N(bb)}), "step-2 slice @ B");
      b.out(b.call(OpId::matmul, {N(b.input(rand_tensor({1, K}, dt, -1, 1))), N(bb)}), "[1,K] @ B");
      b.out(b.call(OpId::matmul, {N(a), N(b.input(rand_tensor({K, 1}, dt, -1, 1)))}), "A @ [K,1]");
      // Operands produced by pointwise ops (materialized for BLAS).
      b.out(b.call(OpId::matmul, {N(b.call(OpId::mul, {N(a), F(0.5)})), N(bb)}), "(A*0.5) @ B");
      Result r = compare(b, float_tol(dt, kGemm32, kGemm64));
      CHECK(r.report.gemms == 10);
      CHECK(r.report.eager_steps == 0);
    }
  }
  SECTION("int64 matmul and 1-d / batched matmul run as eager steps") {
    GraphBuilder b;
    Node* a = b.input(rand_tensor({5, 7}, DType::Int64, -9, 9));
    Node* c = b.input(rand_tensor({7, 3}, DType::Int64, -9, 9));
    b.out(b.call(OpId::matmul, {N(a), N(c)}), "int64");
    Node* v = b.input(rand_tensor({7}, DType::Float32, -1, 1));
    b.out(b.call(OpId::matmul, {N(b.input(rand_tensor({5, 7}, DType::Float32, -1, 1))), N(v)}), "matrix @ vector");
    Result r = compare(b, std::vector<Tol>{kExact, kExact});
    CHECK(r.report.eager_steps == 2);
  }
}

// Batched matmul (issue 17): one BLAS call per matrix of the broadcast
// batch, operands read in place (row-major or transposed) or copied when
// BLAS cannot read them, into one arena buffer its consumers fuse from.
TEST_CASE("codegen batched matmul: broadcast batches, layouts, attention", "[codegen]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      struct Case {
        std::string name;
        Shape a, b;
        bool ta = false, tb = false, step = false;  // transposed last two dims; a sliced with a step (copied)
      };
      const std::vector<Case> cases = {
          {"[2,3,5,7] @ [2,3,7,4]", {2, 3, 5, 7}, {2, 3, 7, 4}},
          {"[3,5,7] @ [2,3,7,4] (batch broadcast)", {3, 5, 7}, {2, 3, 7, 4}},
          {"[2,1,5,7] @ [1,3,7,4] (size-1 batch dims)", {2, 1, 5, 7}, {1, 3, 7, 4}},
          {"[5,7] @ [2,7,4] (2-d a)", {5, 7}, {2, 7, 4}},
          {"q @ k^T (b transposed)", {2, 3, 6, 8}, {2, 3, 6, 8}, false, true},
          {"a^T @ b (a transposed)", {2, 7, 5}, {2, 7, 4}, true, false},
          {"a sliced with a step (copied)", {2, 5, 14}, {2, 7, 4}, false, false, true},
          {"empty contraction [2,5,0] @ [2,0,4]", {2, 5, 0}, {2, 0, 4}},
      };
      for (const Case& c : cases) {
        GraphBuilder b;
        Tensor ta = rand_tensor(c.a, dt, -1, 1), tb = rand_tensor(c.b, dt, -1, 1);
        if (c.ta) ta = transposed(ta, int64_t(c.a.size()) - 2, int64_t(c.a.size()) - 1);
        if (c.tb) tb = transposed(tb, int64_t(c.b.size()) - 2, int64_t(c.b.size()) - 1);
        Node* x = b.input(ta);
        Node* y = b.input(tb);
        if (c.step) x = b.call(OpId::slice, {N(x), I(-1), I(0), None(), I(2)});
        b.out(b.call(OpId::matmul, {N(x), N(y)}), c.name);
        INFO(c.name);
        Result r = compare(b, float_tol(dt, kGemm32, kGemm64));
        CHECK(r.report.gemms == 1);
        CHECK(r.report.eager_steps == 0);
      }
      {
        // 3-d @ 2-d: A's leading dims as the rows of one gemm.
        GraphBuilder b;
        b.out(b.call(OpId::matmul, {N(b.input(rand_tensor({2, 5, 7}, dt, -1, 1))), N(b.input(rand_tensor({7, 4}, dt, -1, 1)))}),
              "[2,5,7] @ [7,4]");
        Result r = compare(b, float_tol(dt, kGemm32, kGemm64));
        CHECK(r.report.gemms == 1);
        CHECK(r.report.eager_steps == 0);
      }
      for (bool probs_out : {false, true}) {
        // Attention: softmax(q @ k^T * scale + mask) @ v is one call of the
        // tiled kernel (codegen/attention_pattern.h). When the
        // probabilities are an output too, the scores' scale, mask and
        // softmax are one kernel between two batched gemms.
        GraphBuilder b;
        Node* q = b.input(rand_tensor({2, 3, 6, 8}, dt, -1, 1));
        Node* k = b.input(rand_tensor({2, 3, 6, 8}, dt, -1, 1));
        Node* v = b.input(rand_tensor({2, 3, 6, 8}, dt, -1, 1));
        Node* mask = b.input(rand_tensor({6, 6}, dt, -1, 0));
        Node* s = b.call(OpId::matmul, {N(q), N(b.call(OpId::transpose, {N(k), I(-2), I(-1)}))});
        Node* p = b.call(OpId::softmax, {N(b.call(OpId::add, {N(b.call(OpId::mul, {N(s), F(0.35)})), N(mask)})), I(-1)});
        b.out(b.call(OpId::matmul, {N(p), N(v)}), "attention");
        if (probs_out) b.out(p, "probs");
        // Two gemms of a few ULP each around a softmax (kNorm): the sum of
        // <= 6 products of |p| <= 1, |v| <= 1.
        Result r = compare(b, float_tol(dt, Tol{kGemm32.rtol * 4, kGemm32.atol * 4}, Tol{kGemm64.rtol * 4, kGemm64.atol * 4}));
        CHECK(r.report.gemms == (probs_out ? 2 : 0));
        CHECK(r.report.kernels == (probs_out ? 1 : 0));
        CHECK(r.report.eager_steps == (probs_out ? 0 : 1));
      }
    }
  }
}

// Kernels that differ only in the buffers they read are one function
// (issue 17): each kernel indexes its own pointer table, so a deep model's
// repeated blocks are lowered and optimized once (the others are aliases).
TEST_CASE("codegen: identical blocks compile one kernel", "[codegen]") {
  GraphBuilder b;
  Node* x = b.input(rand_tensor({8, 16}, DType::Float32, -1, 1));
  const int blocks = 6;
  for (int i = 0; i < blocks; ++i) {
    Node* w = b.param("l" + std::to_string(i) + ".weight", rand_tensor({16, 16}, DType::Float32, -0.3, 0.3));
    Node* bias = b.param("l" + std::to_string(i) + ".bias", rand_tensor({16}, DType::Float32, -0.3, 0.3));
    x = b.call(OpId::relu, {N(b.call(OpId::linear, {N(x), N(w), N(bias)}))});
  }
  // Same structure, another dtype of one operand: its own kernel.
  Node* y = b.input(rand_tensor({8, 16}, DType::Float64, -1, 1));
  b.out(x, "6 x relu(linear)");
  b.out(b.call(OpId::add, {N(y), F(1.0)}), "y + 1 (float64)");
  b.out(b.call(OpId::add, {N(b.input(rand_tensor({8, 16}, DType::Float32, -1, 1))), F(1.0)}), "z + 1 (float32)");
  // A chain of 6 gemms and roundings of relu: the gemm bound, 6 times.
  Result r = compare(b, {Tol{6 * kGemm32.rtol, 6 * kGemm32.atol}, kExact, kExact});
  CHECK(r.report.gemms == size_t(blocks));
  CHECK(r.report.kernels == size_t(blocks) + 2);
  // The blocks' bias+relu kernels are one; y + 1 and z + 1 differ in dtype.
  CHECK(r.report.kernels_distinct == 3);
  // ... one function: the blocks' entry points are the same address.
  codegen::Program prog = codegen::schedule(*b.g);
  codegen::CompiledKernels ck = codegen::compile_kernels(prog);
  REQUIRE(ck.fns.size() == size_t(blocks) + 2);
  for (int i = 1; i < blocks; ++i) CHECK(ck.fns[size_t(i)] == ck.fns[0]);
  CHECK(ck.fns[size_t(blocks)] != ck.fns[0]);
  CHECK(ck.fns[size_t(blocks) + 1] != ck.fns[size_t(blocks)]);
}

TEST_CASE("codegen linear: bias or not, 2-d and 3-d inputs, epilogues", "[codegen]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      GraphBuilder b;
      const Tol tol = float_tol(dt, kGemm32, kGemm64);
      Node* x2 = b.input(rand_tensor({19, 40}, dt, -1, 1));
      Node* x3 = b.input(rand_tensor({3, 11, 40}, dt, -1, 1));
      Node* x3t = b.input(transposed(rand_tensor({11, 3, 40}, dt, -1, 1), 0, 1));  // rows not one layout: copied
      Node* w = b.param("fc.weight", rand_tensor({24, 40}, dt, -1, 1));
      Node* wt = b.param("fct.weight", transposed(rand_tensor({40, 24}, dt, -1, 1)));  // a transposed parameter
      Node* bias = b.param("fc.bias", rand_tensor({24}, dt, -1, 1));
      std::vector<Tol> tols;
      for (Node* x : {x2, x3, x3t}) {
        const std::string l = x == x2 ? "2-d" : x == x3 ? "3-d" : "3-d non-contiguous";
        b.out(b.call(OpId::linear, {N(x), N(w)}), l + " no bias");
        b.out(b.call(OpId::linear, {N(x), N(w), N(bias)}), l + " bias");
        b.out(b.call(OpId::linear, {N(x), N(wt), N(bias)}), l + " transposed weight, bias");
        b.out(b.call(OpId::linear, {N(x), N(w)}, {{"bias", N(bias)}}), l + " bias as kwarg");
        b.out(b.call(OpId::relu, {N(b.call(OpId::linear, {N(x), N(w), N(bias)}))}), l + " relu(linear)");
        for (int i = 0; i < 5; ++i) tols.push_back(tol);
      }
      Result r = compare(b, tols);
      CHECK(r.report.eager_steps == 0);
    }
  }
  SECTION("linear followed by gelu: one gemm and one kernel") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({4, 16, 64}, DType::Float32, -1, 1));
    Node* w = b.param("fc.weight", rand_tensor({48, 64}, DType::Float32, -1, 1));
    Node* bias = b.param("fc.bias", rand_tensor({48}, DType::Float32, -1, 1));
    b.out(b.call(OpId::gelu, {N(b.call(OpId::linear, {N(x), N(w), N(bias)}))}));
    // The gemm's error (kGemm32) passes through gelu, whose slope is <= 1.13,
    // plus gelu's own kGelu32.
    Result r = compare(b, Tol{kGemm32.rtol + kGelu32.rtol, 2 * kGemm32.atol + kGelu32.atol});
    CHECK(r.report.gemms == 1);
    CHECK(r.report.kernels == 1);
    CHECK(r.report.eager_steps == 0);
  }
}

// ---------------------------------------------------------------- views --

TEST_CASE("codegen views: feeding pointwise ops and as graph outputs", "[codegen]") {
  for (DType dt : kAllDtypes) {
    DYNAMIC_SECTION(runtime::dtype_name(dt)) {
      GraphBuilder b;
      Node* x = b.input(rand_tensor({4, 6, 5}, dt, -9, 9));
      Node* xt = b.input(test::opt(OpId::permute, {test::tv(rand_tensor({5, 4, 6}, dt, -9, 9)), test::iv(1), test::iv(2), test::iv(0)}));
      Node* one = b.input(rand_tensor({1, 6, 1}, dt, -9, 9));
      Node* sq = b.input(rand_tensor({4, 1, 5, 1}, dt, -9, 9));
      Node* y = b.input(rand_tensor({4, 6, 5}, dt, -9, 9));
      struct V {
        std::string name;
        Node* node;
      };
      std::vector<V> views;
      for (Node* in : {x, xt}) {
        const std::string l = in == x ? " of contiguous" : " of permuted";
        views.push_back({"reshape(24,5)" + l, b.call(OpId::reshape, {N(in), I(24), I(5)})});
        views.push_back({"reshape(-1)" + l, b.call(OpId::reshape, {N(in), I(-1)})});
        views.push_back({"transpose(0,2)" + l, b.call(OpId::transpose, {N(in), I(0), I(2)})});
        views.push_back({"permute(2,0,1)" + l, b.call(OpId::permute, {N(in), I(2), I(0), I(1)})});
        views.push_back({"select(1,2)" + l, b.call(OpId::select, {N(in), I(1), I(2)})});
        views.push_back({"select(-1,-1)" + l, b.call(OpId::select, {N(in), I(-1), I(-1)})});
        views.push_back({"slice(2,1,5,2)" + l, b.call(OpId::slice, {N(in), I(2), I(1), I(5), I(2)})});
        views.push_back({"slice(0,None,None,3)" + l, b.call(OpId::slice, {N(in), I(0), None(), None(), I(3)})});
        views.push_back({"slice(1,-4,-1)" + l, b.call(OpId::slice, {N(in), I(1), I(-4), I(-1)})});
        views.push_back({"unsqueeze(1)" + l, b.call(OpId::unsqueeze, {N(in), I(1)})});
        views.push_back({"unsqueeze(-1)" + l, b.call(OpId::unsqueeze, {N(in), I(-1)})});
        views.push_back({"flatten()" + l, b.call(OpId::flatten, {N(in)})});
        views.push_back({"flatten(1)" + l, b.call(OpId::flatten, {N(in), I(1)})});
        views.push_back({"transpose then slice then select" + l,
                         b.call(OpId::select, {N(b.call(OpId::slice, {N(b.call(OpId::transpose, {N(in), I(0), I(1)})), I(0), I(1), None(), I(2)})), I(2), I(3)})});
      }
      views.push_back({"view(4,30)", b.call(OpId::view, {N(x), I(4), I(30)})});
      views.push_back({"view(2,-1,5)", b.call(OpId::view, {N(x), I(2), I(-1), I(5)})});
      views.push_back({"expand(4,6,5)", b.call(OpId::expand, {N(one), I(4), I(6), I(5)})});
      views.push_back({"expand(3,-1,-1,7)", b.call(OpId::expand, {N(one), I(3), I(-1), I(-1), I(7)})});
      views.push_back({"squeeze()", b.call(OpId::squeeze, {N(sq)})});
      views.push_back({"squeeze(1)", b.call(OpId::squeeze, {N(sq), I(1)})});
      views.push_back({"squeeze(-1)", b.call(OpId::squeeze, {N(sq), I(-1)})});
      views.push_back({"squeeze(0) (not size 1)", b.call(OpId::squeeze, {N(sq), I(0)})});
      // A view of a computed value, and a view of a view feeding a broadcast.
      Node* sum = b.call(OpId::add, {N(x), N(y)});
      views.push_back({"transpose of a computed value", b.call(OpId::transpose, {N(sum), I(1), I(2)})});
      Node* sel = b.call(OpId::select, {N(x), I(2), I(4)});
      views.push_back({"x + select(x,2,4).unsqueeze(-1)", b.call(OpId::add, {N(x), N(b.call(OpId::unsqueeze, {N(sel), I(-1)}))})});
      for (const V& v : views) {
        b.out(v.node, v.name);
        // Feeding a pointwise op: float32 and bool (bytes in memory, i1 in
        // the kernel); the other dtypes take the views as outputs only (every
        // extra kernel costs compile time, and the index arithmetic is the same).
        if (dt == DType::Float64 || dt == DType::Int64) continue;
        // The same view feeding a pointwise op (add for numbers, xor for bools).
        Node* p = dt == DType::Bool ? b.call(OpId::bitwise_xor, {N(v.node), B(true)}) : b.call(OpId::add, {N(v.node), I(1)});
        b.out(p, v.name + " then +1");
      }
      Result r = compare(b, kExact);
      CHECK(r.report.eager_steps == 0);
    }
  }
}

// A view of a pending value is folded into its consumer's indexing
// (issue 17): (x*2+1).transpose(0,1) + y is one kernel, not a kernel that
// writes x*2+1 and another that reads its transpose. Counted per graph;
// values exactly eager's (the same single IEEE operations).
TEST_CASE("codegen views of pending values fold into the consumer", "[codegen]") {
  struct Case {
    std::string name;
    std::function<Node*(GraphBuilder&, Node*)> view;  // of p = x*2 + 1, x [4, 6, 5]
    size_t kernels;
  };
  const std::vector<Case> cases = {
      {"transpose(0,1)", [](GraphBuilder& b, Node* p) { return b.call(OpId::transpose, {N(p), I(0), I(1)}); }, 1},
      {"permute(2,0,1)", [](GraphBuilder& b, Node* p) { return b.call(OpId::permute, {N(p), I(2), I(0), I(1)}); }, 1},
      {"unsqueeze(1).expand(4,3,6,5)",
       [](GraphBuilder& b, Node* p) {
         return b.call(OpId::expand, {N(b.call(OpId::unsqueeze, {N(p), I(1)})), I(4), I(3), I(6), I(5)});
       },
       1},
      {"slice(1,1,6,2)", [](GraphBuilder& b, Node* p) { return b.call(OpId::slice, {N(p), I(1), I(1), I(6), I(2)}); }, 1},
      {"select(2,3)", [](GraphBuilder& b, Node* p) { return b.call(OpId::select, {N(p), I(2), I(3)}); }, 1},
      {"reshape(4,2,3,5) (a split)", [](GraphBuilder& b, Node* p) { return b.call(OpId::reshape, {N(p), I(4), I(2), I(3), I(5)}); }, 1},
      {"view(24,5) (a merge)", [](GraphBuilder& b, Node* p) { return b.call(OpId::view, {N(p), I(24), I(5)}); }, 1},
      {"flatten()", [](GraphBuilder& b, Node* p) { return b.call(OpId::flatten, {N(p)}); }, 1},
      {"transpose then select then unsqueeze",
       [](GraphBuilder& b, Node* p) {
         Node* t = b.call(OpId::transpose, {N(p), I(0), I(2)});
         return b.call(OpId::unsqueeze, {N(b.call(OpId::select, {N(t), I(1), I(5)})), I(0)});
       },
       1},
      // A merge of dims the loads do not walk as one (x transposed first)
      // cannot be indexing: the value is written out, then viewed.
      {"transpose(1,2).reshape(4,30) (merge across a transpose)",
       [](GraphBuilder& b, Node* p) {
         return b.call(OpId::reshape, {N(b.call(OpId::transpose, {N(p), I(1), I(2)})), I(4), I(30)});
       },
       2},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      GraphBuilder b;
      Node* x = b.input(rand_tensor({4, 6, 5}, DType::Float32, -9, 9));
      Node* p = b.call(OpId::add, {N(b.call(OpId::mul, {N(x), F(2.0)})), F(1.0)});
      Node* v = c.view(b, p);
      // + y of the view's own shape (an input), so the consumer reads both.
      Shape vs = v->meta->sizes;
      Node* y = b.input(rand_tensor(vs, DType::Float32, -9, 9));
      b.out(b.call(OpId::add, {N(v), N(y)}), "(x*2+1)." + c.name + " + y");
      Result r = compare(b, kExact);
      CHECK(r.report.kernels == c.kernels);
      CHECK(r.report.eager_steps == 0);
    }
  }
  SECTION("a folded view as a graph output, and of a value read twice") {
    GraphBuilder b;
    Node* x = b.input(rand_tensor({4, 6}, DType::Float32, -9, 9));
    Node* p = b.call(OpId::exp, {N(b.call(OpId::mul, {N(x), F(0.5)}))});
    b.out(b.call(OpId::transpose, {N(p), I(0), I(1)}), "exp(x*0.5).t() as an output");
    Node* q = b.call(OpId::sub, {N(x), F(1.0)});  // read by the view and by the add: written once
    b.out(b.call(OpId::add, {N(b.call(OpId::transpose, {N(q), I(0), I(1)})), N(b.call(OpId::transpose, {N(x), I(0), I(1)}))}), "q.t() + x.t()");
    b.out(b.call(OpId::add, {N(q), F(3.0)}), "q + 3");
    Result r = compare(b, kTranscendental32);
    // exp(x*0.5).t(); q (two readers); q.t() + x.t(); q + 3.
    CHECK(r.report.kernels == 4);
  }
}

TEST_CASE("codegen copies: to(dtype), contiguous, clone", "[codegen]") {
  GraphBuilder b;
  Tensor f = rand_tensor({7, 13}, DType::Float32, -9, 9);
  f.data<float>()[0] = 0.0f;
  f.data<float>()[1] = -0.0f;
  f.data<float>()[2] = 0.25f;  // to(bool): true, to(int64): 0
  f.data<float>()[3] = -0.75f;
  Tensor i = rand_tensor({7, 13}, DType::Int64, -4, 4);
  i.data<int64_t>()[0] = 2;  // to(bool) of an even number is True
  i.data<int64_t>()[1] = 256;
  i.data<int64_t>()[2] = 0;
  Node* fx = b.input(f);
  Node* ix = b.input(i);
  Node* bx = b.input(rand_tensor({7, 13}, DType::Bool));
  Node* dx = b.input(col_major({7, 13}, DType::Float64, -9, 9));
  for (Node* src : {fx, ix, bx, dx})
    for (const char* to : {"float32", "float64", "int64", "bool"}) {
      b.out(b.call(OpId::to, {N(src), S(to)}), std::string(runtime::dtype_name(src->meta->dtype)) + ".to(" + to + ")");
    }
  b.out(b.call(OpId::to, {N(fx)}, {{"dtype", S("float64")}}), "to(dtype=float64)");
  b.out(b.call(OpId::contiguous, {N(dx)}), "contiguous of column-major");
  b.out(b.call(OpId::clone, {N(dx)}), "clone of column-major");
  b.out(b.call(OpId::clone, {N(fx)}), "clone of contiguous");
  b.out(b.call(OpId::contiguous, {N(b.call(OpId::transpose, {N(fx), I(0), I(1)}))}), "contiguous of a transpose");
  b.out(b.call(OpId::add, {N(b.call(OpId::to, {N(ix), S("float32")})), N(fx)}), "int64->float32 then add");
  b.out(b.call(OpId::mul, {N(b.call(OpId::to, {N(fx), S("int64")})), I(3)}), "float32->int64 then mul");
  Result r = compare(b, kExact);
  CHECK(r.report.eager_steps == 0);
}

// ------------------------------------------------------------ eager steps --

TEST_CASE("codegen eager steps: ops without a lowering still give eager's results", "[codegen]") {
  GraphBuilder b;
  Node* x = b.input(rand_tensor({4, 5}, DType::Float32));
  Node* y = b.input(rand_tensor({4, 3}, DType::Float32));
  Node* idx = b.input(rand_tensor({6}, DType::Int64, 0, 9));
  Node* table = b.param("emb.weight", rand_tensor({10, 8}, DType::Float32));
  Node* cat = b.call(OpId::cat, {Arg::list({N(b.call(OpId::mul, {N(x), I(2)})), N(y)})}, {{"dim", I(1)}});
  b.out(b.call(OpId::add, {N(cat), I(1)}), "cat(x*2, y) + 1");
  Node* emb = b.call(OpId::embedding, {N(idx), N(table)});
  b.out(b.call(OpId::gelu, {N(emb)}), "gelu(embedding)");
  Node* ar = b.call(OpId::arange, {I(0), I(8)});
  b.out(b.call(OpId::add, {N(ar), N(emb)}), "arange(0,8) + embedding");
  Node* arf = b.call(OpId::arange, {F(0.5), F(3.0), F(0.5)});
  b.out(b.call(OpId::mul, {N(arf), N(b.call(OpId::sum, {N(x), I(0)}))}), "arange(0.5,3,0.5) * x.sum(0)");
  b.out(cat, "cat itself as an output");
  b.out(x, "an input returned as it is");
  b.out(b.call(OpId::transpose, {N(x), I(0), I(1)}), "a view of an input");
  Result r = compare(b, {kExact, kGelu32, kExact, kReduce32, kExact, kExact, kExact});
  CHECK(r.report.eager_steps == 4);
  CHECK_FALSE(r.report.fell_back);
}

// The ops real models need (issue 13) in compiled programs: the pointwise
// ones fuse (masked_fill, clamp's halves, tanh-GELU), the rest are eager
// steps; either way the results are eager's.
TEST_CASE("codegen: model ops fuse or run as eager steps with eager's results", "[codegen]") {
  GraphBuilder b;
  Node* x = b.input(rand_tensor({2, 3, 6, 6}, DType::Float32));
  Node* m = b.input(rand_tensor({6, 6}, DType::Bool));
  Node* w = b.param("conv.weight", rand_tensor({4, 3, 3, 3}, DType::Float32, -1, 1));
  Node* rm = b.param("bn.running_mean", rand_tensor({4}, DType::Float32));
  Node* rv = b.param("bn.running_var", rand_tensor({4}, DType::Float32, 0.5, 2));
  Node* filled = b.call(OpId::masked_fill, {N(x), N(m), F(-1.0)});
  Node* clamped = b.call(OpId::clamp_max, {N(b.call(OpId::clamp_min, {N(filled), F(-0.5)})), F(0.5)});
  b.out(b.call(OpId::_gelu_tanh, {N(clamped)}), "tanh-gelu(clamp(masked_fill(x)))");
  Node* conv = b.call(OpId::conv2d, {N(x), N(w)}, {{"padding", I(1)}});
  Node* bn = b.call(OpId::batch_norm, {N(conv), N(rm), N(rv)});
  Node* pooled = b.call(OpId::max_pool2d, {N(b.call(OpId::relu, {N(bn)})), I(2)});
  b.out(b.call(OpId::adaptive_avg_pool2d, {N(pooled), I(1)}), "adaptive_avg_pool(max_pool(relu(bn(conv(x)))))");
  Node* flat = b.call(OpId::flatten, {N(x), I(1)});
  b.out(b.call(OpId::argmax, {N(flat), I(1)}), "argmax");
  b.out(b.call(OpId::_topk_indices, {N(flat), I(3)}), "topk indices");
  b.out(b.call(OpId::tril, {N(m)}), "tril of a bool");
  Result r = compare(b, {kGelu32, kExact, kExact, kExact, kExact});
  // one fused kernel for the pointwise chain (its masked_fill, two clamps
  // and gelu); conv, batch_norm, relu (fused into nothing: its producer and
  // consumer are eager), max_pool, adaptive pool, argmax, topk, tril eager
  CHECK(r.report.kernels >= 1);
  CHECK(r.report.summary.find("masked_fill, clamp_min, clamp_max, _gelu_tanh") != std::string::npos);
  CHECK(r.report.eager_steps == 7);
}

// batch_norm in training writes its running statistics (graph attributes
// the caller owns) in place. A value computed from them before it, still
// pending in a fused kernel, must see the old contents; one read after
// sees the new. Each backend starts from the same buffer contents.
TEST_CASE("codegen: batch_norm's in-place update is ordered against reads of its buffers", "[codegen]") {
  const Tensor x0 = rand_tensor({5, 3, 4}, DType::Float32);
  const Tensor rm0 = rand_tensor({3}, DType::Float32), rv0 = rand_tensor({3}, DType::Float32, 0.5, 2);
  struct Run {
    std::vector<Value> out;
    Tensor rm, rv;
    codegen::BackendReport report;
  };
  auto run = [&](bool llvm, bool dynamic) {
    GraphBuilder b;
    Run r{{}, rm0.clone(), rv0.clone(), {}};
    Node* x = b.input(x0, dynamic ? std::vector<bool>{true, false, false} : std::vector<bool>{});
    Node* rm = b.param("bn.running_mean", r.rm);
    Node* rv = b.param("bn.running_var", r.rv);
    b.out(b.call(OpId::mul, {N(rm), F(2.0)}), "running_mean * 2, read before the update");
    Node* bn = b.call(OpId::batch_norm, {N(x), N(rm), N(rv)}, {{"training", B(true)}, {"momentum", F(0.25)}});
    b.out(b.call(OpId::add, {N(bn), I(1)}), "batch_norm(x) + 1");
    b.out(b.call(OpId::add, {N(rv), F(0.0)}), "running_var + 0, read after the update");
    b.finish();
    std::shared_ptr<const Graph> g = b.g;
    if (llvm) {
      output_graph::CompiledGraph c = codegen::llvm_backend(g, b.inputs);
      r.report = codegen::last_report();
      r.out = c(vm(), b.inputs);
    } else {
      r.out = output_graph::eager_backend(g, b.inputs)(vm(), b.inputs);
    }
    return r;
  };
  for (bool dynamic : {false, true}) {
    INFO((dynamic ? "dynamic batch" : "static sizes"));
    const Run want = run(false, dynamic), got = run(true, dynamic);
    INFO(got.report.summary << (got.report.fell_back ? "\nfell back: " + got.report.reason : ""));
    REQUIRE(got.out.size() == 3);
    check_tensor(got.out[0], want.out[0], kExact, "running_mean * 2");
    check_tensor(got.out[1], want.out[1], kExact, "batch_norm + 1");
    check_tensor(got.out[2], want.out[2], kExact, "running_var after");
    check_tensor(Value::tensor(got.rm), Value::tensor(want.rm), kExact, "running_mean written once");
    check_tensor(Value::tensor(got.rv), Value::tensor(want.rv), kExact, "running_var written once");
    check_tensor(got.out[0], test::op(OpId::mul, {Value::tensor(rm0), test::fv(2.0)}), kExact, "the old running_mean * 2");
    CHECK(test::vals(got.rm) != test::vals(rm0));  // and the update did happen
    // With dynamic sizes a failed check would rerun the graph (and the
    // write): such a graph runs on the eager backend.
    CHECK(got.report.fell_back == dynamic);
  }
}

// ------------------------------------------------------------ dynamic ----

namespace {

// Compiles once on `example`, then calls the same compiled graph with
// inputs of other sizes (made by `make(n)`) and compares each with eager.
template <class Make>
void check_sizes(GraphBuilder& b, Make make, const std::vector<int64_t>& sizes, Tol tol, size_t expect_kernels) {
  b.finish();
  std::shared_ptr<const Graph> g = b.g;
  output_graph::CompiledGraph compiled = codegen::llvm_backend(g, b.inputs);
  const codegen::BackendReport rep = codegen::last_report();
  INFO(b.g->code() << "\n--- program ---\n" << rep.summary << (rep.fell_back ? "fell back: " + rep.reason : ""));
  CHECK_FALSE(rep.fell_back);
  CHECK(rep.kernels == expect_kernels);
  output_graph::CompiledGraph eager = output_graph::eager_backend(g, b.inputs);
  for (int64_t n : sizes) {
    const std::vector<Value> in = make(n);
    std::vector<Value> want = eager(vm(), in);
    std::vector<Value> got = compiled(vm(), in);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i)
      check_tensor(got[i], want[i], tol, "size " + std::to_string(n) + ", output " + std::to_string(i) + ": " + b.out_names[i]);
  }
}

const std::vector<int64_t> kDynSizes = {3, 17, 100, 1000, 1, 2, 16, 5};

}  // namespace

TEST_CASE("codegen dynamic shapes: one compiled program serves many sizes", "[codegen]") {
  SECTION("dynamic rows: pointwise chain, broadcast, row reduction, softmax") {
    // One seed for every size, so the data differs per size but is fixed.
    auto make = [](int64_t n) {
      return std::vector<Value>{Value::tensor(rand_tensor({n, 24}, DType::Float32)),
                                Value::tensor(rand_tensor({24}, DType::Float32))};
    };
    GraphBuilder b;
    std::vector<Value> ex = make(5);
    Node* x = b.input(ex[0].as_tensor(), {true, false});
    Node* y = b.input(ex[1].as_tensor());
    Node* p = b.call(OpId::relu, {N(b.call(OpId::add, {N(b.call(OpId::mul, {N(x), F(2.0)})), N(y)}))});
    b.out(p, "relu(x*2 + y)");
    b.out(b.call(OpId::sum, {N(p), I(-1)}), "relu(x*2 + y).sum(-1)");
    b.out(b.call(OpId::softmax, {N(x), I(-1)}), "softmax(x, -1)");
    b.out(b.call(OpId::amax, {N(x), I(0)}), "amax(x, 0): over the dynamic dim");
    // relu(...) has three users: one kernel; sum, softmax, amax one each.
    check_sizes(b, make, kDynSizes, kNorm32, 4);
  }
  SECTION("dynamic row length: the vector body and tail vary") {
    auto make = [](int64_t n) { return std::vector<Value>{Value::tensor(rand_tensor({7, n}, DType::Float64))}; };
    GraphBuilder b;
    std::vector<Value> ex = make(9);
    Node* x = b.input(ex[0].as_tensor(), {false, true});
    b.out(b.call(OpId::exp, {N(x)}), "exp(x)");
    b.out(b.call(OpId::mean, {N(x), I(-1), B(true)}), "mean(x, -1, keepdim)");
    b.out(b.call(OpId::log_softmax, {N(x), I(1)}), "log_softmax(x, 1)");
    b.out(b.call(OpId::layer_norm, {N(b.call(OpId::transpose, {N(x), I(0), I(1)})), Ints({7})}), "layer_norm(x.T, [7])");
    check_sizes(b, make, kDynSizes, kNorm64, 4);
  }
  SECTION("dynamic batch through linear and gelu") {
    auto make = [](int64_t n) { return std::vector<Value>{Value::tensor(rand_tensor({n, 3, 32}, DType::Float32, -1, 1))}; };
    GraphBuilder b;
    std::vector<Value> ex = make(4);
    Node* x = b.input(ex[0].as_tensor(), {true, false, false});
    Node* w = b.param("fc.weight", rand_tensor({16, 32}, DType::Float32, -1, 1));
    Node* bias = b.param("fc.bias", rand_tensor({16}, DType::Float32, -1, 1));
    b.out(b.call(OpId::gelu, {N(b.call(OpId::linear, {N(x), N(w), N(bias)}))}), "gelu(linear(x))");
    check_sizes(b, make, kDynSizes, Tol{kGemm32.rtol + kGelu32.rtol, 2 * kGemm32.atol + kGelu32.atol}, 1);
  }
  SECTION("kernels over eager steps' results, sized when the steps have run") {
    // cat's and conv2d's results follow the dynamic batch; the kernels
    // consuming them, and their outputs, are sized by the steps' results
    // (allocating those outputs before the steps ran wrote out of bounds).
    auto make = [](int64_t n) {
      return std::vector<Value>{Value::tensor(rand_tensor({n, 2, 5, 5}, DType::Float32)),
                                Value::tensor(rand_tensor({3, 2, 5, 5}, DType::Float32))};
    };
    GraphBuilder b;
    std::vector<Value> ex = make(4);
    Node* x = b.input(ex[0].as_tensor(), {true, false, false, false});
    Node* y = b.input(ex[1].as_tensor());
    Node* w = b.param("conv.weight", rand_tensor({4, 2, 3, 3}, DType::Float32, -1, 1));
    b.out(b.call(OpId::add, {N(b.call(OpId::cat, {Arg::list({N(x), N(y)})})), I(1)}), "cat(x, y) + 1");
    Node* conv = b.call(OpId::conv2d, {N(x), N(w)}, {{"padding", I(1)}});
    b.out(b.call(OpId::relu, {N(b.call(OpId::mul, {N(conv), F(2.0)}))}), "relu(conv2d(x) * 2)");
    check_sizes(b, make, {4, 7, 1, 30, 2, 9}, kExact, 2);
  }
  SECTION("two dynamic inputs sharing a broadcast dim, integer ops") {
    auto make = [](int64_t n) {
      return std::vector<Value>{Value::tensor(rand_tensor({n, 6}, DType::Int64, -50, 50)),
                                Value::tensor(rand_tensor({n, 1}, DType::Int64, -50, 50))};
    };
    GraphBuilder b;
    std::vector<Value> ex = make(8);
    Node* x = b.input(ex[0].as_tensor(), {true, false});
    Node* y = b.input(ex[1].as_tensor(), {true, false});
    Node* s = b.call(OpId::sub, {N(b.call(OpId::mul, {N(x), N(y)})), I(3)});
    b.out(s, "x*y - 3");
    b.out(b.call(OpId::sum, {N(s)}), "(x*y - 3).sum()");
    b.out(b.call(OpId::gt, {N(x), N(b.call(OpId::transpose, {N(b.call(OpId::unsqueeze, {N(y), I(0)})), I(0), I(1)}))}),
          "x > y.unsqueeze(0).transpose(0,1) (views of dynamic layouts)");
    check_sizes(b, make, kDynSizes, kExact, 3);
  }
}

TEST_CASE("codegen dynamic shapes: contraction dims that differ at run time raise as eager does", "[codegen]") {
  // Traced with equal K; called with two dynamic Ks that differ. The
  // program must not hand BLAS a leading dimension that does not fit (found
  // by tests/fuzz: OpenBLAS refused the call, the output stayed unwritten,
  // and the compiled function went on with garbage): it runs eagerly, and
  // the kernel raises linear's own error.
  for (bool linear : {true, false}) {
    INFO((linear ? "linear" : "matmul"));
    GraphBuilder b;
    Tensor x0 = rand_tensor({4, 8}, DType::Float32, -1, 1);
    Tensor w0 = rand_tensor(linear ? Shape{3, 8} : Shape{8, 3}, DType::Float32, -1, 1);
    Node* x = b.input(x0, {false, true});
    Node* w = b.input(w0, linear ? std::vector<bool>{false, true} : std::vector<bool>{true, false});
    b.out(b.call(linear ? OpId::linear : OpId::matmul, {N(x), N(w)}), linear ? "linear(x, w)" : "x @ w");
    b.finish();
    output_graph::CompiledGraph compiled = codegen::llvm_backend(b.g, b.inputs);
    output_graph::CompiledGraph eager = output_graph::eager_backend(b.g, b.inputs);
    const std::vector<Value> in = {Value::tensor(rand_tensor({4, 6}, DType::Float32, -1, 1)),
                                   Value::tensor(rand_tensor(linear ? Shape{3, 5} : Shape{5, 3}, DType::Float32, -1, 1))};
    std::string want, got;
    try {
      eager(vm(), in);
    } catch (const Error& e) {
      want = e.what();
    }
    try {
      compiled(vm(), in);
    } catch (const Error& e) {
      got = e.what();
    }
    CHECK_FALSE(want.empty());
    CHECK(got == want);
  }
}

TEST_CASE("codegen dynamic shapes: a non-contiguous dynamic input", "[codegen]") {
  // x arrives transposed: a [n, 12] view of a [12, n] tensor, strides [1, n].
  // Its strides depend on the dynamic size, which the program must not
  // bake in.
  auto make = [](int64_t n) { return std::vector<Value>{Value::tensor(transposed(rand_tensor({12, n}, DType::Float32)))}; };
  GraphBuilder b;
  std::vector<Value> ex = make(6);
  Node* x = b.input(ex[0].as_tensor(), {true, false});
  b.out(b.call(OpId::add, {N(x), I(1)}), "x + 1");
  b.out(b.call(OpId::sum, {N(x), I(1)}), "x.sum(1)");
  // (A smaller n than the example's used to read past the input's storage
  // through the baked-in stride; the program must run such a call eagerly.)
  check_sizes(b, make, {6, 3, 17, 100, 1}, kReduce32, 2);
}

TEST_CASE("codegen: a call with another layout, shape or dtype than compiled for", "[codegen]") {
  // Compiled for a contiguous static [9, 21] float32; called directly (no
  // guards) with a transposed view of the same shape, another shape, and
  // another dtype: each call must give eager's result (or eager's error).
  GraphBuilder b;
  Node* x = b.input(rand_tensor({9, 21}, DType::Float32));
  b.out(b.call(OpId::add, {N(b.call(OpId::mul, {N(x), F(3.0)})), I(1)}), "x*3 + 1");
  b.out(b.call(OpId::sum, {N(x), I(-1)}), "x.sum(-1)");
  b.finish();
  std::shared_ptr<const Graph> g = b.g;
  output_graph::CompiledGraph compiled = codegen::llvm_backend(g, b.inputs);
  CHECK_FALSE(codegen::last_report().fell_back);
  output_graph::CompiledGraph eager = output_graph::eager_backend(g, b.inputs);
  const std::vector<std::pair<std::string, Tensor>> calls = {
      {"the example", b.inputs[0].as_tensor()},
      {"column-major [9,21]", col_major({9, 21}, DType::Float32)},
      {"every other column [9,21]", strided_cols({9, 21}, DType::Float32, 2)},
      {"contiguous [4,21]", rand_tensor({4, 21}, DType::Float32)},
      {"float64 [9,21]", rand_tensor({9, 21}, DType::Float64)},
  };
  for (const auto& [name, t] : calls) {
    const std::vector<Value> in = {Value::tensor(t)};
    std::vector<Value> want = eager(vm(), in), got = compiled(vm(), in);
    REQUIRE(got.size() == 2);
    check_tensor(got[0], want[0], kExact, name + ": x*3 + 1");
    check_tensor(got[1], want[1], kReduce32, name + ": x.sum(-1)");
  }
}
