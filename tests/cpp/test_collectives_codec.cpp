// The collectives' codec and the single-rank group: round trips of each
// message kind, and fuzzing (random bytes, truncations, bit flips, wrong
// versions and kinds, valid-checksum garbage) that must give a clean kiln
// error or a correct decode, never a crash.
#include <catch2/catch.hpp>

#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>

#include <msgpack.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "collectives/all_gather_object.h"
#include "collectives/codec.h"
#include "collectives/config.h"
#include "collectives/distributed.h"
#include "collectives/kernel_blob.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"

using namespace kiln;
using namespace kiln::collectives;

namespace {

CollectiveHeader header(std::string frame = "f", uint64_t seq = 3) {
  return {std::move(frame), seq, Hash128{0x0123456789abcdefull, 0xfedcba9876543210ull}};
}

CompilerLocalState compiler_state() {
  CompilerLocalState s;
  s.frame_id = "model.forward:12";
  s.inputs.push_back({"L['x']", {4, 16, -1, INT64_MAX, INT64_MIN, 0}});
  s.inputs.push_back({"L['self'].fc1.weight", {}});
  s.inputs.push_back({"", {1}});
  return s;
}

GuardOutcome guard_outcome(bool missed) {
  GuardOutcome g;
  g.frame_id = "f";
  g.missed = missed;
  if (missed) g.reason = "TensorMatch(L['x']): size 1 is 8, expected 4";
  return g;
}

KernelBlob kernel_blob(size_t n) {
  std::vector<uint8_t> obj(n);
  for (size_t i = 0; i < n; ++i) obj[i] = static_cast<uint8_t>(i * 31 + 7);
  return make_kernel_blob(Hash128{1, 2}, 3, 9, obj);
}

std::vector<std::vector<uint8_t>> valid_messages() {
  return {
      encode(header(), compiler_state()),
      encode(header("", 0), CompilerLocalState{}),
      encode(header(), guard_outcome(true)),
      encode(header(), guard_outcome(false)),
      encode(header(), kernel_blob(0)),
      encode(header(), kernel_blob(300)),
      encode(header(), KernelPlan{Hash128{7, 9}, 40, true}),
      encode(header(), KernelPlan{}),
  };
}

// The property every fuzzed buffer must have: decoding either succeeds with
// a message that re-encodes to a decodable equal message, or throws a
// kiln::Error naming the codec. Anything else (another exception, a crash,
// a sanitizer report) fails the test.
enum class Outcome { Decoded, Rejected };
Outcome check_decode(std::span<const uint8_t> buf) {
  try {
    Message m = decode(buf);
    std::vector<uint8_t> again = std::visit(
        [&](const auto& body) { return encode(m.header, body); }, m.body);
    Message m2 = decode(again);
    CHECK(m2.header == m.header);
    CHECK(m2.body == m.body);
    return Outcome::Decoded;
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == ErrorKind::ValueError);
    CHECK(e.message().find("collectives codec") != std::string::npos);
    return Outcome::Rejected;
  }
}

std::vector<uint8_t> payload_of(const std::vector<uint8_t>& msg) {
  return {msg.begin() + kEnvelopeSize, msg.end()};
}

std::string rejection(std::span<const uint8_t> buf) {
  try {
    decode(buf);
  } catch (const kiln::Error& e) {
    return e.message();
  }
  return "";
}

std::vector<uint8_t> packed(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& f) {
  msgpack::sbuffer sb;
  msgpack::packer<msgpack::sbuffer> pk(sb);
  f(pk);
  return {reinterpret_cast<const uint8_t*>(sb.data()),
          reinterpret_cast<const uint8_t*>(sb.data()) + sb.size()};
}

}  // namespace

