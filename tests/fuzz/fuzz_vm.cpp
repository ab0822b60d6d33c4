// The VM on verified programs, under a step and a memory budget.
//
// Invariant: a program that assembles runs to a result or a kiln::Error
// (never a crash, a sanitizer report, or another C++ exception), and runs
// the same way twice (same seed): a difference would be uninitialised
// memory or an order that depends on addresses.
#include "fuzz_common.h"
#include "kbc_mutator.h"


// Each run gets its own instance of the program: a run changes the
// program's state (globals, class attributes), which must not reach the next.
// The second run is checked for leaks (fuzz_common.h, check_leaks): once it
// and its program are gone, nothing it made may be alive but the program's
// own cycles.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln_fuzz::Outcome runs[2];
  uint64_t mark = 0;
  for (int k = 0; k < 2; ++k) {
    if (k == 1) mark = kiln::runtime::census::mark();
    std::optional<kiln::Program> p = kiln_fuzz::assemble_input(data, size);
    if (!p) return 0;
    std::optional<kiln_fuzz::Entry> e = kiln_fuzz::entry_of(*p);
    if (!e) return 0;
    std::string out;
    kiln::interpreter::VMOptions vo;
    vo.stdout_sink = [&out](std::string_view s) {
      if (out.size() < (1u << 20)) out += s;
    };
    kiln::interpreter::VM vm(vo);
    runs[k] = kiln_fuzz::run_entry(vm, *e, kiln_fuzz::kVmSteps, [&](const std::vector<kiln::Value>& args) {
      return vm.call(e->fn, kiln::runtime::CallArgs{args.data(), args.size(), nullptr});
    });
    runs[k].out = std::move(out);
    if (k == 0 && runs[k].exhausted) return 0;
  }
  if (runs[1].exhausted || kiln_fuzz::without_ids(kiln_fuzz::describe(runs[0])) != kiln_fuzz::without_ids(kiln_fuzz::describe(runs[1])))
    kiln_fuzz::fail("two runs of one program differ:\n" + kiln_fuzz::describe(runs[0]) + "\n" +
                    (runs[1].exhausted ? std::string("(budget exhausted)") : kiln_fuzz::describe(runs[1])));
  kiln_fuzz::check_leaks(mark, "the VM's run");
  return 0;
}
