#include "runtime/semantics/kind_slots.h"

#include "runtime/base/error.h"

namespace kiln::runtime {

namespace {
const TensorSlots* tensor_table = nullptr;
const ModuleSlots* module_table = nullptr;

[[noreturn]] void unlinked(const char* library) {
  throw_error(ErrorKind::SystemError, std::string("kiln: ") + library +
                                            " is not linked into this program (link kiln_runtime, which holds it)");
}
}  // namespace

const TensorSlots& tensor_slots() {
  if (!tensor_table) unlinked("runtime/tensor");
  return *tensor_table;
}

const ModuleSlots& module_slots() {
  if (!module_table) unlinked("runtime/nn");
  return *module_table;
}

void set_tensor_slots(const TensorSlots* slots) { tensor_table = slots; }
void set_module_slots(const ModuleSlots* slots) { module_table = slots; }

}  // namespace kiln::runtime
