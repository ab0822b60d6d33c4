// Kernel -> LLVM IR.
//
// Vectorization is explicit: the innermost loop of every kernel runs L lanes
// at a time (L from the host's vector width and the kernel's widest dtype),
// then a scalar tail. The per-element expressions are emitted once per lane
// count by instantiating ops.def's ScalarExpr with an IR emitter (IrEval),
// whose primitives are type-generic: the same code makes <16 x float> and
// float. Transcendentals call SLEEF's u10 functions (max error 1.0 ULP) at
// the matching width, since LLVM would otherwise scalarize them into libm
// calls; float32 tanh and erf are cheaper polynomials of kiln's own (their
// bounds are at IrEval::tanh and IrEval::erf). Float32 sum/mean
// accumulate in float64 lanes; softmax, log_softmax and layer_norm run in
// float32 lanes with blocked sums (see blocked_sum), and softmax computes each
// exp once (stored in its output, then scaled).
#include "codegen/lowering.h"

#include <cassert>
#include <climits>
#include <functional>
#include <limits>
#include <unordered_map>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include "runtime/tensor/scalar_expr.h"

namespace kiln::codegen {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

namespace {

struct Unlowerable {
  std::string reason;
};

// The evaluator ops.def's SCALAR_EXPR column is written against, over LLVM
// values (scalars or vectors). Types decide the instruction: float/double
// use IEEE ops, i64 wraps, i1 is bool.
struct IrEval {
  IRBuilder<>& B;
  llvm::Module& M;
  const HostCpu& cpu;

  static bool is_fp(Value* v) { return v->getType()->getScalarType()->isFloatingPointTy(); }
  static bool is_bool(Value* v) { return v->getType()->getScalarType()->isIntegerTy(1); }
  unsigned lanes(Value* v) const {
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType());
    return vt ? vt->getNumElements() : 1;
  }

