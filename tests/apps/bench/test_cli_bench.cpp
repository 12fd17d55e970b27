// The `vitpe bench` commands as a user runs them (apps/bench): background load, the op and
// training benchmarks, profiles and the timing against f32 and the PyTorch peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/apps/run_vitpe.h"

namespace {

using vitpe::testing::CmdResult;
using vitpe::testing::contains;
using vitpe::testing::json_of;
using vitpe::testing::vitpe;

// --background-load N: the measurement runs beside N busy processes, says so, and leaves none
// behind (each child's pid, from the JSON, no longer runs this build's vitpe).
TEST(Cli, BenchBackgroundLoadStartsAndStopsItsProcesses) {
  namespace fs = std::filesystem;
  CmdResult r = vitpe("bench --model vit-fmnist --batch 1 --reps 1 --background-load 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("background load: 2 busy processes"), std::string::npos) << r.out;
  const auto j = json_of("bench --json --model vit-fmnist --batch 1 --reps 1 --background-load 2");
  EXPECT_EQ(j["background_load"], 2);
  ASSERT_EQ(j["background_pids"].size(), 2u);
  const fs::path bin = fs::weakly_canonical(std::string(VITPE_BINARY_DIR) + "/vitpe");
  for (const auto& pid : j["background_pids"]) {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/" + std::to_string(pid.get<int>()) + "/exe", ec);
    EXPECT_TRUE(ec || exe != bin) << "busy process " << pid << " still runs";
  }
  CmdResult bad = vitpe("bench --model vit-fmnist --background-load 65");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--background-load"), std::string::npos) << bad.out;
}

// bench train --background-load N: the same for a training step (the processes run beside the
// steps and the peer, and are gone when the command returns).
TEST(Cli, BenchTrainBackgroundLoadStartsAndStopsItsProcesses) {
  namespace fs = std::filesystem;
  const auto file = fs::temp_directory_path() / "vitpe_cli_train_load.json";
  fs::remove(file);
  CmdResult r = vitpe("bench train --batch 4 --reps 1 --background-load 1 --json " + file.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("background load: 1 busy process beside"), std::string::npos) << r.out;
  std::ifstream in(file);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["background_load"], 1);
  ASSERT_EQ(j["background_pids"].size(), 1u);
  const fs::path bin = fs::weakly_canonical(std::string(VITPE_BINARY_DIR) + "/vitpe");
  std::error_code ec;
  const int pid = j["background_pids"][0].get<int>();
  const fs::path exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  EXPECT_TRUE(ec || exe != bin) << "busy process " << pid << " still runs";
  CmdResult bad = vitpe("bench train --background-load 65");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--background-load"), std::string::npos) << bad.out;
  fs::remove(file);
}

TEST(Cli, BenchWithoutModelSaysWhatToGive) {
  CmdResult r = vitpe("bench");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.out, "--model")) << r.out;
}

