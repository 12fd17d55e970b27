// `vitpe`: the command-line tool. Each subcommand lives in its own apps/cmd_*.cpp file.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/command.h"
#include "ops/adaptive_threads.h"
#include "ops/ops.h"
#include "ops/process.h"
#include "ops/util.h"
#include "vit/io/data_files.h"
#include "vit/models/model.h"
#include "vit/train/distributed.h"
#include "vitpe/vitpe_version.h"

namespace vitpe::app {

namespace {
struct Registration {
  int order;
  const char* name;
  Work work;
  CommandSetup setup;
};
std::vector<Registration>& registry() {
  static std::vector<Registration> r;
  return r;
}
}  // namespace

CommandRegistrar::CommandRegistrar(int order, const char* name, Work work, CommandSetup setup) {
  registry().push_back({order, name, work, std::move(setup)});
}

namespace {
std::string& invocation_storage() {
  static std::string s;
  return s;
}

// 'arg' for the shell when it holds anything but [A-Za-z0-9_./=:,+@%-].
std::string shell_quote(const std::string& arg) {
  const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./=:,+@%-", c);
  });
  if (plain) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

const std::string& invocation() { return invocation_storage(); }

int64_t parse_whole(const std::string& text, const std::string& what, int64_t least, int64_t most) {
  const bool digits =
      !text.empty() && text.size() <= 18 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int64_t v = digits ? std::stoll(text) : least - 1;
  if (v < least || v > most) {
    throw ExitError{2, what + ": '" + text + "' is not a whole number from " +
                           std::to_string(least) + " to " + std::to_string(most)};
  }
  return v;
}

std::vector<int64_t> parse_whole_list(const std::string& text, const std::string& what,
                                      int64_t least, int64_t most) {
  std::vector<int64_t> out;
  for (const std::string& item : vitpe::split(text, ',')) {
    if (!item.empty()) out.push_back(parse_whole(item, what, least, most));
  }
  return out;
}

std::vector<ExtensionPolicy> parse_policy_list(const std::string& text, const std::string& what) {
  std::vector<ExtensionPolicy> out;
  for (const std::string& item : vitpe::split(text, ',')) {
    const std::string w = vitpe::trim(item);
    if (w.empty()) continue;
    try {
      const ExtensionPolicy p = parse_policy(w);
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    } catch (const std::invalid_argument& e) {
      throw ExitError{2, what + ": " + e.what()};
    }
  }
  if (out.empty()) {
    throw ExitError{2,
                    what + ": give at least one of native, interpolate, extrapolate, centre, ntk"};
  }
  return out;
}

std::vector<float> parse_real_list(const std::string& text, const std::string& what, double least,
                                   double most, size_t count) {
  std::vector<float> out;
  for (const std::string& item : vitpe::split(text, ',')) {
    char* end = nullptr;
    const double v = item.empty() ? std::nan("") : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v) || v < least ||
        v > most) {
      throw ExitError{2, what + ": '" + item + "' is not a number from " + std::to_string(least) +
                             " to " + std::to_string(most)};
    }
    out.push_back(static_cast<float>(v));
  }
  if (count != 0 && out.size() != count) {
    throw ExitError{2, what + ": expected " + std::to_string(count) +
                           " comma-separated numbers, found " + std::to_string(out.size()) +
                           " in '" + text + "'"};
  }
  return out;
}

void add_threads_option(CLI::App* cmd) {
  // OpenMP's runtime crashes creating tens of thousands of threads; no machine vitpe runs on
  // needs more than this.
  constexpr int kMaxThreads = 1024;
  cmd->add_option_function<int>(
         "--threads", [](const int& n) { vitpe::set_num_threads(n); },
         "Compute threads, at most 1024 (0: OMP_NUM_THREADS, else all cores)")
      ->check(CLI::Range(0, kMaxThreads));
}

std::string preset_help() {
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  return "Model preset: " + names + " (`vitpe info NAME` shows one)";
}

}  // namespace vitpe::app