  Value* c(Value* like, double v) {
    Type* t = like->getType();
    Type* s = t->getScalarType();
    llvm::Constant* k;
    if (s->isFloatingPointTy()) k = llvm::ConstantFP::get(s, v);
    else if (s->isIntegerTy(1)) k = llvm::ConstantInt::get(s, v != 0);
    else k = llvm::ConstantInt::get(s, uint64_t(int64_t(v)), true);
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t)) return llvm::ConstantVector::getSplat(vt->getElementCount(), k);
    return k;
  }
  Value* add(Value* a, Value* b) { return is_fp(a) ? B.CreateFAdd(a, b) : is_bool(a) ? B.CreateOr(a, b) : B.CreateAdd(a, b); }
  Value* sub(Value* a, Value* b) {
    if (is_bool(a)) throw Unlowerable{"bool subtraction"};
    return is_fp(a) ? B.CreateFSub(a, b) : B.CreateSub(a, b);
  }
  Value* mul(Value* a, Value* b) { return is_fp(a) ? B.CreateFMul(a, b) : is_bool(a) ? B.CreateAnd(a, b) : B.CreateMul(a, b); }
  Value* div(Value* a, Value* b) {
    if (!is_fp(a)) throw Unlowerable{"integer true division"};
    return B.CreateFDiv(a, b);
  }
  Value* neg(Value* a) {
    if (is_bool(a)) throw Unlowerable{"bool negation"};
    return is_fp(a) ? B.CreateFNeg(a) : B.CreateSub(c(a, 0), a);
  }
  Value* abs(Value* a) {
    if (is_bool(a)) return a;
    if (is_fp(a)) return B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a);
    return B.CreateSelect(B.CreateICmpSLT(a, c(a, 0)), B.CreateSub(c(a, 0), a), a);
  }
  // NaN-propagating, and otherwise exactly the eager `a < b ? b : a`
  // (so the sign of a zero result matches too).
  Value* max(Value* a, Value* b) { return minmax(a, b, true); }
  Value* min(Value* a, Value* b) { return minmax(a, b, false); }
  Value* minmax(Value* a, Value* b, bool is_max) {
    if (!is_fp(a)) {
      Value* lt = is_bool(a) ? B.CreateICmpULT(is_max ? a : b, is_max ? b : a) : B.CreateICmpSLT(is_max ? a : b, is_max ? b : a);
      return B.CreateSelect(lt, b, a);
    }
    Value* lt = B.CreateFCmpOLT(is_max ? a : b, is_max ? b : a);
    Value* r = B.CreateSelect(lt, b, a);
    Value* nan = B.CreateFCmpUNO(a, b);
    return B.CreateSelect(nan, c(a, std::numeric_limits<double>::quiet_NaN()), r);
  }
  // Float floor division and remainder as torch's div_floor_floating (the
  // scheduler keeps integer ones eager: they can raise).
  Value* floordiv(Value* a, Value* b) {
    if (!is_fp(a)) throw Unlowerable{"integer floor division"};
    Value* mod = B.CreateFRem(a, b);
    Value* d = B.CreateFDiv(B.CreateFSub(a, mod), b);
    Value* adjust = B.CreateAnd(B.CreateFCmpUNE(mod, c(a, 0)),
                                B.CreateXor(B.CreateFCmpOLT(b, c(b, 0)), B.CreateFCmpOLT(mod, c(a, 0))));
    d = B.CreateSelect(adjust, B.CreateFSub(d, c(a, 1)), d);
    Value* fl = B.CreateUnaryIntrinsic(llvm::Intrinsic::floor, d);
    fl = B.CreateSelect(B.CreateFCmpOGT(B.CreateFSub(d, fl), c(a, 0.5)), B.CreateFAdd(fl, c(a, 1)), fl);
    Value* q = B.CreateFDiv(a, b);
    Value* zero = B.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, c(a, 0), q);
    fl = B.CreateSelect(B.CreateFCmpOEQ(d, c(a, 0)), zero, fl);
    return B.CreateSelect(B.CreateFCmpOEQ(b, c(b, 0)), q, fl);
  }
  Value* mod(Value* a, Value* b) {
    if (!is_fp(a)) throw Unlowerable{"integer remainder"};
    Value* r = B.CreateFRem(a, b);
    Value* adjust = B.CreateAnd(B.CreateFCmpUNE(r, c(a, 0)),
                                B.CreateXor(B.CreateFCmpOLT(b, c(b, 0)), B.CreateFCmpOLT(r, c(a, 0))));
    return B.CreateSelect(adjust, B.CreateFAdd(r, b), r);
  }
  Value* pow(Value* a, Value* b) {
    if (!is_fp(a)) throw Unlowerable{"integer pow"};
    return sleef("pow", {a, b});
  }
  Value* cmp(Value* a, Value* b, llvm::CmpInst::Predicate fp, llvm::CmpInst::Predicate si, llvm::CmpInst::Predicate ui) {
    if (is_fp(a)) return B.CreateFCmp(fp, a, b);
    return B.CreateICmp(is_bool(a) ? ui : si, a, b);
  }
  Value* eq(Value* a, Value* b) { return cmp(a, b, llvm::CmpInst::FCMP_OEQ, llvm::CmpInst::ICMP_EQ, llvm::CmpInst::ICMP_EQ); }
  Value* ne(Value* a, Value* b) { return cmp(a, b, llvm::CmpInst::FCMP_UNE, llvm::CmpInst::ICMP_NE, llvm::CmpInst::ICMP_NE); }
  Value* lt(Value* a, Value* b) { return cmp(a, b, llvm::CmpInst::FCMP_OLT, llvm::CmpInst::ICMP_SLT, llvm::CmpInst::ICMP_ULT); }
  Value* le(Value* a, Value* b) { return cmp(a, b, llvm::CmpInst::FCMP_OLE, llvm::CmpInst::ICMP_SLE, llvm::CmpInst::ICMP_ULE); }
  Value* gt(Value* a, Value* b) { return cmp(a, b, llvm::CmpInst::FCMP_OGT, llvm::CmpInst::ICMP_SGT, llvm::CmpInst::ICMP_UGT); }
  Value* ge(Value* a, Value* b) { return cmp(a, b, llvm::CmpInst::FCMP_OGE, llvm::CmpInst::ICMP_SGE, llvm::CmpInst::ICMP_UGE); }
  Value* where(Value* cnd, Value* x, Value* y) { return B.CreateSelect(cnd, x, y); }
  Value* exp(Value* a) { return sleef("exp", {float_only(a)}); }
  Value* log(Value* a) { return sleef("log", {float_only(a)}); }
  Value* sin(Value* a) { return sleef("sin", {float_only(a)}); }
  Value* cos(Value* a) { return sleef("cos", {float_only(a)}); }
  // float32 tanh and erf have cheaper forms than SLEEF's (whose u10 tanh,
  // expm1 and erf cost about 5x its exp): a short polynomial near 0 and
  // SLEEF's exp elsewhere. float64 keeps SLEEF's u10 functions.
  Value* tanh(Value* a) {
    if (!is_f32(float_only(a))) return sleef("tanh", {a});
    // |x| < 0.625: tanh x = x + x * s * Q(s), s = x^2 (least-squares fit,
    // relative error, Chebyshev nodes: within 0.8 ULP); else
    // 1 - 2 / (exp(2|x|) + 1) (within 1.5 ULP; 1 once exp overflows). Both
    // computed per lane and selected; the sign is copied back.
    static const double Q[] = {-0.3333325874366339, 0.13331091353652472, -0.05371849428621381,
                               0.020583502861191844, -0.005652359073698486};
    Value* ax = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a);
    Value* x2 = B.CreateFMul(a, a);
    Value* small = B.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()},
                                     {B.CreateFMul(ax, x2), horner(Q, 5, x2), ax});
    Value* e = sleef("exp", {B.CreateFMul(c(a, 2.0), ax)});
    Value* large = B.CreateFSub(c(a, 1.0), B.CreateFDiv(c(a, 2.0), B.CreateFAdd(e, c(a, 1.0))));
    Value* r = B.CreateSelect(B.CreateFCmpOLT(ax, c(a, 0.625)), small, large);
    r = B.CreateSelect(B.CreateFCmpUNO(a, a), a, r);  // NaN stays NaN
    return B.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, r, a);
  }
  // p = k[0] + x * (k[1] + x * (...)), with fused multiply-adds.
  Value* horner(const double* k, int n, Value* x) {
    Value* p = c(x, k[n - 1]);
    for (int i = n - 2; i >= 0; --i) p = B.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {p, x, c(x, k[i])});
    return p;
  }
  // float32 erf (gelu's): one short polynomial per lane. The former form
  // computed two fits for every lane and blended them, paying SLEEF's exp
  // and 17 fused multiply-adds per element: gelu on 256x2048 floats took
  // 375 us on one core, 135 us of it memory traffic; now 183 us.
  //   |x| < 4:      16 pieces of width 1/4; in piece i = floor(4|x|),
  //                 erf = sum_k T[k][i] t^k, t = 4|x| - i in [0, 1), degree 5
  //   |x| >= 3.925: erf = 1 (erfc < half an ULP of 1)
  // y = 4|x| and t are exact (a power-of-2 scaling; y - floor(y) by
  // Sterbenz's lemma), so the error is the fit's plus Horner's roundings.
  // T[0][0] = 0: piece 0 stays relatively accurate down to subnormal x.
  // Coefficients: per piece a minimax fit of the relative error (Lawson's
  // iteration on Chebyshev nodes), rounded to float32 one at a time from
  // the constant term up, refitting the higher ones after each rounding.
  // Checked against double erf on every float32 in [0, 5]: within 2.27 ULP
  // (the worst in piece 0; 1.15 ULP for |x| >= 1/4) and 5.94e-8 absolute
  // (1.0 ULP of 1: what gelu's 1 + erf cancellation sees); the former form
  // 2.32 ULP and 1.13e-7. tests/cpp/test_codegen.cpp recovers erf from gelu
  // where that is exact and holds it to 1.15 ULP + the recovery's 0.5.
  // Each lane's coefficient comes from a register by one vpermps where the
  // vector is 16 floats (AVX-512) or two where it is 8 (AVX2), else from a
  // constant table in memory.
  static constexpr float kErfTable[6][16] = {
      {0.0f, 0.2763264f, 0.5204999f, 0.71115565f, 0.8427008f, 0.92290014f,
       0.96610516f, 0.9866717f, 0.9953223f, 0.9985373f, 0.999593f, 0.9998994f,
       0.9999779f, 0.9999957f, 0.9999993f, 0.9999999f},
      {0.28209478f, 0.26500335f, 0.21969514f, 0.16073172f, 0.10377761f, 0.059129804f,
       0.029731825f, 0.013193032f, 0.0051656472f, 0.0017846451f, 0.00054596923f, 0.00014610463f,
       3.5939705e-05f, 6.740417e-06f, -2.7186283e-08f, 4.9139845e-07f},
      {6.4431356e-07f, -0.016559508f, -0.027456276f, -0.030128282f, -0.025950706f, -0.018475376f,
       -0.011144404f, -0.005766747f, -0.0025745342f, -0.0009967955f, -0.0003514161f, -9.7004966e-05f,
       -3.5079396e-05f, -1.4774522e-06f, 9.811882e-06f, -2.3694777e-06f},
      {-0.005881351f, -0.004847132f, -0.0023115112f, 0.0003902606f, 0.0021824418f, 0.0026135524f,
       0.0021557985f, 0.0013941622f, 0.00072853157f, 0.0003176799f, 0.00016099848f, 3.23944e-05f,
       3.7330505e-05f, -9.421778e-06f, -3.0096719e-05f, 6.172604e-06f},
      {9.9485e-06f, 0.0005306275f, 0.00075733534f, 0.00062722404f, 0.00024270901f, -2.709109e-05f,
       -0.00016608348f, -0.00017337957f, -0.00010567837f, -4.858627e-05f, -6.76737e-05f, 1.0501414e-08f,
       -3.2438344e-05f, 1.3203526e-05f, 3.488574e-05f, -6.9577854e-06f},
      {0.0001023577f, 4.6157867e-05f, -2.8945295e-05f, -7.580375e-05f, -5.269167e-05f, -3.5895813e-05f,
       -1.0644265e-05f, 3.4966833e-06f, 1.0082872e-06f, -1.2156122e-06f, 1.8508703e-05f, -2.991549e-06f,
       1.2080511e-05f, -5.5073297e-06f, -1.3999555e-05f, 2.7724411e-06f},
  };
  Value* erf(Value* a) {
    if (!is_f32(float_only(a))) return sleef("erf", {a});
    Value* ax = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a);
    Value* y = B.CreateFMul(ax, c(a, 4.0));
    // Piece 15 serves [3.75, 4) and anything larger or NaN (selected or
    // propagated below); clamping first keeps fptosi defined.
    Value* yc = B.CreateSelect(B.CreateFCmpOLT(y, c(a, 15.0)), y, c(a, 15.0));
    Value* piece = B.CreateFPToSI(yc, with_scalar(a, B.getInt32Ty()));
    Value* t = B.CreateFSub(y, B.CreateSIToFP(piece, a->getType()));
    Value* p = erf_coef(5, piece);
    for (int k = 4; k >= 0; --k)
      p = B.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {p, t, erf_coef(k, piece)});
    p = B.CreateSelect(B.CreateFCmpOGE(ax, c(a, 3.925)), c(a, 1.0), p);  // NaN: p is NaN already
    return B.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, p, a);
  }
  Type* with_scalar(Value* like, Type* s) {
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(like->getType());
    return vt ? static_cast<Type*>(llvm::FixedVectorType::get(s, vt->getNumElements())) : s;
  }
  // kErfTable[k][piece] per lane.
  Value* erf_coef(int k, Value* piece) {
    const unsigned n = lanes(piece);
    auto row = [&](int from, int count) {
      return llvm::ConstantDataVector::get(M.getContext(),
                                           llvm::ArrayRef<float>(kErfTable[k] + from, size_t(count)));
    };
    if (n == 16 && cpu.avx512f)
      return B.CreateIntrinsic(llvm::Intrinsic::x86_avx512_permvar_sf_512, {}, {row(0, 16), piece});
    if (n == 8 && cpu.avx2) {  // vpermps ymm reads the index's low 3 bits
      Value* lo = B.CreateIntrinsic(llvm::Intrinsic::x86_avx2_permps, {}, {row(0, 8), piece});
      Value* hi = B.CreateIntrinsic(llvm::Intrinsic::x86_avx2_permps, {}, {row(8, 8), piece});
      return B.CreateSelect(B.CreateICmpSGT(piece, c(piece, 7)), hi, lo);
    }
    auto* table_ty = llvm::ArrayType::get(llvm::ArrayType::get(B.getFloatTy(), 16), 6);
    auto* table = llvm::cast<llvm::GlobalVariable>(M.getOrInsertGlobal("kiln_erf_f32_table", table_ty));
    if (!table->hasInitializer()) {
      std::vector<llvm::Constant*> rows;
      for (const auto& r : kErfTable)
        rows.push_back(llvm::ConstantDataArray::get(M.getContext(), llvm::ArrayRef<float>(r, 16)));
      table->setInitializer(llvm::ConstantArray::get(table_ty, rows));
      table->setConstant(true);
      table->setLinkage(llvm::GlobalValue::PrivateLinkage);
    }
    auto load = [&](Value* i) {
      Value* at = B.CreateInBoundsGEP(table_ty, table, {B.getInt64(0), B.getInt64(uint64_t(k)), i});
      return B.CreateLoad(B.getFloatTy(), at);
    };
    if (n == 1) return load(piece);
    Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(B.getFloatTy(), n));
    for (unsigned l = 0; l < n; ++l)
      v = B.CreateInsertElement(v, load(B.CreateExtractElement(piece, uint64_t(l))), uint64_t(l));
    return v;
  }
  static bool is_f32(Value* v) { return v->getType()->getScalarType()->isFloatTy(); }
  Value* sqrt(Value* a) { return B.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, float_only(a)); }
  Value* band(Value* a, Value* b) { return int_only(a), B.CreateAnd(a, b); }
  Value* bor(Value* a, Value* b) { return int_only(a), B.CreateOr(a, b); }
  Value* bxor(Value* a, Value* b) { return int_only(a), B.CreateXor(a, b); }
  Value* bnot(Value* a) { return int_only(a), B.CreateNot(a); }

  Value* float_only(Value* a) {
    if (!is_fp(a)) throw Unlowerable{"transcendental of an integer"};
    return a;
  }
  void int_only(Value* a) {
    if (is_fp(a)) throw Unlowerable{"bitwise op on a float"};
  }

  // SLEEF's u10 (1.0 ULP) function for this element type and width:
  // Sleef_expf16_u10, Sleef_expd8_u10, Sleef_expf_u10, Sleef_exp_u10.
  Value* sleef(const std::string& fn, std::vector<Value*> args) {
    Type* t = args[0]->getType();
    const bool f32 = t->getScalarType()->isFloatTy();
    const unsigned n = lanes(args[0]);
    std::string name = "Sleef_" + fn + (f32 ? "f" : (n > 1 ? "d" : "")) + (n > 1 ? std::to_string(n) : "") + "_u10";
    std::vector<Type*> params(args.size(), t);
    llvm::FunctionCallee callee = M.getOrInsertFunction(name, llvm::FunctionType::get(t, params, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      f->setDoesNotThrow();
      f->setMemoryEffects(llvm::MemoryEffects::none());
    }
    return B.CreateCall(callee, args);
  }
};

