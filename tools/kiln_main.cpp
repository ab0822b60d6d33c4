// The `kiln` command-line tool: run, disassemble or verify a .kbc file.
// Exit status: 0 success, 1 the program failed (or was rejected), 2 usage.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "interpreter/assembler.h"
#include "interpreter/disassembler.h"
#include "interpreter/kiln_api.h"
#include "interpreter/vm.h"
#include "runtime/semantics/value_ops.h"

using namespace kiln;
using runtime::Value;

namespace {

// Command-line arguments become KBC values the way Python literals would:
// 3 -> int, 2.5 -> float, True/False/None, anything else a str.
Value parse_arg(const std::string& s) {
  if (s == "True") return Value::boolean(true);
  if (s == "False") return Value::boolean(false);
  if (s == "None") return Value::none();
  int64_t i;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
  if (ec == std::errc() && p == s.data() + s.size()) return Value::integer(i);
  double d;
  auto [q, ec2] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec2 == std::errc() && q == s.data() + s.size()) return Value::floating(d);
  return Value::str(s);
}

int fail(const Error& e, bool traceback) {
  std::string text = traceback ? e.full() : e.what();
  std::fprintf(stderr, "kiln: %s\n", text.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: run, disassemble and verify KBC programs"};
  app.require_subcommand(1);

  std::string file, entry = "main", backend = "llvm", setup;
  int repeat = 0;
  std::vector<std::string> args;
  bool compiled = false, explain = false;
  auto* run = app.add_subcommand("run", "assemble, verify and run FILE's entry function; prints its result");
  run->add_option("file", file, "a .kbc file")->required();
  run->add_option("--entry", entry, "the function to call (default: main)");
  run->add_option("args", args, "arguments: ints, floats, True/False/None, else strings");
  run->add_flag("--compile", compiled, "trace and compile the entry function (prints exactly what the VM run prints)");
  run->add_flag("--explain", explain, "compile, and add the explain report (graphs, breaks, guards) after the result");
  run->add_option("--backend", backend, "the backend for --compile: llvm (default) or eager");
  run->add_option("--setup", setup, "a function to run on the VM first (e.g. to build a model into globals)");
  run->add_option("--time", repeat, "also time N calls on the VM and N compiled calls, and print both");
  auto* dis = app.add_subcommand("dis", "print FILE in canonical KBC text");
  dis->add_option("file", file, "a .kbc file")->required();
  auto* ver = app.add_subcommand("verify", "assemble and verify FILE without running it");
  ver->add_option("file", file, "a .kbc file")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kiln: %s (see kiln --help)\n", e.what());
    return 2;
  }

  try {
    interpreter::Program program = interpreter::assemble_file(file);
    if (dis->parsed()) {
      std::cout << interpreter::disassemble(program);
      return 0;
    }
    if (ver->parsed()) {
      std::cout << file << ": OK (" << program.items.size() << " top-level definitions)\n";
      return 0;
    }
    std::vector<Value> values;
    for (const auto& a : args) values.push_back(parse_arg(a));
    interpreter::VM vm;
    try {
      if (!setup.empty()) vm.run(program, setup);
      if (repeat > 0) {
        Value fn = program.global(entry);
        if (fn.is_null())
          throw Error(ErrorKind::NameError, "entry point '" + entry + "' is not defined in " + program.filename);
        kiln::Options options;
        options.backend = backend;
        kiln::CompiledFunction f = kiln::compile(fn, options);
        auto time_per_call = [&](auto&& call) {
          call();  // warm-up (and the trace, for the compiled one)
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < repeat; ++i) call();
          return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / repeat;
        };
        double vm_us = time_per_call([&] { vm.run(program, entry, values); });
        double compiled_us = time_per_call([&] { f(values); });
        std::printf("%s: VM (eager kernels, interpreted) %.1f us/call, compiled (%s backend) %.1f us/call: %.2fx\n",
                    entry.c_str(), vm_us, backend.c_str(), compiled_us, vm_us / compiled_us);
        return 0;
      }
      if (compiled || explain) {
        Value fn = program.global(entry);
        if (fn.is_null())
          throw Error(ErrorKind::NameError, "entry point '" + entry + "' is not defined in " + program.filename);
        kiln::Options options;
        options.backend = backend;
        if (explain) {
          // explain() runs the call once; the report follows the result.
          kiln::ExplainReport report = kiln::explain(fn, values, options);
          if (report.error.empty()) std::cout << runtime::repr(report.result) << "\n";
          std::cout << "\n" << report.str();
          if (!report.error.empty()) {
            std::fprintf(stderr, "kiln: %s\n", report.error.c_str());
            return 1;
          }
        } else {
          std::cout << runtime::repr(kiln::compile(fn, options)(values)) << "\n";
        }
      } else {
        Value result = vm.run(program, entry, values);
        std::cout << runtime::repr(result) << "\n";
      }
    } catch (const Error& e) {
      return fail(e, true);
    }
    return 0;
  } catch (const Error& e) {
    return fail(e, false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: internal error: %s\n", e.what());
    return 1;
  }
}
