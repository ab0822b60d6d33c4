// The plain-data objects ranks exchange, and the header every collective
// message carries. Nothing here holds code or a type tag a sender picks:
// a receiver only ever builds these structs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collectives/hash128.h"

namespace kiln::collectives {

// On the wire; never renumber (bump kCodecVersion in codec.h instead).
enum class MessageKind : uint16_t {
  CompilerState = 1,
  GuardOutcome = 2,
  KernelBlob = 3,
  KernelPlan = 4,
};
const char* message_kind_name(MessageKind k);  // "compiler_state", ...
bool is_message_kind(uint16_t raw);

// What a rank says it is doing. If ranks disagree on any field, they are
// not in the same collective and every rank raises CollectiveMismatch.
struct CollectiveHeader {
  std::string frame_id;
  uint64_t compile_seq = 0;  // the how-many-th compile of this frame
  Hash128 graph_hash;        // zero before a graph exists
  bool operator==(const CollectiveHeader&) const = default;
};

// The compiler collective's local state: the sizes this rank saw per input
// source, so all ranks can make the same dimensions dynamic. A negative size
// is a dimension this rank already treats as dynamic (an earlier recompile
// found it changing, or mark_dynamic): like Dynamo's None, the others adopt it.
struct InputSizes {
  std::string source;
  std::vector<int64_t> sizes;
  bool operator==(const InputSizes&) const = default;
};
struct CompilerLocalState {
  static constexpr MessageKind kind = MessageKind::CompilerState;
  std::string frame_id;
  std::vector<InputSizes> inputs;
  bool operator==(const CompilerLocalState&) const = default;
};

// One rank's guard check at a cache lookup; if any rank missed, all recompile.
struct GuardOutcome {
  static constexpr MessageKind kind = MessageKind::GuardOutcome;
  std::string frame_id;
  bool missed = false;
  std::optional<std::string> reason;  // the failing guard, when missed
  bool operator==(const GuardOutcome&) const = default;
};

// Object code of kernels [kernel_begin, kernel_end) of one graph, compiled
// by one rank for all. Link it only after verify_kernel_blob().
struct KernelBlob {
  static constexpr MessageKind kind = MessageKind::KernelBlob;
  Hash128 graph_hash;
  uint32_t kernel_begin = 0;
  uint32_t kernel_end = 0;
  std::vector<uint8_t> object;
  Hash128 checksum;  // XXH3-128 of `object`
  bool operator==(const KernelBlob&) const = default;
};

// Shared compile work, step 1: the program whose kernels this rank is about
// to compile (graph_hash: its content key; kernels: how many; kernels == 0:
// this compile made no program) and whether it already has their object
// code (a cache hit). Only when every rank names the same program and some
// rank lacks it do the ranks split the kernels and exchange KernelBlobs.
struct KernelPlan {
  static constexpr MessageKind kind = MessageKind::KernelPlan;
  Hash128 graph_hash;
  uint32_t kernels = 0;
  bool have = false;
  bool operator==(const KernelPlan&) const = default;
};

}  // namespace kiln::collectives
