#include "collectives/codec.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>

#include <msgpack.hpp>
#include <xxhash.h>

#include "runtime/base/error.h"

namespace kiln::collectives {

namespace {

constexpr char kMagic[4] = {'K', 'L', 'N', 'C'};
// Bounds on strings (frame ids, source names) well above any real one: a
// length field cannot make the decoder allocate more than this per string.
constexpr size_t kMaxStr = size_t{1} << 20;
// Our deepest message nests five arrays (payload, body, inputs, one input,
// its sizes); msgpack counts its own root slot.
constexpr size_t kMaxDepth = 6;

[[noreturn]] void malformed(const std::string& why) {
  throw_error(ErrorKind::ValueError, "collectives codec: malformed message: " + why);
}

void put_le(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Hash128 envelope_checksum(const uint8_t* first16, std::span<const uint8_t> payload) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, first16, 16);
  XXH3_128bits_update(st, payload.data(), payload.size());
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return {h.low64, h.high64};
}

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_hash(Packer& pk, const Hash128& h) {
  char b[16];
  put_le(reinterpret_cast<uint8_t*>(b), h.lo, 8);
  put_le(reinterpret_cast<uint8_t*>(b) + 8, h.hi, 8);
  pk.pack_bin(16);
  pk.pack_bin_body(b, 16);
}
void pack_str(Packer& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
void pack_header(Packer& pk, const CollectiveHeader& h) {
  pk.pack_array(3);
  pack_str(pk, h.frame_id);
  pk.pack_uint64(h.compile_seq);
  pack_hash(pk, h.graph_hash);
}

void pack_body(Packer& pk, const CompilerLocalState& s) {
  pk.pack_array(2);
  pack_str(pk, s.frame_id);
  pk.pack_array(static_cast<uint32_t>(s.inputs.size()));
  for (const InputSizes& in : s.inputs) {
    pk.pack_array(2);
    pack_str(pk, in.source);
    pk.pack_array(static_cast<uint32_t>(in.sizes.size()));
    for (int64_t d : in.sizes) pk.pack_int64(d);
  }
}
void pack_body(Packer& pk, const GuardOutcome& g) {
  pk.pack_array(3);
  pack_str(pk, g.frame_id);
  if (g.missed) pk.pack_true();
  else pk.pack_false();
  if (g.reason) pack_str(pk, *g.reason);
  else pk.pack_nil();
}
void pack_body(Packer& pk, const KernelBlob& b) {
  pk.pack_array(5);
  pack_hash(pk, b.graph_hash);
  pk.pack_uint32(b.kernel_begin);
  pk.pack_uint32(b.kernel_end);
  pk.pack_bin(static_cast<uint32_t>(b.object.size()));
  pk.pack_bin_body(reinterpret_cast<const char*>(b.object.data()),
                   static_cast<uint32_t>(b.object.size()));
  pack_hash(pk, b.checksum);
}

void pack_body(Packer& pk, const KernelPlan& p) {
  pk.pack_array(3);
  pack_hash(pk, p.graph_hash);
  pk.pack_uint32(p.kernels);
  if (p.have) pk.pack_true();
  else pk.pack_false();
}

template <class T>
std::vector<uint8_t> encode_message(const CollectiveHeader& header, const T& obj) {
  // msgpack lengths are 32-bit; longer would silently wrap.
  auto too_long = [](size_t n, const char* what) {
    if (n > UINT32_MAX)
      throw_error(ErrorKind::ValueError,
                  std::string("collectives codec: ") + what + " is too long to send (" +
                      std::to_string(n) + ")");
  };
  too_long(header.frame_id.size(), "frame id");
  if constexpr (std::is_same_v<T, KernelBlob>) too_long(obj.object.size(), "kernel object");
  if constexpr (std::is_same_v<T, CompilerLocalState>) too_long(obj.inputs.size(), "input list");
  msgpack::sbuffer sb;
  Packer pk(sb);
  pk.pack_array(2);
  pack_header(pk, header);
  pack_body(pk, obj);
  return seal(static_cast<uint16_t>(T::kind),
              {reinterpret_cast<const uint8_t*>(sb.data()), sb.size()});
}

// Strict readers: each names the field it expected, so a bad buffer says
// what was wrong with it.
const char* type_name(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER: return "unsigned int";
    case msgpack::type::NEGATIVE_INTEGER: return "negative int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "str";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown type";
}

[[noreturn]] void wrong(const msgpack::object& o, const char* field, const char* expected) {
  malformed(std::string(field) + " should be " + expected + ", got " + type_name(o));
}

const msgpack::object* array(const msgpack::object& o, uint32_t n, const char* field) {
  if (o.type != msgpack::type::ARRAY) wrong(o, field, "an array");
  if (o.via.array.size != n)
    malformed(std::string(field) + " should have " + std::to_string(n) + " elements, got " +
              std::to_string(o.via.array.size));
  return o.via.array.ptr;
}
std::span<const msgpack::object> list(const msgpack::object& o, const char* field) {
  if (o.type != msgpack::type::ARRAY) wrong(o, field, "an array");
  return {o.via.array.ptr, o.via.array.size};
}
std::string str(const msgpack::object& o, const char* field) {
  if (o.type != msgpack::type::STR) wrong(o, field, "a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}
uint64_t u64(const msgpack::object& o, const char* field, uint64_t max = UINT64_MAX) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) wrong(o, field, "an unsigned integer");
  if (o.via.u64 > max)
    malformed(std::string(field) + " is " + std::to_string(o.via.u64) + ", above its maximum " +
              std::to_string(max));
  return o.via.u64;
}
int64_t i64(const msgpack::object& o, const char* field) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  return static_cast<int64_t>(u64(o, field, INT64_MAX));
}
bool boolean(const msgpack::object& o, const char* field) {
  if (o.type != msgpack::type::BOOLEAN) wrong(o, field, "a bool");
  return o.via.boolean;
}
Hash128 hash(const msgpack::object& o, const char* field) {
  if (o.type != msgpack::type::BIN || o.via.bin.size != 16) wrong(o, field, "a 16-byte bin");
  auto* p = reinterpret_cast<const uint8_t*>(o.via.bin.ptr);
  return {get_le(p, 8), get_le(p + 8, 8)};
}

CollectiveHeader read_header(const msgpack::object& o) {
  const msgpack::object* a = array(o, 3, "header");
  CollectiveHeader h;
  h.frame_id = str(a[0], "header.frame_id");
  h.compile_seq = u64(a[1], "header.compile_seq");
  h.graph_hash = hash(a[2], "header.graph_hash");
  return h;
}

CompilerLocalState read_compiler_state(const msgpack::object& o) {
  const msgpack::object* a = array(o, 2, "compiler_state");
  CompilerLocalState s;
  s.frame_id = str(a[0], "compiler_state.frame_id");
  for (const msgpack::object& e : list(a[1], "compiler_state.inputs")) {
    const msgpack::object* pair = array(e, 2, "compiler_state input");
    InputSizes in;
    in.source = str(pair[0], "compiler_state input source");
    for (const msgpack::object& d : list(pair[1], "compiler_state input sizes"))
      in.sizes.push_back(i64(d, "compiler_state input size"));
    s.inputs.push_back(std::move(in));
  }
  return s;
}

GuardOutcome read_guard_outcome(const msgpack::object& o) {
  const msgpack::object* a = array(o, 3, "guard_outcome");
  GuardOutcome g;
  g.frame_id = str(a[0], "guard_outcome.frame_id");
  g.missed = boolean(a[1], "guard_outcome.missed");
  if (a[2].type != msgpack::type::NIL) g.reason = str(a[2], "guard_outcome.reason");
  return g;
}

KernelBlob read_kernel_blob(const msgpack::object& o) {
  const msgpack::object* a = array(o, 5, "kernel_blob");
  KernelBlob b;
  b.graph_hash = hash(a[0], "kernel_blob.graph_hash");
  b.kernel_begin = static_cast<uint32_t>(u64(a[1], "kernel_blob.kernel_begin", UINT32_MAX));
  b.kernel_end = static_cast<uint32_t>(u64(a[2], "kernel_blob.kernel_end", UINT32_MAX));
  if (a[3].type != msgpack::type::BIN) wrong(a[3], "kernel_blob.object", "a bin");
  auto* p = reinterpret_cast<const uint8_t*>(a[3].via.bin.ptr);
  b.object.assign(p, p + a[3].via.bin.size);
  b.checksum = hash(a[4], "kernel_blob.checksum");
  return b;
}

KernelPlan read_kernel_plan(const msgpack::object& o) {
  const msgpack::object* a = array(o, 3, "kernel_plan");
  KernelPlan p;
  p.graph_hash = hash(a[0], "kernel_plan.graph_hash");
  p.kernels = static_cast<uint32_t>(u64(a[1], "kernel_plan.kernels", UINT32_MAX));
  p.have = boolean(a[2], "kernel_plan.have");
  return p;
}

}  // namespace

