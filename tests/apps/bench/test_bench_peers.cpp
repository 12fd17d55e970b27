// `vitpe bench --vs-peers` and `vitpe bench train --vs-peers` without the peers' venv (CI has
// none): what is refused before any measurement, and the comparison table read from a stand-in
// for the peers' Python that prints a fixed result. The real peers are run by hand (docs/PEERS.md).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/apps/run_vitpe.h"
#include "vit/io/checkpoint.h"

namespace {

using vitpe::testing::CmdResult;
using vitpe::testing::contains;
using vitpe::testing::vitpe;

std::string in_build(const std::string& name) { return std::string(VITPE_BINARY_DIR) + "/" + name; }

// An executable shell script standing in for the peers' Python.
std::string write_fake_python(const std::string& name, const std::string& body) {
  const std::string path = in_build(name);
  std::ofstream(path) << "#!/bin/sh\n" << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// Measuring had started when the table of vitpe's own times was printed.
constexpr const char* kOwnTable = "median ms";

TEST(BenchPeers, MissingVenvIsAUsageErrorBeforeMeasuring) {
  CmdResult r = vitpe(
      "bench --model vit_tiny_patch16_224 --batch 1 --reps 1 --vs-peers --peers-python "
      "/nonexistent/bin/python");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no peers' Python at /nonexistent/bin/python")) << r.out;
  EXPECT_TRUE(contains(r.out, "run scripts/peers-setup")) << r.out;
  EXPECT_FALSE(contains(r.out, kOwnTable)) << r.out;

  // Without --peers-python: $VITPE_PEERS_VENV's bin/python.
  setenv("VITPE_PEERS_VENV", "/nonexistent/venv", 1);
  CmdResult env = vitpe("bench --model vit_tiny_patch16_224 --batch 1 --reps 1 --vs-peers");
  CmdResult train = vitpe("bench train --set depth=1 --batch 4 --reps 1 --vs-peers");
  unsetenv("VITPE_PEERS_VENV");
  EXPECT_EQ(env.code, 2) << env.out;
  EXPECT_TRUE(contains(env.out, "/nonexistent/venv/bin/python; run scripts/peers-setup"))
      << env.out;
  EXPECT_EQ(train.code, 2) << train.out;
  EXPECT_TRUE(contains(train.out, "bench train --vs-peers: no peers' Python")) << train.out;
  EXPECT_FALSE(contains(train.out, "forward + loss")) << train.out;
}

// The peers run timm's models: a model without a timm name, or with another architecture than
// the timm preset it names, is refused (before the venv is looked for, so CI sees the message).
TEST(BenchPeers, ModelWithoutTimmNameIsRefused) {
  setenv("VITPE_PEERS_VENV", "/nonexistent/venv", 1);
  CmdResult own = vitpe("bench --model vit-fmnist --batch 1 --reps 1 --vs-peers");

  const std::string fmnist = in_build("peers_fmnist.safetensors");
  vitpe::save_model(*vitpe::make_model(vitpe::preset("vit-fmnist"), 0), fmnist);
  CmdResult file = vitpe("bench --model " + fmnist + " --batch 1 --reps 1 --vs-peers");

  vitpe::ModelConfig shallow = vitpe::preset("vit_tiny_patch16_224");
  shallow.vit().depth = 2;
  const std::string tiny = in_build("peers_tiny_depth2.safetensors");
  vitpe::save_model(*vitpe::make_model(shallow, 0), tiny);
  CmdResult other = vitpe("bench --model " + tiny + " --batch 1 --reps 1 --vs-peers");

  // A file that names its preset in vitpe's first, dashed spelling is timm's model all the same:
  // it gets as far as looking for the venv.
  vitpe::ModelConfig dashed = vitpe::preset("vit_tiny_patch16_224");
  dashed.name = "vit-tiny-patch16-224";
  const std::string old = in_build("peers_tiny_dashed.safetensors");
  vitpe::save_model(*vitpe::make_model(dashed, 0), old);
  CmdResult alias = vitpe("bench --model " + old + " --batch 1 --reps 1 --vs-peers");
  unsetenv("VITPE_PEERS_VENV");

  EXPECT_EQ(own.code, 2) << own.out;
  EXPECT_TRUE(contains(own.out, "vit-fmnist has no timm model name")) << own.out;
  EXPECT_EQ(file.code, 2) << file.out;
  EXPECT_TRUE(contains(file.out, fmnist + " has no timm model name (its config says 'vit-fmnist')"))
      << file.out;
  EXPECT_EQ(other.code, 2) << other.out;
  EXPECT_TRUE(contains(other.out, "timm's vit_tiny_patch16_224 with another architecture"))
      << other.out;
  EXPECT_TRUE(contains(other.out, "depth 2 (timm: 12)")) << other.out;
  EXPECT_EQ(alias.code, 2) << alias.out;
  EXPECT_TRUE(contains(alias.out, "no peers' Python at /nonexistent/venv/bin/python")) << alias.out;
  for (const CmdResult* r : {&own, &file, &other, &alias})
    EXPECT_FALSE(contains(r->out, kOwnTable));
  for (const std::string& path : {fmnist, tiny, old}) std::filesystem::remove(path);
}

// A stand-in peer script's result: at batch 1 onnxruntime is the fastest peer and vitpe is
// slower than it, at batch 2 torch-eager is the only one that ran and vitpe is faster; openvino
// failed at batch 1 and is missing at batch 2; openvino-tput (OpenVINO's throughput streams) runs
// at batch 2 only.
constexpr const char* kFakeResult = R"({"model": "vit_tiny_patch16_224",
"versions": {"torch": "2.99-fake", "openvino": null},
"results": [
 {"runtime": "torch-eager", "batch": 1, "median_ms": 1e6, "min_ms": 1e6, "max_ms": 1e6},
 {"runtime": "onnxruntime", "batch": 1, "median_ms": 0.001, "min_ms": 0.001, "max_ms": 0.001},
 {"runtime": "openvino-f32", "batch": 1, "error": "ImportError: no module named openvino"},
 {"runtime": "torch-eager", "batch": 2, "median_ms": 2e6, "min_ms": 2e6, "max_ms": 2e6},
 {"runtime": "onnxruntime", "batch": 2, "error": "RuntimeError: fake"},
 {"runtime": "openvino-tput", "batch": 2, "median_ms": 3e6, "min_ms": 3e6, "max_ms": 3e6}]})";