TEST_CASE("each message kind round-trips through the codec", "[collectives]") {
  CollectiveHeader h;
  CHECK(decode_as<CompilerLocalState>(encode(header(), compiler_state()), &h) == compiler_state());
  CHECK(h == header());
  CHECK(decode_as<CompilerLocalState>(encode(header(), CompilerLocalState{})) == CompilerLocalState{});
  CHECK(decode_as<GuardOutcome>(encode(header("g", 0), guard_outcome(true)), &h) == guard_outcome(true));
  CHECK(h == header("g", 0));
  CHECK(decode_as<GuardOutcome>(encode(header(), guard_outcome(false))) == guard_outcome(false));
  CHECK_FALSE(decode_as<GuardOutcome>(encode(header(), guard_outcome(false))).reason.has_value());
  GuardOutcome empty_reason = guard_outcome(true);
  empty_reason.reason = "";
  CHECK(decode_as<GuardOutcome>(encode(header(), empty_reason)) == empty_reason);
  KernelBlob big = kernel_blob(1 << 20);
  CHECK(decode_as<KernelBlob>(encode(header(), big)) == big);
  CHECK(decode_as<KernelBlob>(encode(header(), kernel_blob(0))) == kernel_blob(0));
  KernelPlan plan{Hash128{1, 2}, UINT32_MAX, true};
  CHECK(decode_as<KernelPlan>(encode(header(), plan)) == plan);
  CHECK(decode_as<KernelPlan>(encode(header(), KernelPlan{})) == KernelPlan{});
  CollectiveHeader max_seq{"f", UINT64_MAX, Hash128{~0ull, ~0ull}};
  decode_as<GuardOutcome>(encode(max_seq, guard_outcome(false)), &h);
  CHECK(h == max_seq);
}

TEST_CASE("the envelope has the documented layout", "[collectives]") {
  auto msg = encode(header(), guard_outcome(false));
  REQUIRE(msg.size() > kEnvelopeSize);
  CHECK(std::string(msg.begin(), msg.begin() + 4) == "KLNC");
  CHECK(msg[4] == kCodecVersion);
  CHECK(msg[5] == 0);
  CHECK(msg[6] == static_cast<uint8_t>(MessageKind::GuardOutcome));
  CHECK(msg[8] == msg.size() - kEnvelopeSize);
}

TEST_CASE("decoding one kind as another is a clear error", "[collectives]") {
  auto msg = encode(header(), guard_outcome(false));
  try {
    decode_as<CompilerLocalState>(msg);
    FAIL("decoded a guard_outcome as a compiler_state");
  } catch (const kiln::Error& e) {
    CHECK(e.message().find("expected a compiler_state message, got a guard_outcome") != std::string::npos);
  }
}

TEST_CASE("wrong versions and kinds are named", "[collectives]") {
  for (auto& msg : valid_messages()) {
    auto payload = payload_of(msg);
    uint16_t kind = msg[6];
    for (uint16_t v : {0, 2, 3, 255, 256, 65535}) {
      std::string why = rejection(seal(kind, payload, v));
      CHECK(why.find("codec version " + std::to_string(v)) != std::string::npos);
    }
    for (uint16_t k : {0, 5, 6, 256, 65535}) {
      std::string why = rejection(seal(k, payload));
      CHECK(why.find("unknown message kind " + std::to_string(k)) != std::string::npos);
    }
    // A known kind whose payload is another kind's: a shape error, not a crash.
    for (uint16_t k = 1; k <= 4; ++k) {
      if (k == kind) continue;
      CHECK(check_decode(seal(k, payload)) == Outcome::Rejected);
    }
  }
}

TEST_CASE("every truncation and every single bit flip is rejected", "[collectives]") {
  size_t cases = 0;
  for (auto& msg : valid_messages()) {
    for (size_t n = 0; n < msg.size(); ++n, ++cases)
      CHECK(check_decode(std::span(msg).first(n)) == Outcome::Rejected);
    // Padding is refused too: the length field must match.
    auto padded = msg;
    padded.push_back(0);
    CHECK(check_decode(padded) == Outcome::Rejected);
    // The checksum covers every byte, so no flip can go unnoticed.
    for (size_t bit = 0; bit < msg.size() * 8; ++bit, ++cases) {
      auto bad = msg;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      CHECK(check_decode(bad) == Outcome::Rejected);
    }
  }
  CHECK(cases > 5000);
}