namespace {

// Inference whose thread count follows the machine's load call by call
// (ops/adaptive_threads.h): `classify` and `bench --model` (not `bench ops`, `attention` or
// `train`), unless --fixed-threads, --streams or VITPE_ADAPTIVE_THREADS=0 fixes the count. A word
// of argv is enough, as for the restart below (a false match only picks the other spin).
bool adaptive_inference(char** argv) {
  bool classify = false, bench = false, bench_other = false, fixed = false;
  for (char** a = argv + 1; *a != nullptr; ++a) {
    const std::string w = *a;
    classify = classify || w == "classify";
    bench = bench || w == "bench";
    bench_other = bench_other || w == "ops" || w == "attention" || w == "train";
    fixed = fixed || w == "--fixed-threads" || w.rfind("--streams", 0) == 0;
  }
  return !fixed && vitpe::adaptive_threads_default() && (classify || (bench && !bench_other));
}

// The commands that compute (VITPE_COMMAND's Work) on a fixed thread count start again with
// OpenMP's short spin (ops/process.h): ViT-S batch 1 on 2 threads took 445 ms beside a nice-19
// build and 194 beside a busy process with libgomp's default, 219 and 120 with the short one (55
// alone either way on that AMD host; docs/results/shared-machine.md). Adaptive inference keeps
// libgomp's spin: its threads meet at every op's end, and on the Intel host the short spin's
// sleeps and wake-ups cost a quiet ViT-S batch 1 49 -> 74 ms (fixed threads: 46 -> 54; medians
// of four alternating rounds) while beside a busy process, where the adaptive count does the
// work, the long spin was no worse (86 against 90 ms). The second start costs about 0.15 s, so
// the light commands do not start again.
void restart_if_computing(char** argv) {
  if (adaptive_inference(argv)) return;
  for (char** a = argv + 1; *a != nullptr; ++a) {
    for (const auto& r : vitpe::app::registry()) {
      if (r.work == vitpe::app::Work::computes && std::strcmp(*a, r.name) == 0) {
        vitpe::restart_with_short_openmp_spin(argv);
        return;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  restart_if_computing(argv);
  using namespace vitpe::app;
  invocation_storage() = "vitpe";
  for (int i = 1; i < argc; ++i) invocation_storage() += " " + shell_quote(argv[i]);
  const std::string version = std::string("vitpe ") + vitpe::version();
  CLI::App app{version + ": Vision Transformers with interchangeable 2D positional encodings"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success; 1 failure (a file that cannot be read or is not what it should be, "
      "an image that could not be classified, no GPU for a CUDA command); 2 usage error (an "
      "unknown command or flag, a missing or bad value).");
  // --version also says which data folder (bundled checkpoint, class names) this vitpe uses,
  // and which MPI it was built with (mpirun -np N: vit/train/distributed.h).
  app.set_version_flag("--version", [version] {
    std::string data;
    try {
      data = std::filesystem::path(vitpe::bundled_model()).parent_path().parent_path().string();
    } catch (const std::exception& e) {
      data = std::string("none (") + e.what() + ")";
    }
    return version + "\ndata folder: " + data + "\nMPI: " + vitpe::mpi_library_version();
  });
  add_threads_option(&app);

  auto& cmds = registry();
  std::stable_sort(cmds.begin(), cmds.end(),
                   [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const Registration& r : cmds) {
    r.setup(app);
    // The name decides the restart above: a registration that names another command than it
    // adds would start the wrong ones again.
    bool added = false;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      added = added || sub->get_name() == r.name;
    }
    if (!added) {
      std::fprintf(stderr,
                   "vitpe: internal error: a command registered as '%s' added no such "
                   "subcommand\n",
                   r.name);
      return 1;
    }
  }

  // Bare `vitpe`: the help, as for --help.
  if (argc == 1) {
    std::printf("%s", app.help().c_str());
    return 0;
  }
  // CLI11 says only "A subcommand is required" for a misspelt one: name it and the known ones.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      found = found || sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::fprintf(stderr, "vitpe: unknown command '%s' (known: %s; see vitpe --help)\n", argv[1],
                   known.c_str());
      return 2;
    }
  }
  // Under mpirun / srun: MPI starts here, and each rank computes with the CPUs it was given
  // (shared with the ranks bound to the same ones) unless OMP_NUM_THREADS or --threads says.
  try {
    if (vitpe::launched_by_mpi()) {
      vitpe::world();
      const int threads = vitpe::threads_for_this_rank();
      if (threads > 0 && !std::getenv("OMP_NUM_THREADS")) vitpe::set_num_threads(threads);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vitpe: error: %s\n", vitpe::printable_lines(e.what()).c_str());
    return 1;
  }
  // An error on one rank of several stops them all (the others would wait for it for ever).
  auto fail = [](int code, const std::string& message) {
    if (!message.empty()) {
      // Messages quote file names and class names: escaped, they cannot drive the terminal.
      std::fprintf(stderr, "vitpe: %s%s\n", vitpe::rank_prefix().c_str(),
                   vitpe::printable_lines(message).c_str());
    }
    std::fflush(stderr);
    vitpe::abort_distributed(code);
    return code;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version exit 0; every usage error (CLI11 numbers them 101..) exits 2.
    const int code = app.exit(e) == 0 ? 0 : 2;
    if (code == 0) {
      vitpe::finish_distributed();
      return 0;
    }
    return fail(code, "");
  } catch (const ExitError& e) {
    if (e.code != 0) return fail(e.code, e.message);
    if (!e.message.empty()) {
      std::fprintf(stderr, "vitpe: %s\n", vitpe::printable_lines(e.message).c_str());
    }
    vitpe::finish_distributed();
    return 0;
  } catch (const std::exception& e) {
    return fail(1, std::string("error: ") + e.what());
  }
  vitpe::finish_distributed();
  return 0;
}