template <runtime::OpId Id>
Value* eval_op(IrEval& E, Value* a, Value* b, Value* c) {
  if constexpr (requires { runtime::ScalarExpr<Id>::eval(E, a, b, c); }) {
    return runtime::ScalarExpr<Id>::eval(E, a, b, c);
  } else {
    throw Unlowerable{"not a pointwise op"};
  }
}

Value* eval_pointwise(IrEval& E, runtime::OpId id, Value* a, Value* b, Value* c) {
  switch (id) {
#define KILN_OP(NAME, ...) \
  case runtime::OpId::NAME: return eval_op<runtime::OpId::NAME>(E, a, b, c);
#include "runtime/tensor/ops.def"
#undef KILN_OP
  }
  throw Unlowerable{"unknown op"};
}

class KernelLowering {
 public:
  KernelLowering(llvm::Module& m, const Program& p, const Kernel& k, const HostCpu& cpu)
      : M_(m), ctx_(m.getContext()), B_(ctx_), E_{B_, m, cpu}, P_(p), K_(k), cpu_(cpu) {}

  void run(const std::string& symbol);

 private:
  Type* elem_type(DType d) {
    switch (d) {
      case DType::Bool: return B_.getInt1Ty();
      case DType::Int32: return B_.getInt32Ty();
      case DType::Int64: return B_.getInt64Ty();
      case DType::Float32: return B_.getFloatTy();
      case DType::Float64: return B_.getDoubleTy();
    }
    return B_.getFloatTy();
  }
  Type* mem_type(DType d) { return d == DType::Bool ? B_.getInt8Ty() : elem_type(d); }
  Type* vec(Type* t, unsigned n) { return n == 1 ? t : llvm::FixedVectorType::get(t, n); }
  Value* i64(int64_t v) { return B_.getInt64(uint64_t(v)); }

  Value* dim(const Dim& d) {
    Value* v = i64(d.coef);
    for (int s : d.syms) v = B_.CreateMul(v, sym_[size_t(s)]);
    return v;
  }
  Value* splat(Value* v, unsigned n) { return n == 1 ? v : B_.CreateVectorSplat(n, v); }
  Value* convert(Value* v, DType from, DType to, unsigned n);

