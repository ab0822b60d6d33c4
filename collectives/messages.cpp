#include "collectives/messages.h"

namespace kiln::collectives {

const char* message_kind_name(MessageKind k) {
  switch (k) {
    case MessageKind::CompilerState: return "compiler_state";
    case MessageKind::GuardOutcome: return "guard_outcome";
    case MessageKind::KernelBlob: return "kernel_blob";
    case MessageKind::KernelPlan: return "kernel_plan";
  }
  return "unknown";
}

bool is_message_kind(uint16_t raw) { return raw >= 1 && raw <= 4; }

}  // namespace kiln::collectives