TEST_CASE("multi-bit flips and random bytes are rejected", "[collectives]") {
  std::mt19937_64 rng(12345);
  auto msgs = valid_messages();
  for (int i = 0; i < 4000; ++i) {
    auto bad = msgs[static_cast<size_t>(i) % msgs.size()];
    int flips = 2 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    if (bad == msgs[static_cast<size_t>(i) % msgs.size()]) continue;  // the flips cancelled out
    CHECK(check_decode(bad) == Outcome::Rejected);
  }
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(rng() % 200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    if (i % 2 && junk.size() >= 4) std::memcpy(junk.data(), "KLNC", 4);  // past the magic check
    CHECK(check_decode(junk) == Outcome::Rejected);
  }
}

// With the checksum recomputed, mutated payloads reach msgpack and the shape
// checks: here a decode may legitimately succeed (the result is then a
// valid message), but must never misbehave.
TEST_CASE("mutated payloads under a valid checksum decode or are rejected", "[collectives]") {
  std::mt19937_64 rng(777);
  size_t decoded = 0, rejected = 0;
  for (auto& msg : valid_messages()) {
    auto payload = payload_of(msg);
    uint16_t kind = msg[6];
    for (size_t n = 0; n < payload.size(); ++n)
      (check_decode(seal(kind, std::span(payload).first(n))) == Outcome::Decoded ? decoded : rejected)++;
    for (size_t bit = 0; bit < payload.size() * 8; ++bit) {
      auto bad = payload;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      (check_decode(seal(kind, bad)) == Outcome::Decoded ? decoded : rejected)++;
    }
    for (int i = 0; i < 500; ++i) {
      auto bad = payload;
      for (int f = 0; f < 3; ++f) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
      (check_decode(seal(kind, bad)) == Outcome::Decoded ? decoded : rejected)++;
    }
  }
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> junk(rng() % 64);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    (check_decode(seal(static_cast<uint16_t>(1 + rng() % 3), junk)) == Outcome::Decoded ? decoded : rejected)++;
  }
  CHECK(rejected > 1000);
  CHECK(decoded > 0);  // a flipped value bit (e.g. in a size) is still a valid message
}

