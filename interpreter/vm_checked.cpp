// The VM's loop that checks stack effects (VM::Loop::Checked,
// interpreter/stack_effects.h): vm.cpp compiled a second time, with only
// the loop and its helpers, in a unit of its own so that it cannot change
// the shipped loop's machine code (the top of vm.cpp says why).
#define KILN_VM_CHECKED_LOOP
#include "interpreter/vm.cpp"