TEST(BenchPeers, ComparesEachBatchWithItsFastestPeer) {
  // The stand-in records its arguments and prints the result on one line, after a log line; the
  // line is longer than vitpe's read buffer.
  const std::string args = in_build("peers_fake_args.txt");
  std::string one_line = kFakeResult;
  for (char& ch : one_line) ch = ch == '\n' ? ' ' : ch;
  one_line.insert(1, "\"padding\": \"" + std::string(10000, 'x') + "\", ");
  const std::string python = write_fake_python(
      "peers_fake_python",
      "echo \"$@\" > " + args + "\necho 'peers: a log line'\necho '" + one_line + "'\n");
  const std::string run = "bench --model vit_tiny_patch16_224 --batch 1,2 --reps 1 --vs-peers " +
                          std::string("--peers-python ") + python;

  CmdResult json = vitpe(run + " --json", "2>/dev/null");
  ASSERT_EQ(json.code, 0) << json.out;
  const auto j = nlohmann::json::parse(json.out);
  std::ifstream in(args);
  std::string passed;
  std::getline(in, passed);
  EXPECT_TRUE(contains(passed, "/scripts/peers_bench.py --model vit_tiny_patch16_224 --threads "))
      << passed;
  EXPECT_TRUE(contains(passed, " --batches 1,2 --reps 1,1 --img-size 224x224")) << passed;
  EXPECT_FALSE(contains(passed, "--with-int8")) << "an f32 run meets the f32 peers: " << passed;

  const auto& cmp = j["peers"]["comparison"];
  ASSERT_EQ(cmp.size(), 2u) << j["peers"].dump();
  EXPECT_EQ(cmp[0]["fastest_peer"], "onnxruntime");
  EXPECT_EQ(cmp[0]["measure"], "latency");
  EXPECT_EQ(cmp[1]["fastest_peer"], "torch-eager");
  EXPECT_EQ(cmp[1]["measure"], "throughput");
  for (size_t i = 0; i < 2; ++i) {
    // The ratio is vitpe's speed over the peer's: the peer's median over vitpe's.
    const double ours = j["results"][i]["median_ms"].get<double>();
    EXPECT_DOUBLE_EQ(cmp[i]["vitpe_median_ms"].get<double>(), ours);
    EXPECT_DOUBLE_EQ(cmp[i]["ratio"].get<double>(),
                     cmp[i]["fastest_peer_median_ms"].get<double>() / ours);
  }
  EXPECT_LT(cmp[0]["ratio"].get<double>(), 1.0);
  EXPECT_GT(cmp[1]["ratio"].get<double>(), 1.0);
  EXPECT_EQ(j["peers"]["python"], python);
  EXPECT_EQ(j["peers"]["results"].size(), 6u);

  CmdResult text = vitpe(run);
  ASSERT_EQ(text.code, 0) << text.out;
  for (const char* part : {"vitpe median (min-max)", "torch-eager", "onnxruntime", "openvino-f32",
                           "fastest peer", "x slower", "x the img/s",
                           "openvino-f32 failed at batch 1: ImportError: no module named openvino",
                           "onnxruntime failed at batch 2: RuntimeError: fake",
                           "peers' versions: ", "torch 2.99-fake", "openvino missing",
                           "openvino-tput", "3000000.0"})
    EXPECT_TRUE(contains(text.out, part)) << part << "\n" << text.out;
  // A runtime with no row at a batch (openvino-tput at batch 1) is no failure.
  EXPECT_FALSE(contains(text.out, "openvino-tput failed")) << text.out;
  std::filesystem::remove(args);
  std::filesystem::remove(python);
}