  // for (i = lo; i < hi; i += step) body(i)
  void loop(Value* lo, Value* hi, int64_t step, const std::function<void(Value*)>& body);
  // Runs body(idx, lanes) over dims [first, dims.size()) with the last dim
  // vectorized; idx holds the index of every dim so far.
  void nest(const Dims& dims, size_t first, std::vector<Value*>& idx, Value* lo0, Value* hi0, bool vectorize,
            const std::function<void(std::vector<Value*>&, unsigned)>& body);

  Value* address(const Access& a, const std::vector<Value*>& idx, unsigned lane_stride_dim, int64_t lane);
  Value* lane_addresses(const Access& a, const std::vector<Value*>& idx, unsigned n);
  Value* load(const Access& a, DType dt, const std::vector<Value*>& idx, unsigned n);
  void store(const Access& a, DType dt, const std::vector<Value*>& idx, unsigned n, Value* v);
  // Evaluates the DAG under `root` at idx with n lanes; `result` stands for
  // ExprKind::Result.
  Value* eval(int root, const std::vector<Value*>& idx, unsigned n, Value* result);

  Value* hreduce(Value* v, bool is_max);
  using RowFn = std::function<Value*(Value*, std::vector<Value*>&, unsigned)>;  // f(input, idx, lanes)
  Value* fold_row(const std::vector<Value*>& ox, bool is_max, DType acc_t, Value* init, const RowFn& f);
  // The float64 sum over the row of f(input, idx, lanes) (float32 values),
  // blocked: see its definition.
  Value* blocked_sum(const std::vector<Value*>& ox, const RowFn& f);
  Value* row_log(Value* d);
  // The max a fold takes: amax's propagates NaN (IrEval::max); softmax's
  // row max need not (plain_max_): a NaN in the row makes its sum, and so
  // every result, NaN anyway, and x > m ? x : m is one vmaxps.
  Value* row_max(Value* a, Value* b) {
    if (plain_max_ && IrEval::is_fp(a)) return B_.CreateSelect(B_.CreateFCmpOGT(b, a), b, a);
    return E_.max(a, b);
  }
  bool plain_max_ = false;
  // Row kernels unroll a static row of at most kUnrollVectors whole vectors.
  bool unroll_rows_ = false;
  static constexpr int64_t kUnrollVectors = 8;
  void pointwise();
  void reduction();
  void rowwise();

  llvm::Module& M_;
  llvm::LLVMContext& ctx_;
  IRBuilder<> B_;
  IrEval E_;
  const Program& P_;
  const Kernel& K_;
  const HostCpu& cpu_;
  llvm::Function* fn_ = nullptr;
  Value* begin_ = nullptr;
  Value* end_ = nullptr;
  std::vector<Value*> base_;  // per kernel buffer (local index), loaded lazily in the entry block
  std::unordered_map<int, int> local_;  // program buffer -> the kernel's index
  std::vector<Value*> sym_;
  unsigned lanes_ = 1;
  // Set while emitting the masked remainder step of a vectorized loop:
  // loads and stores touch only its lanes, folds ignore the others.
  Value* mask_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
};

Value* KernelLowering::convert(Value* v, DType from, DType to, unsigned n) {
  if (from == to) return v;
  Type* t = vec(elem_type(to), n);
  if (to == DType::Bool) {
    return runtime::is_floating(from) ? B_.CreateFCmpUNE(v, E_.c(v, 0)) : B_.CreateICmpNE(v, E_.c(v, 0));
  }
  if (from == DType::Bool) return runtime::is_floating(to) ? B_.CreateUIToFP(v, t) : B_.CreateZExt(v, t);
  if (runtime::is_floating(from) && runtime::is_floating(to)) return B_.CreateFPCast(v, t);
  if (runtime::is_floating(from)) return B_.CreateFPToSI(v, t);
  if (runtime::is_floating(to)) return B_.CreateSIToFP(v, t);
  return B_.CreateSExtOrTrunc(v, t);
}

void KernelLowering::loop(Value* lo, Value* hi, int64_t step, const std::function<void(Value*)>& body) {
  llvm::BasicBlock* pre = B_.GetInsertBlock();
  llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx_, "loop", fn_);
  llvm::BasicBlock* bodyb = llvm::BasicBlock::Create(ctx_, "body", fn_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  B_.CreateBr(head);
  B_.SetInsertPoint(head);
  llvm::PHINode* i = B_.CreatePHI(B_.getInt64Ty(), 2, "i");
  i->addIncoming(lo, pre);
  B_.CreateCondBr(B_.CreateICmpSLT(i, hi), bodyb, exit);
  B_.SetInsertPoint(bodyb);
  body(i);
  Value* next = B_.CreateAdd(i, i64(step), "", true, true);
  i->addIncoming(next, B_.GetInsertBlock());
  B_.CreateBr(head);
  B_.SetInsertPoint(exit);
}

void KernelLowering::nest(const Dims& dims, size_t d, std::vector<Value*>& idx, Value* lo0, Value* hi0,
                          bool vectorize, const std::function<void(std::vector<Value*>&, unsigned)>& body) {
  if (d == dims.size()) {
    body(idx, 1);
    return;
  }
  Value* lo = d == 0 && lo0 ? lo0 : i64(0);
  Value* hi = d == 0 && hi0 ? hi0 : dim(dims[d]);
  const bool last = d + 1 == dims.size();
  if (last && vectorize && lanes_ > 1) {
    // Whole vectors, then the scalar tail. A static trip count drops the
    // part that would never run (less code to compile).
    const int64_t L = lanes_;
    const bool static_count = !(d == 0 && lo0) && dims[d].is_static();
    if (static_count && dims[d].coef % L == 0 && unroll_rows_ && dims[d].coef / L <= kUnrollVectors) {
      // A short row of a row kernel, straight-line: no loop per pass, so the
      // out-of-order core overlaps a row's passes and the next row's loads,
      // and EarlyCSE reuses a pass's loads (and softmax's stored exps).
      for (int64_t v = 0; v < dims[d].coef / L; ++v) {
        idx.push_back(i64(v * L));
        body(idx, lanes_);
        idx.pop_back();
      }
      return;
    }
    if (static_count && dims[d].coef % L == 0) {
      loop(lo, hi, L, [&](Value* i) {
        idx.push_back(i);
        body(idx, lanes_);
        idx.pop_back();
      });
      return;
    }
    if (static_count && dims[d].coef < L) {
      loop(lo, hi, 1, [&](Value* i) {
        idx.push_back(i);
        body(idx, 1);
        idx.pop_back();
      });
      return;
    }
    std::vector<llvm::Constant*> iota;
    for (int64_t l = 0; l < L; ++l) iota.push_back(B_.getInt64(uint64_t(l)));
    Value* lanes = llvm::ConstantVector::get(iota);
    if (!(d == 0 && lo0)) {
      // A row: one vector loop whose every step is masked to the lanes
      // still in range. The body is emitted once (a kernel's compile time
      // is mostly its code size), and AVX-512 masks loads and stores for free.
      loop(lo, hi, L, [&](Value* i) {
        mask_ = B_.CreateICmpSLT(lanes, splat(B_.CreateSub(hi, i), lanes_));
        idx.push_back(i);
        body(idx, lanes_);
        idx.pop_back();
        mask_ = nullptr;
      });
      return;
    }
    // The long flat loop of a pointwise kernel: unmasked vectors, then the
    // remainder as one masked step.
    Value* vec_end = B_.CreateAdd(lo, B_.CreateMul(B_.CreateSDiv(B_.CreateSub(hi, lo), i64(L)), i64(L)));
    loop(lo, vec_end, L, [&](Value* i) {
      idx.push_back(i);
      body(idx, lanes_);
      idx.pop_back();
    });
    Value* rem = B_.CreateSub(hi, vec_end);
    llvm::BasicBlock* tail = llvm::BasicBlock::Create(ctx_, "tail", fn_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "tail_done", fn_);
    B_.CreateCondBr(B_.CreateICmpSGT(rem, i64(0)), tail, done);
    B_.SetInsertPoint(tail);
    mask_ = B_.CreateICmpSLT(lanes, splat(rem, lanes_));
    idx.push_back(vec_end);
    body(idx, lanes_);
    idx.pop_back();
    mask_ = nullptr;
    B_.CreateBr(done);
    B_.SetInsertPoint(done);
    return;
  }
  loop(lo, hi, 1, [&](Value* i) {
    idx.push_back(i);
    nest(dims, d + 1, idx, lo0, hi0, vectorize, body);
    idx.pop_back();
  });
}