// bench ops measures the machine's FMA peak with a register-only loop and reads every op's
// rate against it as well as against oneDNN's large matmul.
TEST(Cli, BenchOpsPrintsTheFmaPeakAndEveryOpAgainstIt) {
  CmdResult r = vitpe("bench ops --reps 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("FMA peak (register-only loop): AVX2 ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double gflops =
      std::stod(r.out.substr(at + std::strlen("FMA peak (register-only loop): AVX2 ")));
  EXPECT_GT(gflops, 1.0) << r.out;
  EXPECT_TRUE(contains(r.out, "of the AVX")) << r.out;
  EXPECT_TRUE(contains(r.out, "of FMA")) << r.out;
  EXPECT_TRUE(contains(r.out, "fc2+residual int8")) << r.out;
  // Which kernels each row ran: oneDNN's implementation names (family:ISA), its sgemm and the
  // ISA of vitpe's own kernels.
  EXPECT_TRUE(contains(r.out, "kernels")) << r.out;
  EXPECT_TRUE(contains(r.out, ":avx")) << r.out;
  // Attention: oneDNN's sgemm with vitpe's softmax, or on AVX-512 vitpe's own tiles alone.
  EXPECT_TRUE(contains(r.out, "  sgemm:") || contains(r.out, "  own:avx512\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "own:avx2") || contains(r.out, "own:sse4.2")) << r.out;
}

// --profile splits the forward's time by class of op: vit-fmnist (depth 6, mean pooling) makes
// 4 linears per block and its head, one attention and two layernorms per block and the final
// one, one patch embedding and one token mean; the parts and the time between ops add up to the
// forward.
TEST(Cli, BenchProfileSplitsTheForwardByOpClass) {
  const auto j =
      json_of("bench --json --model vit-fmnist --batch 2 --reps 2 --fixed-threads --profile");
  EXPECT_GT(j["fma_peak_gflops_per_s"].get<double>(), 0);
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& p = j["results"][0]["profile"];
  EXPECT_EQ(p["forwards"], 2);
  std::map<std::string, double> calls;
  double ms = p["between_ops_ms"].get<double>();
  for (const auto& op : p["ops"]) {
    calls[op["class"].get<std::string>()] = op["calls_per_forward"].get<double>();
    ms += op["ms_per_forward"].get<double>();
    EXPECT_GE(op["share"].get<double>(), 0) << op.dump();
  }
  EXPECT_EQ(calls["linear"], 25) << p.dump();
  EXPECT_EQ(calls["attention"], 6) << p.dump();
  EXPECT_EQ(calls["layernorm"], 13) << p.dump();
  EXPECT_EQ(calls["patch embed"], 1) << p.dump();
  EXPECT_EQ(calls.count("copies"), 0u) << "inference reads the heads in place";
  EXPECT_NEAR(ms, p["forward_ms"].get<double>(), 1e-6 * ms) << p.dump();
  EXPECT_GT(p["ops"][0]["gflops_per_s"].get<double>(), 0) << p.dump();
  // The whole forward's rate against the FMA peak, from the unprofiled median.
  const auto& row = j["results"][0];
  EXPECT_NEAR(row["of_fma_peak"].get<double>(),
              row["gflops_per_s"].get<double>() / j["fma_peak_gflops_per_s"].get<double>(), 1e-9);
  CmdResult text = vitpe("bench --model vit-fmnist --batch 1 --reps 1 --profile");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(contains(text.out, "FMA peak (register-only loop)")) << text.out;
  EXPECT_TRUE(contains(text.out, "the whole forward at ")) << text.out;
  EXPECT_TRUE(contains(text.out, "between ops")) << text.out;
  CmdResult gpu = vitpe("bench --model vit-fmnist --device cuda --profile");
  EXPECT_EQ(gpu.code, 2) << gpu.out;
  EXPECT_TRUE(contains(gpu.out, "--profile")) << gpu.out;
}

// --vs-f32: an f32 copy of the model timed in turn with the int8 one; the speed-up is the median
// of the pairs' ratios and lies within their range; f32 against itself is a usage error.
// --streams N times a batch split over N concurrent forwards with their share of the threads,
// and says so; flags that time one forward at a time are refused with it.
TEST(Cli, BenchStreamsSplitTheBatchOverConcurrentForwards) {
  const auto j = json_of("bench --json --model vit-fmnist --batch 4 --reps 2 --streams 2");
  EXPECT_EQ(j["streams"], 2);
  EXPECT_EQ(j["threads_per_stream"], std::max(1, j["threads"].get<int>() / 2));
  EXPECT_EQ(j["adaptive_threads"], false);
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_GT(j["results"][0]["median_ms"].get<double>(), 0);
  CmdResult text = vitpe("bench --model vit-fmnist --batch 2 --reps 1 --streams 2");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(contains(text.out, "streams: 2 concurrent forwards")) << text.out;
  CmdResult bad = vitpe("bench --model vit-fmnist --batch 2 --streams 2 --profile");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(contains(bad.out, "--streams")) << bad.out;
  EXPECT_EQ(vitpe("bench --model vit-fmnist --streams 0").code, 2);
}

// f32 weights are packed for oneDNN's matmul as a Classifier packs them (where it reads a blocked
// layout: AVX-512), and the bench says what that costs; --no-pack keeps one copy.
TEST(Cli, BenchPacksF32WeightsUnlessToldNot) {
  const bool avx512 = std::string(vitpe::cpu_isa_name()).find("avx512") != std::string::npos;
  const auto packed = json_of("bench --json --model vit-fmnist --batch 2 --reps 1");
  EXPECT_EQ(packed["converted_weights_mib"].get<double>() > 0, avx512) << vitpe::cpu_isa_name();
  const auto plain = json_of("bench --json --model vit-fmnist --batch 2 --reps 1 --no-pack");
  EXPECT_EQ(plain["converted_weights_mib"].get<double>(), 0.0);
  CmdResult text = vitpe("bench --model vit-fmnist --batch 2 --reps 1");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_EQ(contains(text.out, "packed for the CPU's matmul"), avx512) << text.out;
}

TEST(Cli, BenchTimesInt8AgainstF32InTurn) {
  const auto j = json_of(
      "bench --json --model vit-fmnist --batch 1,2 --reps 3 --precision int8 "
      "--vs-f32 --fixed-threads");
  EXPECT_EQ(j["vs_f32"], true);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& row : j["results"]) {
    const double s = row["speedup_vs_f32"], lo = row["speedup_vs_f32_min"],
                 hi = row["speedup_vs_f32_max"];
    EXPECT_GT(row["f32_median_ms"].get<double>(), 0) << row.dump();
    EXPECT_LE(row["f32_min_ms"].get<double>(), row["f32_max_ms"].get<double>()) << row.dump();
    EXPECT_GT(lo, 0) << row.dump();
    EXPECT_LE(lo, s) << row.dump();
    EXPECT_LE(s, hi) << row.dump();
  }
  CmdResult text = vitpe("bench --model vit-fmnist --batch 1 --reps 2 --precision int8 --vs-f32");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(contains(text.out, "f32 in turn:")) << text.out;
  EXPECT_TRUE(contains(text.out, "int8 is ")) << text.out;
  CmdResult same = vitpe("bench --model vit-fmnist --batch 1 --reps 1 --vs-f32");
  EXPECT_EQ(same.code, 2) << same.out;
  EXPECT_TRUE(contains(same.out, "found --precision f32")) << same.out;
  CmdResult gpu = vitpe("bench --model vit-fmnist --device cuda --precision int8 --vs-f32");
  EXPECT_EQ(gpu.code, 2) << gpu.out;
  EXPECT_TRUE(contains(gpu.out, "--vs-f32")) << gpu.out;
}

TEST(Cli, BenchTrainPrintsPhasesAndGoesOnWithoutThePeer) {
  // The peer script is one that does not exist: the benchmark still reports, and says why the
  // ratios are missing.
  setenv("VITPE_TORCH_TRAIN_PEER", "/nonexistent/torch_train_peer.py", 1);
  CmdResult r = vitpe("bench train --batch 8 --reps 2 --vs-torch");
  // The class-token variant is a shape the peer builds too (with its class token), so it tries.
  CmdResult cls =
      vitpe("bench train --set pool=cls --set class_token=true --batch 4 --reps 1 --vs-torch");
  unsetenv("VITPE_TORCH_TRAIN_PEER");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* part :
       {"forward + loss", "backward", "clip + AdamW", "img/s", "the PyTorch peer did not run"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  EXPECT_EQ(cls.code, 0) << cls.out;
  EXPECT_TRUE(contains(cls.out, "the PyTorch peer did not run")) << cls.out;
  // The peer is told the pooling: the preset's mean pooling, or the class token.
  EXPECT_TRUE(contains(r.out, " avg 2>&1")) << r.out;
  EXPECT_TRUE(contains(cls.out, " token 2>&1")) << cls.out;
  CmdResult other = vitpe("bench train --set depth=1 --batch 4 --reps 1 --vs-torch");
  EXPECT_EQ(other.code, 0) << other.out;
  EXPECT_TRUE(contains(other.out, "vit-fmnist shape only")) << other.out;
}

// bench train --profile splits the step's forward (with the loss) and backward by class of op:
// vit-fmnist's linears (25 forward, 31 backward) with the GELUs inside them, and 6 attentions
// each way, with no head copies either way
// (training reads and writes the heads in qkv's rows); the parts and the time between ops add up
// to each phase, and the JSON carries both tables.
TEST(Cli, BenchTrainProfileSplitsForwardAndBackwardByOpClass) {
  const auto file = std::filesystem::temp_directory_path() / "vitpe_cli_train_profile.json";
  std::filesystem::remove(file);
  CmdResult r = vitpe("bench train --batch 4 --reps 2 --profile --json " + file.string());
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* part : {"FMA peak (register-only loop)", "profile of 2 forwards",
                           "profile of 2 backwards", "ms/backward", "between ops"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  std::ifstream in(file);
  const auto j = nlohmann::json::parse(in);
  const auto& p = j["one_process"]["profile"];
  EXPECT_GT(p["fma_peak_gflops_per_s"].get<double>(), 0) << p.dump();
  for (const std::string pass : {"forward", "backward"}) {
    const auto& t = p[pass];
    EXPECT_EQ(t[pass + "s"], 2) << t.dump();
    std::map<std::string, double> calls;
    double ms = t["between_ops_ms"].get<double>();
    for (const auto& op : t["ops"]) {
      calls[op["class"].get<std::string>()] = op["calls_per_" + pass].get<double>();
      ms += op["ms_per_" + pass].get<double>();
    }
    // The GELU runs inside the linear ops each way (fc1's forward, fc2's backward to its input,
    // on each block of products in cache); fc2's own gradients are a seventh linear op per block
    // in the backward.
    EXPECT_EQ(calls["linear"], pass == "forward" ? 25 : 31) << pass << " " << t.dump();
    EXPECT_EQ(calls["attention"], 6) << pass << " " << t.dump();
    EXPECT_EQ(calls.count("gelu"), 0u) << pass << " " << t.dump();
    EXPECT_EQ(calls["layernorm"], 13) << pass << " " << t.dump();
    EXPECT_EQ(calls.count("copies"), 0u) << pass << " " << t.dump();
    EXPECT_NEAR(ms, t[pass + "_ms"].get<double>(), 1e-6 * ms) << t.dump();
    EXPECT_GT(t["ops"][0]["gflops_per_s"].get<double>(), 0) << t.dump();
  }
  std::filesystem::remove(file);
}

// --rounds alternates vitpe's timing with the peer: the peer runs once per round (here a shell
// script standing in for PyTorch, which the tests never need, printing 400, 800 and 200 ms in
// turn), each round's ratio is recorded, and the median of the ratios is the one printed.
TEST(Cli, BenchTrainRoundsAlternateWithThePeer) {
  const auto dir = std::filesystem::temp_directory_path() / "vitpe_cli_train_rounds";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto peer = dir / "peer.sh", count = dir / "count", out = dir / "out.json";
  {
    std::ofstream f(peer);
    f << "n=$(cat " << count.string() << " 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "
      << count.string() << "\n"
      << "case $n in 1) ms=400;; 2) ms=800;; *) ms=200;; esac\n"
      << "echo \"{\\\"train_ms\\\": $ms, \\\"eval_img_s\\\": 50, \\\"torch\\\": "
         "\\\"stand-in\\\"}\"\n";
  }
  setenv("VITPE_TORCH_TRAIN_PEER", peer.c_str(), 1);
  CmdResult r = vitpe(
      "bench train --batch 4 --reps 1 --vs-peers --peers-python /bin/sh --rounds 3 "
      "--json " +
      out.string());
  unsetenv("VITPE_TORCH_TRAIN_PEER");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "median of 3 rounds' ratios")) << r.out;
  EXPECT_TRUE(contains(r.out, "round 3 train img/s")) << r.out;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in)["one_process"]["vs_peers"];
  ASSERT_EQ(j["rounds"].size(), 3u) << j.dump();
  std::vector<double> ratios;
  const double want_torch[] = {4 / 0.4, 4 / 0.8, 4 / 0.2};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(j["rounds"][i]["torch_img_s"].get<double>(), want_torch[i], 1e-9) << j.dump();
    ratios.push_back(j["rounds"][i]["ratio"].get<double>());
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_EQ(j["ratio_median"].get<double>(), ratios[1]) << j.dump();
  EXPECT_EQ(j["ratio_min"].get<double>(), ratios[0]) << j.dump();
  EXPECT_EQ(j["ratio_max"].get<double>(), ratios[2]) << j.dump();
  EXPECT_EQ(j["torch"], "stand-in") << j.dump();
  CmdResult bad = vitpe("bench train --rounds 0");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(contains(bad.out, "--rounds")) << bad.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