std::vector<uint8_t> seal(uint16_t raw_kind, std::span<const uint8_t> payload, uint16_t version) {
  std::vector<uint8_t> out(kEnvelopeSize + payload.size());
  std::memcpy(out.data(), kMagic, 4);
  put_le(out.data() + 4, version, 2);
  put_le(out.data() + 6, raw_kind, 2);
  put_le(out.data() + 8, payload.size(), 8);
  if (!payload.empty()) std::memcpy(out.data() + kEnvelopeSize, payload.data(), payload.size());
  Hash128 c = envelope_checksum(out.data(), payload);
  put_le(out.data() + 16, c.lo, 8);
  put_le(out.data() + 24, c.hi, 8);
  return out;
}

std::vector<uint8_t> encode(const CollectiveHeader& h, const CompilerLocalState& o) { return encode_message(h, o); }
std::vector<uint8_t> encode(const CollectiveHeader& h, const GuardOutcome& o) { return encode_message(h, o); }
std::vector<uint8_t> encode(const CollectiveHeader& h, const KernelBlob& o) { return encode_message(h, o); }
std::vector<uint8_t> encode(const CollectiveHeader& h, const KernelPlan& o) { return encode_message(h, o); }

void throw_wrong_kind(MessageKind expected, MessageKind got) {
  throw_error(ErrorKind::ValueError, std::string("collectives codec: expected a ") +
                                         message_kind_name(expected) + " message, got a " +
                                         message_kind_name(got) + " message");
}