// Element pointer of lane `lane` (0 for a whole vector) at idx.
Value* KernelLowering::address(const Access& a, const std::vector<Value*>& idx, unsigned, int64_t lane) {
  Value* off = dim(a.offset);
  for (size_t d = 0; d < idx.size() && d < a.strides.size(); ++d) {
    if (a.strides[d].is(0)) continue;
    off = B_.CreateAdd(off, B_.CreateMul(idx[d], dim(a.strides[d])));
  }
  if (lane) off = B_.CreateAdd(off, B_.CreateMul(i64(lane), dim(a.strides[idx.size() - 1])));
  const Buffer& b = P_.buffers[size_t(a.buffer)];
  // The kernel's own table: its l-th buffer (Kernel::buffers).
  auto it = local_.find(a.buffer);
  if (it == local_.end()) throw Unlowerable{"an access to a buffer the kernel does not list (a kiln bug)"};
  const size_t l = size_t(it->second);
  if (!base_[l]) {
    llvm::IRBuilder<> eb(entry_, entry_->getFirstInsertionPt());
    Value* slot = eb.CreateGEP(eb.getPtrTy(), fn_->getArg(0), eb.getInt64(uint64_t(l)));
    base_[l] = eb.CreateLoad(eb.getPtrTy(), slot);
  }
  return B_.CreateGEP(mem_type(b.dtype), base_[l], off);
}

// The addresses of the n lanes of a strided access, for gathers/scatters.
Value* KernelLowering::lane_addresses(const Access& a, const std::vector<Value*>& idx, unsigned n) {
  Value* first = address(a, idx, 0, 0);
  std::vector<llvm::Constant*> iota;
  for (unsigned l = 0; l < n; ++l) iota.push_back(B_.getInt64(l));
  Value* steps = B_.CreateMul(llvm::ConstantVector::get(iota), splat(dim(a.strides[idx.size() - 1]), n));
  return B_.CreateGEP(mem_type(P_.buffers[size_t(a.buffer)].dtype), first, steps);
}

Value* KernelLowering::load(const Access& a, DType dt, const std::vector<Value*>& idx, unsigned n) {
  Type* mt = mem_type(dt);
  const Dim& inner = a.strides.size() >= idx.size() ? a.strides[idx.size() - 1] : Dim::c(0);
  Value* v;
  const llvm::Align al(runtime::itemsize(dt));
  if (n == 1 || inner.is(0)) {
    v = splat(B_.CreateAlignedLoad(mt, address(a, idx, 0, 0), al), n);  // lane 0 is always in range
  } else if (mask_) {
    Value* zero = llvm::Constant::getNullValue(vec(mt, n));
    v = inner.is(1) ? B_.CreateMaskedLoad(vec(mt, n), address(a, idx, 0, 0), al, mask_, zero)
                    : B_.CreateMaskedGather(vec(mt, n), lane_addresses(a, idx, n), al, mask_, zero);
  } else if (inner.is(1)) {
    v = B_.CreateAlignedLoad(vec(mt, n), address(a, idx, 0, 0), al);
  } else {
    v = llvm::PoisonValue::get(vec(mt, n));
    for (unsigned l = 0; l < n; ++l)
      v = B_.CreateInsertElement(v, B_.CreateAlignedLoad(mt, address(a, idx, 0, l), al), uint64_t(l));
  }
  if (dt == DType::Bool) v = B_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
  return v;
}

void KernelLowering::store(const Access& a, DType dt, const std::vector<Value*>& idx, unsigned n, Value* v) {
  if (dt == DType::Bool) v = B_.CreateZExt(v, vec(B_.getInt8Ty(), n));
  const llvm::Align al(runtime::itemsize(dt));
  const Dim& inner = a.strides[idx.size() - 1];
  if (n == 1) {
    B_.CreateAlignedStore(v, address(a, idx, 0, 0), al);
  } else if (mask_) {
    if (inner.is(1)) B_.CreateMaskedStore(v, address(a, idx, 0, 0), al, mask_);
    else B_.CreateMaskedScatter(v, lane_addresses(a, idx, n), al, mask_);
  } else if (inner.is(1)) {
    B_.CreateAlignedStore(v, address(a, idx, 0, 0), al);
  } else {
    for (unsigned l = 0; l < n; ++l) B_.CreateAlignedStore(B_.CreateExtractElement(v, uint64_t(l)), address(a, idx, 0, l), al);
  }
}

Value* KernelLowering::eval(int root, const std::vector<Value*>& idx, unsigned n, Value* result) {
  // Operands precede their users in the arena; evaluate the reachable ones
  // in order, each once.
  std::vector<char> need(size_t(root) + 1, 0);
  need[size_t(root)] = 1;
  for (int i = root; i >= 0; --i) {
    if (!need[size_t(i)]) continue;
    const Expr& e = K_.exprs[size_t(i)];
    for (int op : {e.a, e.b, e.c})
      if (op >= 0) need[size_t(op)] = 1;
  }
  std::unordered_map<int, Value*> val;
  for (int i = 0; i <= root; ++i) {
    if (!need[size_t(i)]) continue;
    const Expr& e = K_.exprs[size_t(i)];
    Value* v = nullptr;
    switch (e.kind) {
      case ExprKind::Load: v = load(K_.accesses[size_t(e.access)], e.dtype, idx, n); break;
      case ExprKind::Const: v = splat(E_.c(llvm::UndefValue::get(elem_type(e.dtype)), e.value), n); break;
      case ExprKind::Cast: v = convert(val[e.a], K_.exprs[size_t(e.a)].dtype, e.dtype, n); break;
      case ExprKind::Result: v = result; break;
      case ExprKind::Op:
        v = eval_pointwise(E_, e.op, val[e.a], e.b >= 0 ? val[e.b] : nullptr, e.c >= 0 ? val[e.c] : nullptr);
        break;
    }
    val[i] = v;
  }
  return val[root];
}

