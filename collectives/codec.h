// The wire format of collective messages. A message is a fixed envelope
// followed by a msgpack payload:
//
//   offset  size  field
//   0       4     magic "KLNC"
//   4       2     codec version (little-endian), kCodecVersion
//   6       2     message kind (little-endian), a MessageKind
//   8       8     payload length in bytes (little-endian)
//   16      16    XXH3-128 of bytes [0, 16) followed by the payload
//                 (low 64 bits then high 64 bits, little-endian)
//   32      n     payload: msgpack [header, body]
//
// The checksum covers every other byte, so a corrupted buffer is refused
// before msgpack sees it. The payload is decoded into the fixed structs of
// messages.h with msgpack's size and depth limits and a strict shape check;
// anything else is a ValueError naming what was wrong, never undefined
// behaviour.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "collectives/messages.h"

namespace kiln::collectives {

inline constexpr uint16_t kCodecVersion = 1;
inline constexpr size_t kEnvelopeSize = 32;

std::vector<uint8_t> encode(const CollectiveHeader& header, const CompilerLocalState& obj);
std::vector<uint8_t> encode(const CollectiveHeader& header, const GuardOutcome& obj);
std::vector<uint8_t> encode(const CollectiveHeader& header, const KernelBlob& obj);
std::vector<uint8_t> encode(const CollectiveHeader& header, const KernelPlan& obj);

struct Message {
  MessageKind kind;
  CollectiveHeader header;
  std::variant<CompilerLocalState, GuardOutcome, KernelBlob, KernelPlan> body;
};

// Any well-formed message.
Message decode(std::span<const uint8_t> buf);

[[noreturn]] void throw_wrong_kind(MessageKind expected, MessageKind got);

// A message of one kind; another kind is a ValueError.
template <class T>
T decode_as(std::span<const uint8_t> buf, CollectiveHeader* header = nullptr) {
  Message m = decode(buf);
  if (m.kind != T::kind) throw_wrong_kind(T::kind, m.kind);
  if (header) *header = std::move(m.header);
  return std::get<T>(std::move(m.body));
}

// Wraps a payload in an envelope with a valid checksum. encode() uses it;
// it takes raw kind and version so tests can build well-sealed buffers that
// are wrong in exactly one way.
std::vector<uint8_t> seal(uint16_t raw_kind, std::span<const uint8_t> payload,
                          uint16_t version = kCodecVersion);

}  // namespace kiln::collectives
