#include "runtime/tensor/host_tensors.h"

namespace kiln::runtime {

static HostInPlaceHook in_place_hook = nullptr;
void set_host_tensors_in_place(HostInPlaceHook hook) { in_place_hook = hook; }
bool host_tensors_in_place() { return in_place_hook && in_place_hook(); }

}  // namespace kiln::runtime