Message decode(std::span<const uint8_t> buf) {
  // The envelope, field by field, before any byte of the payload is parsed.
  if (buf.size() < kEnvelopeSize)
    malformed("truncated: " + std::to_string(buf.size()) + " bytes, shorter than the " +
              std::to_string(kEnvelopeSize) + "-byte envelope");
  const uint8_t* p = buf.data();
  if (std::memcmp(p, kMagic, 4) != 0) malformed("bad magic (not a kiln collective message)");
  uint64_t version = get_le(p + 4, 2);
  if (version != kCodecVersion)
    throw_error(ErrorKind::ValueError, "collectives codec: message has codec version " +
                                           std::to_string(version) + ", this build reads version " +
                                           std::to_string(kCodecVersion) +
                                           " (are all ranks running the same kiln?)");
  uint64_t length = get_le(p + 8, 8);
  if (length != buf.size() - kEnvelopeSize)
    malformed("the envelope announces a " + std::to_string(length) + "-byte payload but " +
              std::to_string(buf.size() - kEnvelopeSize) + " bytes follow (truncated or padded)");
  std::span<const uint8_t> payload = buf.subspan(kEnvelopeSize);
  Hash128 expected{get_le(p + 16, 8), get_le(p + 24, 8)};
  if (envelope_checksum(p, payload) != expected) malformed("checksum mismatch (corrupted in transit)");
  uint16_t raw_kind = static_cast<uint16_t>(get_le(p + 6, 2));
  if (!is_message_kind(raw_kind)) malformed("unknown message kind " + std::to_string(raw_kind));
  MessageKind kind = static_cast<MessageKind>(raw_kind);

  try {
    // Every element takes at least one byte, so no array can announce more
    // elements than the payload has bytes: a length field cannot make msgpack
    // allocate more than a small multiple of the message.
    msgpack::unpack_limit limit(/*array=*/payload.size(), /*map=*/0,
                                /*str=*/std::min(payload.size(), kMaxStr),
                                /*bin=*/payload.size(), /*ext=*/0, /*depth=*/kMaxDepth);
    size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(reinterpret_cast<const char*>(payload.data()),
                                                payload.size(), off, nullptr, nullptr, limit);
    if (off != payload.size())
      malformed(std::to_string(payload.size() - off) + " bytes after the payload");
    const msgpack::object* top = array(oh.get(), 2, "payload");
    Message m{kind, read_header(top[0]), {}};
    switch (kind) {
      case MessageKind::CompilerState: m.body = read_compiler_state(top[1]); break;
      case MessageKind::GuardOutcome: m.body = read_guard_outcome(top[1]); break;
      case MessageKind::KernelBlob: m.body = read_kernel_blob(top[1]); break;
      case MessageKind::KernelPlan: m.body = read_kernel_plan(top[1]); break;
    }
    return m;
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    malformed("a length field asks for more memory than is available");
  } catch (const std::exception& e) {
    // msgpack's unpack_error family: parse errors, insufficient bytes,
    // size and depth limits.
    malformed(std::string("msgpack: ") + e.what());
  }
}

}  // namespace kiln::collectives