// Horizontal sum or max of a vector accumulator, halving it (a tree: 3
// dependent steps for 8 lanes instead of 7).
Value* KernelLowering::hreduce(Value* v, bool is_max) {
  // Lane counts are powers of two (f32_lanes * 4 / widest element size).
  assert((E_.lanes(v) & (E_.lanes(v) - 1)) == 0);
  for (unsigned n = E_.lanes(v); n > 1; n /= 2) {
    std::vector<int> lo, hi;
    for (unsigned l = 0; l < n / 2; ++l) lo.push_back(int(l)), hi.push_back(int(l + n / 2));
    Value* a = B_.CreateShuffleVector(v, lo);
    Value* b = B_.CreateShuffleVector(v, hi);
    v = is_max ? row_max(a, b) : E_.add(a, b);
  }
  return E_.lanes(v) == 1 && v->getType()->isVectorTy() ? B_.CreateExtractElement(v, uint64_t(0)) : v;
}

void KernelLowering::pointwise() {
  std::vector<Value*> idx;
  nest(K_.outer, 0, idx, begin_, end_, true, [&](std::vector<Value*>& ix, unsigned n) {
    store(K_.store, P_.buffers[size_t(K_.store.buffer)].dtype, ix, n, eval(K_.epilogue, ix, n, nullptr));
  });
}

// Folds f(input) (already in acc_t) over the row's inner dims at outer
// index ox into one scalar: a vector accumulator for the vector steps (masked
// lanes add the identity; a max keeps its partial result), a scalar one for
// scalar steps, then a horizontal fold.
Value* KernelLowering::fold_row(const std::vector<Value*>& ox, bool is_max, DType acc_t, Value* init, const RowFn& f) {
  llvm::IRBuilder<> eb(entry_, entry_->getFirstInsertionPt());
  llvm::AllocaInst* vacc = eb.CreateAlloca(vec(elem_type(acc_t), lanes_));
  llvm::AllocaInst* sacc = eb.CreateAlloca(elem_type(acc_t));
  B_.CreateStore(splat(init, lanes_), vacc);
  B_.CreateStore(init, sacc);
  std::vector<Value*> full = ox;
  nest(K_.inner, 0, full, nullptr, nullptr, true, [&](std::vector<Value*>& ix, unsigned n) {
    Value* x = f(eval(K_.input, ix, n, nullptr), ix, n);
    llvm::AllocaInst* acc = n == 1 ? sacc : vacc;
    Value* cur = B_.CreateLoad(acc->getAllocatedType(), acc);
    if (mask_) x = B_.CreateSelect(mask_, x, is_max ? cur : E_.c(cur, 0.0));
    B_.CreateStore(is_max ? row_max(cur, x) : E_.add(cur, x), acc);
  });
  Value* v = hreduce(B_.CreateLoad(vacc->getAllocatedType(), vacc), is_max);
  Value* sc = B_.CreateLoad(sacc->getAllocatedType(), sacc);
  return is_max ? row_max(v, sc) : E_.add(v, sc);
}

// A float32 row sum that is fast and stays accurate however long the row:
// each vector lane adds at most kBlock float32 terms (error <= kBlock ulps
// of the sum of |terms|), then its partial sum goes into a float64 lane
// total and restarts. So the hot loop is float32 at full vector width, and
// the bound does not grow with the row (a plain float32 lane sum's grows
// with length / lanes). Scalar steps (rows narrower than a vector) add into
// a float64 scalar directly. The result is the float64 total.
Value* KernelLowering::blocked_sum(const std::vector<Value*>& ox, const RowFn& f) {
  constexpr int64_t kBlock = 64;
  llvm::IRBuilder<> eb(entry_, entry_->getFirstInsertionPt());
  Type* f32v = vec(B_.getFloatTy(), lanes_);
  Type* f64v = vec(B_.getDoubleTy(), lanes_);
  llvm::AllocaInst* part = eb.CreateAlloca(f32v);
  llvm::AllocaInst* total = eb.CreateAlloca(f64v);
  llvm::AllocaInst* count = eb.CreateAlloca(B_.getInt64Ty());
  llvm::AllocaInst* stotal = eb.CreateAlloca(B_.getDoubleTy());
  B_.CreateStore(llvm::Constant::getNullValue(f32v), part);
  B_.CreateStore(llvm::Constant::getNullValue(f64v), total);
  B_.CreateStore(i64(0), count);
  B_.CreateStore(llvm::ConstantFP::get(B_.getDoubleTy(), 0.0), stotal);
  // A row of at most kBlock vectors (static) never flushes: no counter.
  const Dim row = product(K_.inner);
  const bool short_row = row.is_static() && row.coef <= kBlock * int64_t(lanes_);
  std::vector<Value*> full = ox;
  nest(K_.inner, 0, full, nullptr, nullptr, true, [&](std::vector<Value*>& ix, unsigned n) {
    Value* x = f(eval(K_.input, ix, n, nullptr), ix, n);
    if (n == 1) {
      Value* cur = B_.CreateLoad(B_.getDoubleTy(), stotal);
      B_.CreateStore(B_.CreateFAdd(cur, B_.CreateFPExt(x, B_.getDoubleTy())), stotal);
      return;
    }
    if (mask_) x = B_.CreateSelect(mask_, x, llvm::Constant::getNullValue(f32v));
    B_.CreateStore(B_.CreateFAdd(B_.CreateLoad(f32v, part), x), part);
    if (short_row) return;
    Value* c = B_.CreateAdd(B_.CreateLoad(B_.getInt64Ty(), count), i64(1));
    B_.CreateStore(c, count);
    llvm::BasicBlock* flush = llvm::BasicBlock::Create(ctx_, "flush", fn_);
    llvm::BasicBlock* cont = llvm::BasicBlock::Create(ctx_, "flushed", fn_);
    // Weighted as taken once in kBlock, so SimplifyCFG keeps the branch
    // instead of computing the float64 add on every step and selecting.
    B_.CreateCondBr(B_.CreateICmpEQ(c, i64(kBlock)), flush, cont,
                    llvm::MDBuilder(ctx_).createBranchWeights(1, kBlock - 1));
    B_.SetInsertPoint(flush);
    B_.CreateStore(B_.CreateFAdd(B_.CreateLoad(f64v, total), B_.CreateFPExt(B_.CreateLoad(f32v, part), f64v)), total);
    B_.CreateStore(llvm::Constant::getNullValue(f32v), part);
    B_.CreateStore(i64(0), count);
    B_.CreateBr(cont);
    B_.SetInsertPoint(cont);
  });
  Value* v;
  if (short_row) {  // no block was flushed: fold the lanes in float32 (4 more roundings at 16 lanes)
    Value* p = B_.CreateLoad(f32v, part);
    v = B_.CreateFPExt(lanes_ > 1 ? hreduce(p, false) : p, B_.getDoubleTy());
  } else {
    Value* lanes_total =
        B_.CreateFAdd(B_.CreateLoad(f64v, total), B_.CreateFPExt(B_.CreateLoad(f32v, part), f64v));
    v = lanes_ > 1 ? hreduce(lanes_total, false) : lanes_total;
  }
  return B_.CreateFAdd(v, B_.CreateLoad(B_.getDoubleTy(), stotal));
}