TEST_CASE("hostile msgpack payloads are refused by limits and shape checks", "[collectives]") {
  auto seal_kind = [](MessageKind k, const std::vector<uint8_t>& p) {
    return seal(static_cast<uint16_t>(k), p);
  };
  auto hdr = [](msgpack::packer<msgpack::sbuffer>& pk) {
    pk.pack_array(3);
    pk.pack(std::string("f"));
    pk.pack_uint64(1);
    pk.pack_bin(16);
    pk.pack_bin_body("0123456789abcdef", 16);
  };
  struct Case { const char* name; std::vector<uint8_t> payload; MessageKind kind; const char* expect; };
  std::vector<Case> cases = {
      {"empty payload", {}, MessageKind::GuardOutcome, "msgpack"},
      {"a map", packed([](auto& pk) { pk.pack_map(1); pk.pack(1); pk.pack(2); }), MessageKind::GuardOutcome, "msgpack"},
      {"an int", packed([](auto& pk) { pk.pack(7); }), MessageKind::GuardOutcome, "payload should be an array"},
      {"three elements", packed([&](auto& pk) { pk.pack_array(3); hdr(pk); pk.pack_nil(); pk.pack_nil(); }), MessageKind::GuardOutcome, "payload should have 2 elements"},
      {"huge array count", {0x92, 0xdd, 0xff, 0xff, 0xff, 0xff}, MessageKind::CompilerState, "msgpack"},
      {"huge bin length", {0x92, 0xc6, 0xff, 0xff, 0xff, 0xf0}, MessageKind::KernelBlob, "msgpack"},
      {"huge str length", {0x92, 0xdb, 0x7f, 0xff, 0xff, 0xff}, MessageKind::KernelBlob, "msgpack"},
      {"an ext", packed([](auto& pk) { pk.pack_ext(1, 1); pk.pack_ext_body("x", 1); }), MessageKind::GuardOutcome, "msgpack"},
      {"trailing bytes", [&] { auto p = packed([&](auto& pk) { pk.pack_array(2); hdr(pk); pk.pack_array(3); pk.pack(std::string("f")); pk.pack(true); pk.pack_nil(); }); p.push_back(0xc0); return p; }(), MessageKind::GuardOutcome, "bytes after the payload"},
      {"deep nesting", std::vector<uint8_t>(5000, 0x91), MessageKind::CompilerState, "msgpack"},
      {"short hash", packed([](auto& pk) { pk.pack_array(2); pk.pack_array(3); pk.pack(std::string("f")); pk.pack(1); pk.pack_bin(15); pk.pack_bin_body("0123456789abcde", 15); pk.pack_nil(); }), MessageKind::GuardOutcome, "header.graph_hash should be a 16-byte bin"},
      {"negative seq", packed([](auto& pk) { pk.pack_array(2); pk.pack_array(3); pk.pack(std::string("f")); pk.pack(-1); pk.pack_nil(); pk.pack_nil(); }), MessageKind::GuardOutcome, "header.compile_seq should be an unsigned integer"},
      {"int as missed", packed([&](auto& pk) { pk.pack_array(2); hdr(pk); pk.pack_array(3); pk.pack(std::string("f")); pk.pack(1); pk.pack_nil(); }), MessageKind::GuardOutcome, "guard_outcome.missed should be a bool"},
      {"size above int64", packed([&](auto& pk) { pk.pack_array(2); hdr(pk); pk.pack_array(2); pk.pack(std::string("f")); pk.pack_array(1); pk.pack_array(2); pk.pack(std::string("x")); pk.pack_array(1); pk.pack_uint64(UINT64_MAX); }), MessageKind::CompilerState, "above its maximum"},
      {"kernel index above uint32", packed([&](auto& pk) { pk.pack_array(2); hdr(pk); pk.pack_array(5); pk.pack_bin(16); pk.pack_bin_body("0123456789abcdef", 16); pk.pack_uint64(1ull << 32); pk.pack(0); pk.pack_bin(0); pk.pack_bin(16); pk.pack_bin_body("0123456789abcdef", 16); }), MessageKind::KernelBlob, "kernel_blob.kernel_begin"},
      {"float size", packed([&](auto& pk) { pk.pack_array(2); hdr(pk); pk.pack_array(2); pk.pack(std::string("f")); pk.pack_array(1); pk.pack_array(2); pk.pack(std::string("x")); pk.pack_array(1); pk.pack(1.5); }), MessageKind::CompilerState, "should be an unsigned integer, got float"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::string why = rejection(seal_kind(c.kind, c.payload));
    CHECK(why.find("collectives codec") != std::string::npos);
    CHECK(why.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("kernel blobs are accepted only for the expected graph and bytes", "[collectives]") {
  KernelBlob b = kernel_blob(64);
  verify_kernel_blob(b, Hash128{1, 2});
  try {
    verify_kernel_blob(b, Hash128{1, 3});
    FAIL("accepted a blob for another graph");
  } catch (const kiln::Error& e) {
    CHECK(e.message().find("this rank expects graph") != std::string::npos);
  }
  for (size_t i = 0; i < b.object.size() * 8; ++i) {
    KernelBlob bad = b;
    bad.object[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
    CHECK_THROWS_WITH(verify_kernel_blob(bad, Hash128{1, 2}), Catch::Contains("is corrupt"));
  }
  KernelBlob backwards = make_kernel_blob(Hash128{1, 2}, 5, 4, b.object);
  CHECK_THROWS_WITH(verify_kernel_blob(backwards, Hash128{1, 2}), Catch::Contains("range"));
  // Through the codec: a blob that decodes may still be refused.
  KernelBlob tampered = b;
  tampered.object[0] ^= 1;
  KernelBlob got = decode_as<KernelBlob>(encode(header(), tampered));
  CHECK_THROWS_WITH(verify_kernel_blob(got, Hash128{1, 2}), Catch::Contains("is corrupt"));
}

TEST_CASE("the single-rank group gathers without MPI", "[collectives]") {
  auto g = make_single_rank_group();
  CHECK(g->rank() == 0);
  CHECK(g->size() == 1);
  std::vector<CompilerLocalState> states;
  all_gather_object(states, compiler_state(), *g, header());
  REQUIRE(states.size() == 1);
  CHECK(states[0] == compiler_state());
  std::vector<GuardOutcome> outcomes{guard_outcome(false), guard_outcome(false)};
  all_gather_object(outcomes, guard_outcome(true), *g, header());
  CHECK(outcomes == std::vector<GuardOutcome>{guard_outcome(true)});
  std::vector<KernelBlob> blobs;
  all_gather_object(blobs, kernel_blob(10), *g, header());
  CHECK(blobs == std::vector<KernelBlob>{kernel_blob(10)});
  std::array<uint8_t, 3> raw{1, 2, 3};
  GatheredBytes gb = g->all_gather_bytes(raw, "test", Clock::now());
  REQUIRE(gb.size() == 1);
  CHECK(std::vector<uint8_t>(gb.of(0).begin(), gb.of(0).end()) == std::vector<uint8_t>{1, 2, 3});
}

TEST_CASE("outside mpirun init() is the single-rank world", "[collectives]") {
  if (launched_by_mpi()) {
    WARN("running under an MPI launcher: the single-rank world is not testable here");
    return;
  }
  auto w = init();
  CHECK(w->size() == 1);
  CHECK(w == default_group());
  CHECK(w == init());
  CHECK(mpi_thread_level() == -1);
  CHECK_FALSE(kiln_initialised_mpi());
  CHECK(new_group({0})->size() == 1);
  CHECK_THROWS_WITH(new_group({0, 1}), Catch::Contains("single-rank world"));
}

TEST_CASE("collective timeout comes from KILN_COLLECTIVE_TIMEOUT_S", "[collectives]") {
  const char* old = std::getenv("KILN_COLLECTIVE_TIMEOUT_S");
  std::string saved = old ? old : "";
  unsetenv("KILN_COLLECTIVE_TIMEOUT_S");
  CHECK(Config::from_env().collective_timeout_s == 60.0);
  setenv("KILN_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  CHECK(Config::from_env().collective_timeout_s == 2.5);
  for (const char* bad : {"abc", "0", "-1", "2s", "inf", "nan"}) {
    setenv("KILN_COLLECTIVE_TIMEOUT_S", bad, 1);
    CHECK_THROWS_WITH(Config::from_env(), Catch::Contains("KILN_COLLECTIVE_TIMEOUT_S"));
  }
  if (old) setenv("KILN_COLLECTIVE_TIMEOUT_S", saved.c_str(), 1);
  else unsetenv("KILN_COLLECTIVE_TIMEOUT_S");
}

TEST_CASE("KILN_LOGS=collectives logs each collective", "[collectives]") {
  const char* old = std::getenv("KILN_LOGS");
  std::string saved = old ? old : "";
  setenv("KILN_LOGS", "collectives", 1);
  log::reload();
  REQUIRE(log::get("collectives") != nullptr);
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto& sinks = log::get("collectives")->sinks();
  sinks.push_back(sink);
  auto g = make_single_rank_group();
  std::vector<GuardOutcome> outs;
  all_gather_object(outs, guard_outcome(false), *g, header("logged", 9));
  sinks.pop_back();
  CHECK(out.str().find("all_gather_object(guard_outcome) frame 'logged' #9") != std::string::npos);
  if (old) setenv("KILN_LOGS", saved.c_str(), 1);
  else unsetenv("KILN_LOGS");
  log::reload();
}
