// The collective codec (collectives/codec.h) on arbitrary bytes.
//
// Each input is tried twice: as a whole buffer (envelope and all: almost
// always refused by the checksum, which is the point of the envelope), and
// sealed with a valid envelope (its first two bytes the message kind, the
// rest the msgpack payload), which reaches the payload decoder.
//
// Invariant: decode() returns a message or raises kiln::Error(ValueError),
// nothing else; what it returns encodes to bytes that decode to the same
// message (encode∘decode is idempotent); a decoded kernel blob is verified
// or refused with ValueError, never trusted blindly.
#include <span>

#include "collectives/codec.h"
#include "collectives/kernel_blob.h"
#include "fuzz_common.h"

namespace {

using namespace kiln::collectives;

std::vector<uint8_t> reencode(const Message& m) {
  return std::visit([&](const auto& body) { return encode(m.header, body); }, m.body);
}

void check(std::span<const uint8_t> buf) {
  Message m;
  try {
    m = decode(buf);
  } catch (const kiln::Error& e) {
    if (e.kind() != kiln::ErrorKind::ValueError) kiln_fuzz::fail(std::string("decode raised ") + e.what());
    return;
  }
  const std::vector<uint8_t> once = reencode(m);
  Message again;
  try {
    again = decode(once);
  } catch (const kiln::Error& e) {
    kiln_fuzz::fail(std::string("a decoded message re-encodes to bytes decode refuses: ") + e.what());
  }
  if (again.kind != m.kind || !(again.header == m.header) || !(again.body == m.body) || reencode(again) != once)
    kiln_fuzz::fail("encode(decode(x)) does not decode to the same message");
  if (const auto* blob = std::get_if<KernelBlob>(&m.body)) {
    try {
      verify_kernel_blob(*blob, m.header.graph_hash);
    } catch (const kiln::Error& e) {
      if (e.kind() != kiln::ErrorKind::ValueError) kiln_fuzz::fail(std::string("verify_kernel_blob raised ") + e.what());
    }
  }
}

}  // namespace

// KILN_FUZZ_WRITE_SEEDS=DIR: write one well-formed message of each kind
// there, twice (whole, and as the kind + payload the sealed form takes),
// and exit: how tests/fuzz/seeds/fuzz_collective_codec was made.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("KILN_FUZZ_WRITE_SEEDS");
  if (!dir) return 0;
  CollectiveHeader h{"forward:12", 3, Hash128{0x0123456789abcdefull, 0xfedcba9876543210ull}};
  const uint8_t object[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  std::vector<std::pair<const char*, std::vector<uint8_t>>> seeds = {
      {"compiler_state", encode(h, CompilerLocalState{"forward:12", {{"L['x']", {4, -1, 3}}, {"L['y']", {}}}})},
      {"guard_outcome", encode(h, GuardOutcome{"forward:12", true, std::string("L['x'].size(0) == 4")})},
      {"kernel_blob", encode(h, make_kernel_blob(h.graph_hash, 0, 2, object))},
      {"kernel_plan", encode(h, KernelPlan{h.graph_hash, 7, false})},
  };
  for (const auto& [name, bytes] : seeds) {
    for (int sealed = 0; sealed < 2; ++sealed) {
      std::string path = std::string(dir) + "/" + name + (sealed ? "_payload" : "");
      FILE* f = std::fopen(path.c_str(), "wb");
      if (!f) kiln_fuzz::fail("cannot write " + path);
      // The sealed form: kind (2 bytes, little-endian) then the payload.
      if (sealed) std::fwrite(bytes.data() + 6, 1, 2, f), std::fwrite(bytes.data() + kEnvelopeSize, 1, bytes.size() - kEnvelopeSize, f);
      else std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
  }
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(std::span<const uint8_t>(data, size));
  if (size >= 2) {
    const uint16_t kind = uint16_t(data[0] | (data[1] << 8));
    check(seal(kind, std::span<const uint8_t>(data + 2, size - 2)));
  }
  return 0;
}