// log of a float32 row's float64 sum, once per row: inline for a positive normal
// finite value (always, for log_softmax's sum: >= 1 unless the row holds a
// NaN or an inf), libm's otherwise. A call per row was the largest single
// cost of a (4, 4, 64, 64) log_softmax: SLEEF's portable scalar log 30%,
// libm's 23%. d = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
// s = (m - 1)/(m + 1), |s| <= 0.172, by its series to s^11 (the next term
// is below 1e-11 relative): far inside the float32 result's half ULP.
Value* KernelLowering::row_log(Value* d) {
  Type* dt = B_.getDoubleTy();
  Type* it = B_.getInt64Ty();
  Value* bits = B_.CreateBitCast(d, it);
  Value* ok = B_.CreateAnd(B_.CreateFCmpOGE(d, llvm::ConstantFP::get(dt, 2.2250738585072014e-308)),
                           B_.CreateFCmpOLT(d, llvm::ConstantFP::get(dt, std::numeric_limits<double>::infinity())));
  llvm::BasicBlock* fast = llvm::BasicBlock::Create(ctx_, "log_inline", fn_);
  llvm::BasicBlock* slow = llvm::BasicBlock::Create(ctx_, "log_libm", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "log_done", fn_);
  B_.CreateCondBr(ok, fast, slow, llvm::MDBuilder(ctx_).createBranchWeights(1000, 1));
  B_.SetInsertPoint(fast);
  Value* e = B_.CreateSub(B_.CreateLShr(bits, i64(52)), i64(1023));
  Value* m = B_.CreateBitCast(B_.CreateOr(B_.CreateAnd(bits, i64((int64_t(1) << 52) - 1)), i64(int64_t(1023) << 52)), dt);
  Value* big = B_.CreateFCmpOGT(m, llvm::ConstantFP::get(dt, 1.4142135623730951));
  m = B_.CreateSelect(big, B_.CreateFMul(m, llvm::ConstantFP::get(dt, 0.5)), m);
  e = B_.CreateSelect(big, B_.CreateAdd(e, i64(1)), e);
  Value* sv = B_.CreateFDiv(B_.CreateFSub(m, llvm::ConstantFP::get(dt, 1.0)), B_.CreateFAdd(m, llvm::ConstantFP::get(dt, 1.0)));
  static const double K[] = {1.0, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11};
  Value* p = E_.horner(K, 6, B_.CreateFMul(sv, sv));
  Value* lm = B_.CreateFMul(B_.CreateFMul(llvm::ConstantFP::get(dt, 2.0), sv), p);
  Value* r_fast = B_.CreateIntrinsic(llvm::Intrinsic::fma, {dt},
                                     {B_.CreateSIToFP(e, dt), llvm::ConstantFP::get(dt, 0.6931471805599453), lm});
  B_.CreateBr(done);
  llvm::BasicBlock* fast_end = B_.GetInsertBlock();
  B_.SetInsertPoint(slow);
  Value* r_slow = B_.CreateUnaryIntrinsic(llvm::Intrinsic::log, d);
  B_.CreateBr(done);
  llvm::BasicBlock* slow_end = B_.GetInsertBlock();
  B_.SetInsertPoint(done);
  llvm::PHINode* r = B_.CreatePHI(dt, 2);
  r->addIncoming(r_fast, fast_end);
  r->addIncoming(r_slow, slow_end);
  return r;
}

// Sum / Mean / Amax: one accumulator per output element.
void KernelLowering::reduction() {
  const DType cd = K_.compute;
  const bool is_max = K_.kind == KernelKind::Amax;
  // Float sums accumulate in double, integer sums in int64 (wrapping).
  const DType ad = is_max ? cd : runtime::is_floating(cd) ? DType::Float64 : DType::Int64;
  std::vector<Value*> idx;
  nest(K_.outer, 0, idx, begin_, end_, false, [&](std::vector<Value*>& ox, unsigned) {
    // The identity of the fold: -inf for a float max, false for a bool max.
    const double init_v = is_max && runtime::is_floating(cd) ? -std::numeric_limits<double>::infinity() : 0.0;
    Value* init = is_max && cd == DType::Int64 ? i64(INT64_MIN) : E_.c(llvm::UndefValue::get(elem_type(ad)), init_v);
    Value* total =
        fold_row(ox, is_max, ad, init, [&](Value* x, std::vector<Value*>&, unsigned n) { return convert(x, cd, ad, n); });
    if (K_.kind == KernelKind::Mean) total = B_.CreateFDiv(total, B_.CreateSIToFP(dim(product(K_.inner)), total->getType()));
    Value* r = convert(total, ad, cd, 1);
    store(K_.store, P_.buffers[size_t(K_.store.buffer)].dtype, ox, 1, eval(K_.epilogue, ox, 1, r));
  });
}

