// Subcommands of the `vitpe` command register themselves: each apps/cmd_*.cpp file defines a
// function that adds its subcommand to the CLI11 app, and registers it with VITPE_COMMAND.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "encodings/encoding.h"

namespace vitpe::app {

using CommandSetup = std::function<void(CLI::App& root)>;

// What a command does, which decides how `vitpe` starts (main.cpp): one that computes (runs a
// model or ops) starts again with OpenMP's short spin (ops/process.h), which costs about 0.15 s,
// unless it is inference on adaptive threads (classify, bench --model: main.cpp's
// adaptive_inference); one that only reads or writes files and text (help, info, ...) does not.
enum class Work { light, computes };

// order: position in `vitpe --help` (lower first); name: the subcommand `setup` adds, or adds
// to (several files add to `bench`), checked against the app once `setup` has run.
struct CommandRegistrar {
  CommandRegistrar(int order, const char* name, Work work, CommandSetup setup);
};

// The command line as the user typed it ("vitpe compare --set a=1 --set b=2 ..."), arguments
// quoted for a POSIX shell where needed: reports print it as the exact way to rerun them.
const std::string& invocation();

// Help text of a --model option that takes a preset: names every preset.
std::string preset_help();

// --threads N on `cmd` (the root or a subcommand): sets the compute threads when parsed;
// 0 keeps OMP_NUM_THREADS, else all cores. The one definition of the option.
void add_threads_option(CLI::App* cmd);

// A whole number in least..most ("28"; not "28abc", "-3" or "1e3"), else a usage error (exit 2)
// naming `what`, the text and the range.
int64_t parse_whole(const std::string& text, const std::string& what, int64_t least, int64_t most);
// "28,42,56" -> whole numbers as parse_whole takes them (empty items are skipped).
std::vector<int64_t> parse_whole_list(const std::string& text, const std::string& what,
                                      int64_t least, int64_t most);

// "interpolate,extrapolate" -> the extension policies in order, duplicates dropped (also
// "native", "interp", "extrap"), else a usage error naming `what` and the accepted words.
std::vector<ExtensionPolicy> parse_policy_list(const std::string& text, const std::string& what);
// The words --policy accepts and what each does (eval's and compare's help).
inline constexpr const char* kPolicyWords =
    "native (each kind's own rule), interpolate (coordinates rescaled into the trained range), "
    "extrapolate (integer coordinates past it; learned tables hold their edges), centre (as "
    "extrapolate with the trained grid in the middle: learned1d, separable2d, sincos2d), ntk "
    "(frequency k of n on an axis s times the trained one scales its coordinate by "
    "s^(-k/(n-1)): rope-axial, rope-mixed, sincos2d; other kinds their own rule)";

// "0.5,0.5,0.5" -> finite numbers in least..most (strtod, the whole item), else a usage error
// naming `what`; exactly `count` of them unless count is 0.
std::vector<float> parse_real_list(const std::string& text, const std::string& what, double least,
                                   double most, size_t count = 0);

// Throw this from a subcommand to exit with `code` after printing `message` to stderr. The
// codes (main.cpp's --help footer, README): 1 a failure, 2 a usage error. Any other exception
// a command lets through exits 1 with its message.
struct ExitError {
  int code;
  std::string message;
};

// The subcommand `name` of `parent`, created (with `description`) if it does not exist yet, so
// that several files can add to one subcommand (`vitpe bench ops`, `vitpe bench --model`).
inline CLI::App* find_or_add_subcommand(CLI::App& parent, const std::string& name,
                                        const std::string& description) {
  for (CLI::App* sub : parent.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  return parent.add_subcommand(name, description);
}

}  // namespace vitpe::app

#define VITPE_COMMAND_CAT2(a, b) a##b
#define VITPE_COMMAND_CAT(a, b) VITPE_COMMAND_CAT2(a, b)
// VITPE_COMMAND(order, "name", light | computes, setup): registers a subcommand (see above).
#define VITPE_COMMAND(order, name, work, fn)                                        \
  static ::vitpe::app::CommandRegistrar VITPE_COMMAND_CAT(vitpe_cmd_, __COUNTER__)( \
      order, name, ::vitpe::app::Work::work, fn)
