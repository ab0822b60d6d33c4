// Times one KBC function on the VM and prints ns per executed instruction.
//   bench_vm FILE.kbc ENTRY N [REPEATS]
// The instruction count comes from a counting run of the same call (the
// counting VM is a separate instantiation of the loop, so the timed runs
// carry no counting code). Prints one JSON object.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "interpreter/assembler.h"
#include "interpreter/vm.h"

using namespace kiln;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_vm FILE.kbc ENTRY N [REPEATS]\n");
    return 2;
  }
  try {
    auto program = interpreter::assemble_file(argv[1]);
    std::vector<runtime::Value> args{runtime::Value::integer(std::atoll(argv[3]))};
    int repeats = argc > 4 ? std::atoi(argv[4]) : 5;

    interpreter::VMOptions counting;
    counting.count_instructions = true;
    interpreter::VM counter(counting);
    counter.run(program, argv[2], args);
    uint64_t instructions = counter.instructions_executed();

    interpreter::VM vm;
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      vm.run(program, argv[2], args);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s < best) best = s;
    }
    std::printf("{\"entry\": \"%s\", \"instructions\": %llu, \"seconds\": %.6f, \"ns_per_instr\": %.3f}\n", argv[2],
                (unsigned long long)instructions, best, best * 1e9 / double(instructions));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_vm: %s\n", e.full().c_str());
    return 1;
  }
}
