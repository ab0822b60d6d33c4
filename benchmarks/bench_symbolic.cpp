// symbolic_trace on deep and wide module trees (issue 4's headline).
//   bench_symbolic chain D   a chain of D blocks; each holds a child block and
//                            a Linear, forward = relu(fc(child(x)))  (2D modules)
//   bench_symbolic flat N    Sequential of N (Linear, ReLU) pairs  (2N+1 modules)
// Prints one JSON line: modules, trace seconds (to a finished graph; the
// backend is not run), us per module, graph node count. Models are built
// before timing; the trace runs on a thread with a 1 GiB stack so that a
// deep chain can be inlined.
#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "interpreter/kiln_api.h"
#include "interpreter/symbolic_trace.h"
#include "interpreter/vm.h"
#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/tensor/ops.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
const char* kChain = R"(
.class ChainBlock
.func forward(self, x)
    LOAD_FAST self
    LOAD_ATTR child
    POP_JUMP_IF_NONE leaf
    LOAD_FAST self
    LOAD_ATTR child
    LOAD_FAST x
    CALL 1
    STORE_FAST x
leaf:
    LOAD_GLOBAL relu
    LOAD_FAST self
    LOAD_ATTR fc
    LOAD_FAST x
    CALL 1
    CALL 1
    RETURN_VALUE
.end
.endclass
)";

struct Job {
  std::string mode;
  int n;
  std::string out;
  std::string error;
};

void* run_job(void* p) {
  auto* job = static_cast<Job*>(p);
  try {
    interpreter::VM vm;
    Value linear_cls = *builtins().find("Linear");
    Value root;
    size_t modules = 0;
    Program prog = assemble(kChain, "chain.kbc");
    if (job->mode == "chain") {
      Value child = Value::none();
      Ref<ClassObj> cls(prog.global("ChainBlock").as<ClassObj>());
      for (int d = 0; d < job->n; ++d) {
        Value block = Value::object(Kind::Module, new_module(cls));
        module_setattr(block, intern("fc"), vm.call(linear_cls, {Value::integer(4), Value::integer(4)}));
        module_setattr(block, intern("child"), child);
        child = block;
        modules += 2;
      }
      root = child;
    } else {
      std::vector<Value> layers;
      for (int i = 0; i < job->n; ++i) {
        layers.push_back(vm.call(linear_cls, {Value::integer(4), Value::integer(4)}));
        layers.push_back(vm.call(*builtins().find("ReLU"), {}));
      }
      root = vm.call(*builtins().find("Sequential"), CallArgs{layers.data(), layers.size(), nullptr});
      modules = layers.size() + 1;
    }
    Value x = call_op(OpId::randn, {Value::integer(2), Value::integer(4)});
    double best = 1e30;
    size_t nodes = 0;
    for (int r = 0; r < 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      auto gm = interpreter::symbolic_trace(root, {x}, nullptr, /*make_runner=*/false);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      nodes = gm.graph->nodes().size();
    }
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"mode\": \"%s\", \"n\": %d, \"modules\": %zu, \"seconds\": %.6f, \"us_per_module\": %.3f, "
                  "\"nodes\": %zu}",
                  job->mode.c_str(), job->n, modules, best, best * 1e6 / double(modules), nodes);
    job->out = buf;
  } catch (const Error& e) {
    job->error = e.full();
  }
  return nullptr;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_symbolic chain|flat N\n");
    return 2;
  }
  Job job{argv[1], std::atoi(argv[2]), "", ""};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t(1) << 30);
  pthread_t t;
  if (pthread_create(&t, &attr, run_job, &job) != 0) {
    std::fprintf(stderr, "bench_symbolic: cannot start the tracing thread\n");
    return 1;
  }
  pthread_join(t, nullptr);
  if (!job.error.empty()) {
    std::fprintf(stderr, "bench_symbolic: %s\n", job.error.c_str());
    return 1;
  }
  std::printf("%s\n", job.out.c_str());
  return 0;
}