TEST(BenchPeers, Int8AlsoMeetsOnnxRuntimesQuantisedModel) {
  const std::string args = in_build("peers_int8_args.txt");
  std::string one_line = kFakeResult;
  for (char& ch : one_line) ch = ch == '\n' ? ' ' : ch;
  const std::string python = write_fake_python(
      "peers_int8_python", "echo \"$@\" > " + args + "\necho '" + one_line + "'\n");
  CmdResult r = vitpe("bench --model vit_tiny_patch16_224 --batch 1,2 --reps 1 --precision int8 " +
                      std::string("--vs-peers --peers-python ") + python);
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(args);
  std::string passed;
  std::getline(in, passed);
  EXPECT_TRUE(contains(passed, " --with-int8")) << passed;
  EXPECT_TRUE(contains(r.out,
                       "the peers run f32 but onnxruntime-int8 (dynamic int8, as vitpe's); "
                       "vitpe ran int8"))
      << r.out;
  std::filesystem::remove(args);
  std::filesystem::remove(python);
}

TEST(BenchPeers, APeerScriptWithoutResultFails) {
  const std::string python = write_fake_python("peers_broken_python", "echo 'Traceback'\nexit 3\n");
  CmdResult r = vitpe("bench --model vit_tiny_patch16_224 --batch 1 --reps 1 --vs-peers " +
                      std::string("--peers-python ") + python);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "the peers' script printed no result (exit status 3)")) << r.out;
  EXPECT_TRUE(contains(r.out, "Traceback")) << r.out;
  std::filesystem::remove(python);
}

}  // namespace