// Softmax / LogSoftmax / LayerNorm: row statistics in one or two passes,
// then a pass that writes each element through the epilogue. Float32 rows
// run in float32 lanes, their sums blocked (blocked_sum: float64 only per
// block); float64 rows fold in float64.
void KernelLowering::rowwise() {
  unroll_rows_ = true;
  const DType cd = K_.compute;
  const bool f32 = cd == DType::Float32;
  Type* ct = elem_type(cd);
  const DType out_dt = P_.buffers[size_t(K_.store.buffer)].dtype;
  std::vector<Value*> idx;
  nest(K_.outer, 0, idx, begin_, end_, false, [&](std::vector<Value*>& ox, unsigned) {
    // The row sum of f(input) as a float64 scalar.
    auto sum = [&](const RowFn& f) -> Value* {
      return f32 ? blocked_sum(ox, f) : fold_row(ox, false, cd, llvm::ConstantFP::get(ct, 0.0), f);
    };
    Value* count = B_.CreateSIToFP(dim(product(K_.inner)), B_.getDoubleTy());
    auto to_c = [&](Value* d) { return f32 ? B_.CreateFPTrunc(d, ct) : d; };
    std::function<Value*(std::vector<Value*>&, unsigned)> elem;
    if (K_.kind == KernelKind::LayerNorm) {
      // Two passes, as the eager kernel: the mean, then the biased variance
      // around it (no cancellation from E[x^2] - E[x]^2). In float32 the
      // mean is split in two floats, hi + lo, and x - mean is (x - hi) - lo:
      // x - hi is exact where x is within a factor 2 of the mean (Sterbenz),
      // so a row far from 0 (mean 1e4, std 1) keeps its deviations to an
      // ULP of their own size, not of 1e4's.
      // The mean's own sum is of x - x0 (x0: the row's first element): the
      // blocked sum's error is relative to the sum of |terms|, and for a row
      // far from 0 that must be the spread, not the offset.
      Value* mean;
      if (f32) {
        std::vector<Value*> first = ox;
        for (size_t d = 0; d < K_.inner.size(); ++d) first.push_back(i64(0));
        Value* x0 = eval(K_.input, first, 1, nullptr);
        Value* shifted = B_.CreateFDiv(
            sum([&, x0](Value* x, std::vector<Value*>&, unsigned n) { return B_.CreateFSub(x, splat(x0, n)); }), count);
        mean = B_.CreateFAdd(B_.CreateFPExt(x0, B_.getDoubleTy()), shifted);
      } else {
        mean = B_.CreateFDiv(sum([&](Value* x, std::vector<Value*>&, unsigned) { return x; }), count);
      }
      Value* mean_c = to_c(mean);
      Value* mean_lo = f32 ? to_c(B_.CreateFSub(mean, B_.CreateFPExt(mean_c, B_.getDoubleTy()))) : nullptr;
      auto centred = [&, mean_c, mean_lo](Value* x, unsigned n) {
        Value* d = B_.CreateFSub(x, splat(mean_c, n));
        return mean_lo ? B_.CreateFSub(d, splat(mean_lo, n)) : d;
      };
      Value* var = B_.CreateFDiv(sum([&](Value* x, std::vector<Value*>&, unsigned n) {
                                   Value* d = centred(x, n);
                                   return B_.CreateFMul(d, d);
                                 }),
                                 count);
      Value* rstd = B_.CreateFDiv(llvm::ConstantFP::get(B_.getDoubleTy(), 1.0),
                                  B_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt,
                                                          B_.CreateFAdd(var, llvm::ConstantFP::get(B_.getDoubleTy(), K_.eps))));
      Value* rstd_c = to_c(rstd);
      elem = [&, centred, rstd_c](std::vector<Value*>& ix, unsigned n) {
        Value* y = B_.CreateFMul(centred(eval(K_.input, ix, n, nullptr), n), splat(rstd_c, n));
        if (K_.weight >= 0) y = B_.CreateFMul(y, eval(K_.weight, ix, n, nullptr));
        if (K_.bias >= 0) y = B_.CreateFAdd(y, eval(K_.bias, ix, n, nullptr));
        return y;
      };
    } else {
      plain_max_ = true;
      Value* mx = fold_row(ox, true, cd, E_.c(llvm::UndefValue::get(ct), -std::numeric_limits<double>::infinity()),
                           [&](Value* x, std::vector<Value*>&, unsigned) { return x; });
      plain_max_ = false;
      // Softmax keeps exp(x - max) in its output (when the output holds the
      // compute dtype) and scales it in place: one exp per element, not two.
      const bool keep_exp = K_.kind == KernelKind::Softmax && out_dt == cd;
      // (An inline float32 exp, Cephes' polynomial, was tried here in place
      // of SLEEF's call: no faster on softmax / log_softmax, and 2x slower on
      // masked rows; benchmarks/RESULTS.md, issue 17.)
      auto exp = [&](Value* z) { return E_.exp(z); };
      Value* total = sum([&](Value* x, std::vector<Value*>& ix, unsigned n) {
        Value* e = exp(B_.CreateFSub(x, splat(mx, n)));
        if (keep_exp) store(K_.store, cd, ix, n, e);
        return e;
      });
      if (K_.kind == KernelKind::Softmax) {
        Value* inv = to_c(B_.CreateFDiv(llvm::ConstantFP::get(B_.getDoubleTy(), 1.0), total));
        elem = [&, mx, inv, keep_exp, exp](std::vector<Value*>& ix, unsigned n) {
          Value* e = keep_exp ? load(K_.store, cd, ix, n) : exp(B_.CreateFSub(eval(K_.input, ix, n, nullptr), splat(mx, n)));
          return B_.CreateFMul(e, splat(inv, n));
        };
      } else {
        // float64 rows: libm's log, to a float64 result's accuracy.
        Value* lt = f32 ? to_c(row_log(total)) : B_.CreateUnaryIntrinsic(llvm::Intrinsic::log, total);
        elem = [&, mx, lt](std::vector<Value*>& ix, unsigned n) {
          return B_.CreateFSub(B_.CreateFSub(eval(K_.input, ix, n, nullptr), splat(mx, n)), splat(lt, n));
        };
      }
    }
    std::vector<Value*> full = ox;
    nest(K_.inner, 0, full, nullptr, nullptr, true, [&](std::vector<Value*>& ix, unsigned n) {
      store(K_.store, out_dt, ix, n, eval(K_.epilogue, ix, n, elem(ix, n)));
    });
  });
}

void KernelLowering::run(const std::string& symbol) {
  Type* ptr = B_.getPtrTy();
  auto* fty = llvm::FunctionType::get(B_.getVoidTy(), {ptr, ptr, B_.getInt64Ty(), B_.getInt64Ty()}, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, M_);
  fn_->addFnAttr("target-cpu", cpu_.name);
  fn_->addFnAttr("target-features", cpu_.features);
  // 512-bit vectors are legal and preferred where the CPU has them (SLEEF's
  // 16-lane functions take zmm arguments).
  const std::string width = std::to_string(cpu_.f32_lanes * 32);
  fn_->addFnAttr("prefer-vector-width", width);
  fn_->addFnAttr("min-legal-vector-width", width);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->getArg(0)->addAttr(llvm::Attribute::NoAlias);
  entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx_, "start", fn_);
  B_.SetInsertPoint(entry_);
  base_.assign(K_.buffers.size(), nullptr);
  for (size_t l = 0; l < K_.buffers.size(); ++l) local_.emplace(K_.buffers[l], int(l));
  for (size_t s = 0; s < P_.syms.size(); ++s)
    sym_.push_back(B_.CreateLoad(B_.getInt64Ty(), B_.CreateGEP(B_.getInt64Ty(), fn_->getArg(1), i64(int64_t(s)))));
  begin_ = fn_->getArg(2);
  end_ = fn_->getArg(3);
  // Lanes: a full vector register of the kernel's widest element type.
  size_t widest = runtime::itemsize(K_.compute);
  for (const Expr& e : K_.exprs) widest = std::max(widest, runtime::itemsize(e.dtype));
  widest = std::max(widest, runtime::itemsize(P_.buffers[size_t(K_.store.buffer)].dtype));
  // Sum/Mean keep float64 accumulators (a vector of them sets the width);
  // the row kernels' float64 is per block or per row (blocked_sum).
  if (K_.kind == KernelKind::Sum || K_.kind == KernelKind::Mean) widest = 8;
  lanes_ = unsigned(cpu_.f32_lanes * 4 / std::max<size_t>(widest, 4));
  B_.SetInsertPoint(body);
  switch (K_.kind) {
    case KernelKind::Pointwise: pointwise(); break;
    case KernelKind::Sum:
    case KernelKind::Mean:
    case KernelKind::Amax: reduction(); break;
    case KernelKind::Softmax:
    case KernelKind::LogSoftmax:
    case KernelKind::LayerNorm: rowwise(); break;
  }
  B_.CreateRetVoid();
  B_.SetInsertPoint(entry_);
  B_.CreateBr(body);
}

}  // namespace

void lower_kernel(llvm::Module& module, const Program& program, const Kernel& kernel, const std::string& symbol,
                  const HostCpu& cpu) {
  try {
    KernelLowering(module, program, kernel, cpu).run(symbol);
  } catch (const Unlowerable& u) {
    throw Unsupported{kernel.name + ": " + u.reason};
  }
}

// When this file was compiled: part of every cache key, so a kernel
// cached by one build of the lowering is never loaded by another (the
// version number does not change with every edit; this does).
const char* lowering_build_stamp() { return __DATE__ " " __TIME__; }

}  // namespace kiln::codegen
