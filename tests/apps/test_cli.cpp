// The `vitpe` command as a user runs it: exit codes and messages for good and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/apps/run_vitpe.h"
#include "vit/io/checkpoint.h"

namespace {

using vitpe::testing::CmdResult;
using vitpe::testing::contains;
using vitpe::testing::json_of;
using vitpe::testing::vitpe;

// Whether the command has the benchmarks (VITPE_BENCH; the sanitizer build leaves them out).
constexpr bool kBench = VITPE_WITH_BENCH;

std::string data(const std::string& name) { return std::string(VITPE_TEST_DATA) + "/" + name; }

TEST(Cli, HelpListsTheSubcommands) {
  CmdResult r = vitpe("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"classify", "info", "convert", "encodings", "train", "compare"})
    EXPECT_TRUE(contains(r.out, sub)) << sub << "\n" << r.out;
  EXPECT_EQ(contains(r.out, "\n  bench"), kBench) << r.out;
}

// The commands that compute on a fixed thread count start again with OpenMP's short spin and the
// others do not (each VITPE_COMMAND says which; inference on adaptive threads keeps libgomp's):
// libgomp shows its setting at each start under OMP_DISPLAY_ENV, so a second start shows
// GOMP_SPINCOUNT = '1000' after its default.
TEST(Cli, OnlyComputingCommandsOnFixedThreadsStartAgainWithAShortSpin) {
  unsetenv("OMP_WAIT_POLICY");
  unsetenv("GOMP_SPINCOUNT");
  unsetenv("VITPE_ADAPTIVE_THREADS");
  setenv("OMP_DISPLAY_ENV", "VERBOSE", 1);
  std::vector<std::string> computing = {"embed --help", "eval --help",
                                        "train --help", "compare --help",
                                        "demo --help",  "classify --fixed-threads --help"};
  if (kBench) {
    for (const char* c : {"bench ops --help", "bench train --help", "bench attention --help",
                          "bench --model vit-fmnist --fixed-threads --help",
                          "bench --model vit-fmnist --streams 2 --help"})
      computing.push_back(c);
  }
  for (const std::string& cmd : computing) {
    CmdResult r = vitpe(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "GOMP_SPINCOUNT = '1000'")) << cmd << "\n" << r.out;
  }
  setenv("VITPE_ADAPTIVE_THREADS", "0", 1);  // adaptive threads off: a fixed count
  CmdResult fixed = vitpe("classify --help");
  EXPECT_TRUE(contains(fixed.out, "GOMP_SPINCOUNT = '1000'")) << fixed.out;
  unsetenv("VITPE_ADAPTIVE_THREADS");
  std::vector<std::string> adaptive_or_light = {"info --help", "convert --help", "encodings --help",
                                                "report --help", "classify --help"};
  if (kBench) adaptive_or_light.push_back("bench --model vit-fmnist --help");
  for (const std::string& cmd : adaptive_or_light) {
    CmdResult r = vitpe(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "GOMP_SPINCOUNT = '300000'")) << cmd << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "GOMP_SPINCOUNT = '1000'")) << cmd << "\n" << r.out;
  }
  unsetenv("OMP_DISPLAY_ENV");
}

// A --model that takes a preset names the presets (it once pointed at a command that did not
// exist); every named preset is one `vitpe info` accepts.
TEST(Cli, ModelHelpNamesThePresets) {
  for (const char* cmd : {"train --help", "compare --help", "bench train --help"}) {
    if (!kBench && std::strncmp(cmd, "bench", 5) == 0) continue;
    CmdResult r = vitpe(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    for (const char* preset : {"vit-fmnist", "swin-fmnist", "vit_small_patch16_224"})
      EXPECT_TRUE(contains(r.out, preset)) << cmd << ": " << preset << "\n" << r.out;
  }
  // timm's names, and vitpe's earlier dashed spelling of them.
  for (const char* preset :
       {"vit-fmnist", "swin-fmnist", "vit_small_patch16_224", "vit-small-patch16-224"}) {
    CmdResult info = vitpe(std::string("info ") + preset);
    EXPECT_EQ(info.code, 0) << preset << "\n" << info.out;
  }
}

// Numbers on the command line are whole numbers or an error: "28abc", "28x28x5" and 0 were once
// read as 28 (or as the native size); an empty labels file once dropped the model's names.
TEST(Cli, SizesAndLabelsAreParsedStrictly) {
  for (const char* args : {"info --img-size 28abc vit-fmnist", "info --img-size 28x28x5 vit-fmnist",
                           "info --img-size 0 vit-fmnist"}) {
    CmdResult r = vitpe(args);
    EXPECT_NE(r.code, 0) << args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "--img-size")) << args << "\n" << r.out;
  }
  CmdResult ok = vitpe("info --img-size 56x56 " + data("swin_tv.safetensors"));
  EXPECT_EQ(ok.code, 0) << ok.out;
  CmdResult zero = vitpe("eval --model vit-fmnist --dataset procedural --sizes 28,0");
  EXPECT_EQ(zero.code, 2) << zero.out;
  EXPECT_TRUE(contains(zero.out, "'0' is not a whole number from 1")) << zero.out;
  CmdResult seeds = vitpe("compare --seeds 1,2x --out /nonexistent");
  EXPECT_EQ(seeds.code, 2) << seeds.out;
  EXPECT_TRUE(contains(seeds.out, "'2x' is not a whole number")) << seeds.out;

  const std::string empty = std::string(VITPE_BINARY_DIR) + "/cli_empty_labels.txt";
  { std::ofstream(empty) << ""; }
  CmdResult labels = vitpe("info --labels " + empty + " vit-fmnist");
  EXPECT_NE(labels.code, 0) << labels.out;
  EXPECT_TRUE(contains(labels.out, "is empty")) << labels.out;
  std::filesystem::remove(empty);
}

// --threads is bounded (100000 once crashed OpenMP's runtime) and says what it accepts.
TEST(Cli, ThreadsAreBounded) {
  for (const char* args : {"--threads 100000 info vit-fmnist", "train --threads 100000 --epochs 1",
                           "--threads -1 info vit-fmnist"}) {
    CmdResult r = vitpe(args);
    EXPECT_NE(r.code, 0) << args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "--threads")) << args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "1024")) << args << "\n" << r.out;
  }
  EXPECT_EQ(vitpe("--threads 2 info vit-fmnist").code, 0);
}

// NaN weights once printed "-nan%" with exit 0: now each such image is an error.
TEST(Cli, NonFiniteLogitsAreAnErrorPerImage) {
  auto model = vitpe::make_model(vitpe::preset("vit-fmnist"), 1);
  for (vitpe::Param* p : model->params()) {
    if (p->name == "head.weight") p->value.fill(std::nanf(""));
  }
  const std::string path = std::string(VITPE_BINARY_DIR) + "/cli_nan.safetensors";
  vitpe::save_model(*model, path);
  CmdResult r = vitpe("classify --model " + path + " " + data("images/gray_40x52.png"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "logits are not finite")) << r.out;
  EXPECT_FALSE(contains(r.out, "nan%")) << r.out;
  std::filesystem::remove(path);
}

// classify --json once lost all its output when one path or label was not UTF-8: the dump threw
// json type_error.316 after every image was classified (exit 1, naming neither). Bytes that are
// not UTF-8 are now written \xNN and the rest is written as it was; text output also escapes
// control characters, so a label cannot drive the terminal.
TEST(Cli, ClassifyOutputIsUtf8SafeAndEscapesControlCharacters) {
  const std::filesystem::path dir = std::filesystem::path(VITPE_BINARY_DIR) / "cli_utf8";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string latin1 = (dir / "caf\xe9.png").string();
  const std::string plain = (dir / "plain.png").string();
  std::filesystem::copy_file(data("images/gray_40x52.png"), latin1);
  std::filesystem::copy_file(data("images/gray_40x52.png"), plain);
  const std::string labels = (dir / "labels.txt").string();
  {
    std::ofstream out(labels);
    out << "T-shirt\xff\n\x1b[31mred\x1b[0m\n";
    for (int i = 2; i < 10; ++i) out << "class" << i << "\n";
  }
  const std::string args =
      "classify --model vit-fmnist --topk 10 --labels " + labels + " '" + latin1 + "' " + plain;
  const CmdResult j = vitpe(args + " --json", "2>/dev/null");
  EXPECT_EQ(j.code, 0) << j.out;
  nlohmann::json parsed;
  ASSERT_NO_THROW(parsed = nlohmann::json::parse(j.out)) << j.out;
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0]["image"], (dir / "caf").string() + "\\xe9.png");
  EXPECT_TRUE(contains(parsed[0]["note"].get<std::string>(), "not valid UTF-8"));
  EXPECT_EQ(parsed[1]["image"], plain);
  EXPECT_FALSE(parsed[1].contains("note"));
  std::vector<std::string> names;
  for (const auto& t : parsed[1]["top"]) names.push_back(t["label"]);
  ASSERT_EQ(names.size(), 10u);
  EXPECT_NE(std::find(names.begin(), names.end(), "T-shirt\\xff"), names.end());
  // Valid UTF-8 with control characters stays as it is in JSON (the writer escapes them).
  EXPECT_NE(std::find(names.begin(), names.end(), "\x1b[31mred\x1b[0m"), names.end());

  const CmdResult text = vitpe(args, "2>/dev/null");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(contains(text.out, "caf\\xe9.png")) << text.out;
  EXPECT_TRUE(contains(text.out, "T-shirt\\xff")) << text.out;
  EXPECT_TRUE(contains(text.out, "\\x1b[31mred\\x1b[0m")) << text.out;
  EXPECT_FALSE(contains(text.out, "\x1b")) << text.out;
  std::filesystem::remove_all(dir);
}

// --topk's range was printed as "0.000000 to 1.797e308".
TEST(Cli, TopkSaysAWholeNumberFromOne) {
  for (const char* bad : {"0", "1.5", "zero"}) {
    const CmdResult r = vitpe(std::string("classify --model vit-fmnist --topk ") + bad + " " +
                              data("images/gray_40x52.png"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, std::string("--topk: '") + bad +
                                    "' is not a whole number from 1 to the class count"))
        << r.out;
    EXPECT_FALSE(contains(r.out, "1.797")) << r.out;
  }
}

TEST(Cli, BadFlagSaysWhat) {
  CmdResult r = vitpe("classify --model vit-fmnist --topk zero x.png");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.out, "--topk")) << r.out;
  CmdResult s = vitpe("frobnicate");
  EXPECT_NE(s.code, 0);
  EXPECT_TRUE(contains(s.out, "frobnicate")) << s.out;
  CmdResult t = vitpe("train --no-flip --no-augment --epochs 1");
  EXPECT_NE(t.code, 0);
  EXPECT_TRUE(contains(t.out, "excludes") && contains(t.out, "--no-flip") &&
              contains(t.out, "--no-augment"))
      << t.out;
}

// One exit-code scheme (the --help footer): 0 success, 1 failure, 2 usage error. CLI11's own
// codes (105, 106, 109, ...) once leaked through; bare `vitpe` once printed only an error.
TEST(Cli, ExitCodesFollowOneScheme) {
  CmdResult bare = vitpe("");
  EXPECT_EQ(bare.code, 0) << bare.out;
  EXPECT_TRUE(contains(bare.out, "classify") && contains(bare.out, "Exit codes:")) << bare.out;
  EXPECT_EQ(vitpe("--help").code, 0);
  EXPECT_EQ(vitpe("--version").code, 0);
  EXPECT_EQ(vitpe("info vit-fmnist").code, 0);
  const std::string image = data("images/rgb_67x45.png");
  for (const std::string& usage : std::vector<std::string>{
           std::string("frobnicate"), std::string("classify"),                  // unknown, missing
           "classify --model vit-fmnist --topk 0 " + image,                     // out of range
           "classify --model vit-fmnist --topk zero " + image,                  // not a number
           "info vit-fmnist --no-such-flag", "info vit-fmnist extra-argument",  // unknown, extra
           "--threads abc info vit-fmnist", "eval --model vit-fmnist --sizes 0",  // bad values
           "encodings list --bogus", "classify --model vit-fmnist --crop-mode border " + image}) {
    CmdResult r = vitpe(usage);
    EXPECT_EQ(r.code, 2) << usage << "\n" << r.out;
  }
  for (const std::string& failure : std::vector<std::string>{
           "info " + data("no-such-file.safetensors"),            // unreadable file
           "classify --model vit-fmnist " + data("no-such.png"),  // an image that failed
           std::string("info vit_smal_patch16_224")}) {           // not a file, not a preset
    CmdResult r = vitpe(failure);
    EXPECT_EQ(r.code, 1) << failure << "\n" << r.out;
  }
}

// --json on info, eval, bench and encodings list: one JSON document on stdout, nothing else.
TEST(Cli, JsonOutputsParse) {
  const auto info = json_of("info --json vit_small_patch16_224");
  EXPECT_EQ(info["config"]["crop_pct"], 0.9);
  EXPECT_EQ(info["parameters"], 22050664);
  EXPECT_EQ(info["family"], "ViT");
  // DeiT-III: timm's count for deit3_small_patch16_224 (no class row, 2 x 12 x 384 gammas).
  const auto deit3 = json_of("info --json deit3_small_patch16_224");
  EXPECT_EQ(deit3["family"], "DeiT-III");
  EXPECT_EQ(deit3["parameters"], 22059496);
  const auto kinds = json_of("encodings list --json");
  ASSERT_TRUE(kinds.is_array());
  EXPECT_EQ(kinds[0]["kind"], "none");
  EXPECT_GE(kinds.size(), 9u);
  const auto eval = json_of("eval --json --model vit-fmnist --dataset fashion-mnist --subset 40");
  ASSERT_EQ(eval["results"].size(), 1u);
  EXPECT_EQ(eval["results"][0]["images"], 40);
  if (kBench) {
    const auto bench = json_of("bench --json --model vit-fmnist --batch 1,2 --reps 2");
    ASSERT_EQ(bench["results"].size(), 2u);
    EXPECT_GT(bench["results"][1]["img_per_s"].get<double>(), 0);
  }
}

// `eval --dataset folder:DIR` renders the photos with the model's own transform (here the
// bundled model's: 28 px gray, Fashion-MNIST statistics), one class per subfolder.
TEST(Cli, EvalOnAFolderUsesTheModelsTransform) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("vitpe_cli_folder_" + std::to_string(::getpid()));
  for (int c = 0; c < 10; ++c) {
    const auto sub = dir / ("class" + std::to_string(c));
    std::filesystem::create_directories(sub);
    std::filesystem::copy_file(data("images/gray_40x52.png"), sub / "1.png");
  }
  // The folders are not named as the model's classes ('T-shirt/top' cannot be a folder name).
  CmdResult r = vitpe("eval --model " + std::string(VITPE_SOURCE_DIR) +
                      "/models/vit-fmnist.safetensors --dataset folder:" + dir.string() +
                      " --no-progress --classes-by-index");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, ": the model's transform: bicubic resize to size / crop_pct 1"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "      10")) << r.out;  // ten images evaluated
  std::filesystem::remove_all(dir);
}

// `eval` compares a folder's classes with the model's recorded names before evaluating: a model
// trained on {a,b,c} meets a folder {a,c,d} with an error naming both differences (it would
// otherwise report 33 % with exit 0); --classes-by-index matches them by position with a note;
// the folder the model was trained on passes without one. (The folders' path is not UTF-8:
// training records it, and --json prints it, with the bytes escaped.)
TEST(Cli, EvalComparesTheFoldersClassesWithTheModels) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("vitpe_cli_classes_\xe4_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (const char* split : {"train", "test"}) {
    for (const char* cls : {"a", "b", "c"}) {
      fs::create_directories(dir / "data" / split / cls);
      fs::copy_file(data("images/gray_40x52.png"), dir / "data" / split / cls / "1.png");
      fs::copy_file(data("images/gray_40x52.png"), dir / "data" / split / cls / "2.png");
    }
  }
  for (const char* cls : {"a", "c", "d"}) {
    fs::create_directories(dir / "other" / cls);
    fs::copy_file(data("images/gray_40x52.png"), dir / "other" / cls / "1.png");
  }
  CmdResult r = vitpe("train --dataset folder:" + (dir / "data").string() +
                      " --size 16 --set patch=4 --set depth=1 --set dim=16 --set heads=2 "
                      "--set mlp_dim=16 --epochs 1 --batch 3 --no-progress --out " +
                      (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string model = (dir / "run" / "model.safetensors").string();
  r = vitpe("eval --no-progress --model " + model +
            " --dataset folder:" + (dir / "other").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "only in the model: 'b'; only in the dataset folder: 'd'")) << r.out;
  EXPECT_TRUE(contains(r.out, "pass --classes-by-index")) << r.out;
  EXPECT_FALSE(contains(r.out, "%")) << r.out;
  r = vitpe("eval --no-progress --classes-by-index --model " + model +
            " --dataset folder:" + (dir / "other").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "note: class names not compared (--classes-by-index)")) << r.out;
  r = vitpe("eval --no-progress --model " + model + " --dataset folder:" + (dir / "data").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(contains(r.out, "note:")) << r.out;
  const auto j =
      json_of("eval --json --model " + model + " --dataset folder:" + (dir / "data").string());
  EXPECT_NE(j.value("dataset", "").find("vitpe_cli_classes_\\xe4_"), std::string::npos) << j;
  fs::remove_all(dir);
}

// --policy: every policy asked for is evaluated at each size other than the trained one (the
// trained size once), with the rule each kind followed; an unknown word is a usage error.
TEST(Cli, EvalUnderEachExtensionPolicy) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("vitpe_cli_policy_" + std::to_string(::getpid()));
  for (int c = 0; c < 10; ++c) {
    const auto sub = dir / ("class" + std::to_string(c));
    std::filesystem::create_directories(sub);
    std::filesystem::copy_file(data("images/gray_40x52.png"), sub / "1.png");
  }
  const std::string model = std::string(VITPE_SOURCE_DIR) + "/models/vit-fmnist.safetensors";
  CmdResult r = vitpe("eval --model " + model + " --dataset folder:" + dir.string() +
                      " --sizes 28,36 --policy interpolate,extrapolate,center,ntk --json "
                      "--no-progress --classes-by-index");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const auto& res = j.at("results");
  ASSERT_EQ(res.size(), 5u) << r.out;
  EXPECT_EQ(res[0].at("policy"), "trained size");
  const char* policies[] = {"interpolate", "extrapolate", "centre", "ntk"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(res[i + 1].at("policy"), policies[i]);
    EXPECT_EQ(res[i + 1].at("extension_rules"), std::string("sincos2d ") + policies[i]);
    for (int k = 0; k < i; ++k)  // four different models at 36 px
      EXPECT_NE(res[i + 1].at("loss").get<double>(), res[k + 1].at("loss").get<double>())
          << policies[i] << " against " << policies[k];
  }

  r = vitpe("eval --model " + model + " --dataset folder:" + dir.string() + " --policy nearest");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--policy: unknown extension policy 'nearest'")) << r.out;
  r = vitpe("compare --quick --out " + (dir / "study").string() + " --policy ,");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--policy: give at least one of native, interpolate, extrapolate"))
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "study" / "runs"));
  // The published studies: names checked, and not mixed with --quick.
  r = vitpe("compare --study resolution --out " + (dir / "study").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "resolution-procedural")) << r.out;
  r = vitpe("compare --quick --study resolution-fmnist --out " + (dir / "study").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--quick and --study are two sets of settings")) << r.out;
  r = vitpe("compare --quick --protocol stretch --out " + (dir / "study").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "unknown resolution protocol 'stretch'")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "study" / "runs"));
  std::filesystem::remove_all(dir);
}

TEST(Cli, ClassifyReportsUnreadableImagesAndClassifiesTheRest) {
  CmdResult r = vitpe("classify --model vit-fmnist --topk 2 " + data("images/gray_40x52.png") +
                      " /nonexistent/picture.png");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "/nonexistent/picture.png")) << r.out;
  EXPECT_TRUE(contains(r.out, "gray_40x52.png\n  1. ")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 of 2 images could not be classified")) << r.out;
}

TEST(Cli, ClassifyJsonOfATimmCheckpoint) {
  CmdResult r = vitpe("classify --json --heads 4 --model " + data("vit_timm.safetensors") + " " +
                      data("images/rgb_67x45.png") + " " + data("images/rgba_50x50.png"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "\"probability\"")) << r.out;
  EXPECT_TRUE(contains(r.out, "rgba_50x50.png")) << r.out;
}

// `info` prints the transform the model carries; the preprocessing flags override it and a
// converted file keeps it (here torchvision Swin-T's: resize 232 of 224, bicubic).
TEST(Cli, InfoShowsThePreprocessingAndFlagsOverrideIt) {
  CmdResult r = vitpe("info vit_small_patch16_224");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "bicubic resize to shorter side / crop_pct 0.9 (center), crop 224 x "
                       "224, mean 0.5,0.5,0.5, std 0.5,0.5,0.5"))
      << r.out;
  r = vitpe(
      "info vit_small_patch16_224 --crop-pct 1 --crop-mode squash --interpolation bilinear "
      "--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "bilinear resize to size / crop_pct 1 (squash), crop 224 x 224, "
                       "mean 0.485,0.456,0.406, std 0.229,0.224,0.225"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "preprocessing overridden by the command line")) << r.out;
  r = vitpe("info vit_small_patch16_224 --mean 0.5,x,0.5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--mean: 'x' is not a number")) << r.out;
  r = vitpe("info vit_small_patch16_224 --std 0.5,0.5");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "mean/std need 3 values")) << r.out;
  r = vitpe("info vit_smal_patch16_224");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "did you mean vit_small_patch16_224")) << r.out;

  const std::string out = std::string(VITPE_BINARY_DIR) + "/cli_tv_swin.safetensors";
  CmdResult conv = vitpe("convert --img-size 56 " + data("swin_tv.safetensors") + " " + out);
  EXPECT_EQ(conv.code, 0) << conv.out;
  r = vitpe("info " + out);
  EXPECT_TRUE(contains(r.out, "bicubic resize to shorter side / crop_pct 0.965517")) << r.out;
  std::filesystem::remove(out);
}

TEST(Cli, InfoAndConvertRoundTrip) {
  CmdResult info = vitpe("info --img-size 56 " + data("swin_timm_old.safetensors"));
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_TRUE(contains(info.out, "timm Swin (< 0.9")) << info.out;
  EXPECT_TRUE(contains(info.out, "window 7")) << info.out;

  const std::string out = std::string(VITPE_BINARY_DIR) + "/cli_converted.safetensors";
  CmdResult conv = vitpe("convert --img-size 56 " + data("swin_tv.safetensors") + " " + out);
  EXPECT_EQ(conv.code, 0) << conv.out;
  CmdResult again = vitpe("info " + out);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "config from the checkpoint's metadata")) << again.out;
  EXPECT_TRUE(contains(again.out, "written by    vitpe " VITPE_PROJECT_VERSION)) << again.out;
  std::filesystem::remove(out);
}

// One version everywhere: --version, `vitpe info` and CMake's project() (which also writes the
// installed package's version file; the consumer example checks that side).
TEST(Cli, VersionIsTheProjectVersion) {
  CmdResult r = vitpe("--version");
  EXPECT_EQ(r.code, 0) << r.out;
  // The version, then the data folder: this build's (the command is not installed), then the
  // MPI it was built with (or none).
  const std::string head =
      "vitpe " VITPE_PROJECT_VERSION "\ndata folder: " VITPE_BINARY_DIR "/share/vitpe\nMPI: ";
  EXPECT_EQ(r.out.substr(0, head.size()), head) << r.out;
  EXPECT_GT(r.out.size(), head.size() + 2) << r.out;
  EXPECT_EQ(r.out.back(), '\n') << r.out;
  CmdResult info = vitpe("info vit-fmnist");
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_TRUE(contains(info.out, "read by       vitpe " VITPE_PROJECT_VERSION)) << info.out;
  EXPECT_FALSE(contains(info.out, "written by")) << "a preset has no writer\n" << info.out;
}

TEST(Cli, TruncatedCheckpointIsAnErrorNamingTheFile) {
  const std::string path = std::string(VITPE_BINARY_DIR) + "/cli_truncated.safetensors";
  std::filesystem::copy_file(data("vit_tv.safetensors"), path,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(path, 5000);
  CmdResult r = vitpe("info " + path);
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.out, "cli_truncated.safetensors")) << r.out;
  std::filesystem::remove(path);
}

TEST(Cli, UnknownEncodingListsTheKnownOnes) {
  CmdResult r = vitpe("encodings show --encoding sincos3d --grid 4x4 --dim 16 --out " +
                      std::string(VITPE_BINARY_DIR) + "/cli_pictures");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.out, "sincos3d")) << r.out;
  EXPECT_TRUE(contains(r.out, "rope-mixed")) << r.out;
}

// `encodings list` shows each kind's rule for other grids (read from the registry).
TEST(Cli, EncodingsListSaysHowEachKindExtends) {
  CmdResult r = vitpe("encodings list");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"learned1d    interpolate", "relbias      interpolate",
                           "sincos2d     extrapolate", "rope-mixed   extrapolate",
                           "peg          none         computed from the tokens at any grid"})
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
}

TEST(Cli, ClassifyInEmulatedBf16AndBf16OrWhyNot) {
  const std::string img = data("images/gray_40x52.png");
  CmdResult e = vitpe("classify --model vit-fmnist --precision bf16-emulated " + img);
  EXPECT_EQ(e.code, 0) << e.out;
  EXPECT_TRUE(contains(e.out, "gray_40x52.png\n  1. ")) << e.out;
  CmdResult b = vitpe("classify --model vit-fmnist --precision bf16 " + img);
  if (b.code != 0) {  // a CPU without bf16 matmul: the message says what to use instead
    EXPECT_TRUE(contains(b.out, "bf16-emulated")) << b.out;
  }
  CmdResult bad = vitpe("classify --model vit-fmnist --precision fp16 " + img);
  EXPECT_NE(bad.code, 0);
  EXPECT_TRUE(contains(bad.out, "--precision")) << bad.out;
}

TEST(Cli, ClassifyAndBenchInInt8) {
  const std::string img = data("images/gray_40x52.png");
  CmdResult f = vitpe("classify --model vit-fmnist --topk 1 " + img);
  CmdResult q = vitpe("classify --model vit-fmnist --topk 1 --precision int8 " + img);
  EXPECT_EQ(q.code, 0) << q.out;
  // The same class first (the probabilities differ a little).
  const std::string top = f.out.substr(f.out.find("1. "), 12);
  EXPECT_TRUE(contains(q.out, top)) << top << "\n" << q.out;
  EXPECT_TRUE(contains(vitpe("classify --help").out, "int8")) << "help lists int8";
  CmdResult gpu = vitpe("classify --model vit-fmnist --device cuda --precision int8 " + img);
  EXPECT_EQ(gpu.code, 2) << gpu.out;
  EXPECT_TRUE(contains(gpu.out, "int8 is a CPU mode")) << gpu.out;
  if (!kBench) return;
  CmdResult b = vitpe("bench --model vit-fmnist --batch 2 --reps 1 --precision int8");
  EXPECT_EQ(b.code, 0) << b.out;
  EXPECT_TRUE(contains(b.out, "int8 linears")) << b.out;
  EXPECT_TRUE(contains(b.out, "max |logit - f32 logit| / max |f32 logit|")) << b.out;
}

TEST(Cli, CompareRecordsTheCommandAsTyped) {
  const auto out = std::filesystem::temp_directory_path() / "vitpe_cli_compare";
  std::filesystem::remove_all(out);
  CmdResult r = vitpe(
      "compare --quick --encodings none,sincos2d --set depth=1 --set dim=32 --set heads=2 "
      "--set mlp_dim=32 --subset 128 --test-subset 32 --epochs 1 --eval-sizes 28,36 "
      "--no-flip --no-pictures --no-progress --out " +
      out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* file : {"results.json", "results.csv", "report.html"})
    EXPECT_TRUE(std::filesystem::exists(out / file)) << file;
  std::ifstream in(out / "results.json");
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Repeated options stay repeated and flags carry no value: the line reruns the comparison.
  EXPECT_TRUE(contains(json, "--set depth=1 --set dim=32 --set heads=2 --set mlp_dim=32"))
      << json.substr(0, 2000);
  EXPECT_TRUE(contains(json, "--no-flip --no-pictures --no-progress --out"))
      << json.substr(0, 2000);
  // The procedural set pads by nothing: its training samples are not cropped, and say so.
  EXPECT_TRUE(contains(json, "no crop (padding 0), no flips")) << json.substr(0, 2000);
  std::filesystem::remove_all(out);
}

TEST(Cli, CompareChecksEvaluationSizesBeforeTraining) {
  // The quick settings' 42 px canvas does not hold whole 4-pixel patches: said at once.
  const auto out = std::filesystem::temp_directory_path() / "vitpe_cli_compare_sizes";
  CmdResult r = vitpe("compare --quick --set depth=1 --eval-sizes 28,42 --out " + out.string());
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.out, "evaluation size 42 is not a positive multiple of the patch size 4"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "epoch 1/")) << r.out;
  // Non-square sizes are rows x cols, each side checked; a bad item is a usage error.
  r = vitpe("compare --quick --set depth=1 --eval-sizes 28,44x42 --out " + out.string());
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.out,
                       "evaluation size 44x42: 42 px is not a positive multiple of the "
                       "patch size 4"))
      << r.out;
  r = vitpe("compare --quick --set depth=1 --eval-sizes 28,44x4q --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.out, "--eval-sizes")) << r.out;
  EXPECT_FALSE(contains(r.out, "epoch 1/")) << r.out;
  std::filesystem::remove_all(out);
}

// `vitpe report` draws a comparison's report again from its results.json alone (here the
// committed quadrant study), refuses to overwrite without --force, and says what a bad file is.
TEST(Cli, ReportIsRenderedAgainFromResultsJson) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("vitpe_cli_report_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string results = std::string(VITPE_SOURCE_DIR) + "/docs/results/quadrant/results.json";
  const std::string html = (dir / "r.html").string(), csv = (dir / "r.csv").string();
  CmdResult r = vitpe("report " + results + " --out " + html + " --csv " + csv);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "12 runs (6 encodings x 2 seeds)")) << r.out;
  std::ifstream f(html);
  const std::string page((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(page, "<html")) << page.substr(0, 200);
  EXPECT_TRUE(contains(page, "rope-axial"));
  EXPECT_TRUE(contains(page, "rendered again by"));
  EXPECT_TRUE(fs::file_size(csv) > 100u);

  r = vitpe("report " + results + " --out " + html);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "exists; --force replaces it")) << r.out;
  EXPECT_EQ(vitpe("report " + results + " --out " + html + " --force").code, 0);

  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\"title\": \"x\"}";
  r = vitpe("report " + bad + " --out " + (dir / "b.html").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "expected the results.json `vitpe compare` writes")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "b.html"));
  r = vitpe("report " + (dir / "missing.json").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "found no file")) << r.out;
  // A hostile file is refused while it is read, by the bounded reader.
  std::ofstream(bad, std::ios::trunc) << std::string(40, '[') << std::string(40, ']');
  r = vitpe("report " + bad + " --out " + (dir / "b.html").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "nests deeper than 8 levels")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "b.html"));
  fs::remove_all(dir);
}

// Several results.json make one report: their runs merged (with --tag the same kinds from two
// files stay apart as KIND@TAG), only when their columns agree; the pictures a results.json lists
// are linked from wherever the report goes, and those whose files are gone are said to be.
TEST(Cli, ReportMergesSeveralResultsAndLinksTheirPictures) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("vitpe_cli_merge_" + std::to_string(::getpid()));
  fs::create_directories(dir / "a" / "pictures" / "rope-axial");
  fs::create_directories(dir / "out");
  std::ifstream in(std::string(VITPE_SOURCE_DIR) + "/docs/results/quadrant/results.json");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
  j["pictures"] = {
      {{"encoding", "rope-axial"}, {"caption", "phase"}, {"file", "pictures/rope-axial/phase.png"}},
      {{"encoding", "rope-axial"}, {"caption", "gone"}, {"file", "pictures/rope-axial/gone.png"}}};
  j["primary"] = {"rope-axial vs none @ 42"};
  const std::string a = (dir / "a" / "results.json").string();
  std::ofstream(a) << j.dump(1);
  std::ofstream(dir / "a" / "pictures" / "rope-axial" / "phase.png") << "png";
  const std::string b = (dir / "b.json").string();
  std::ofstream(b) << j.dump(1);

  const std::string html = (dir / "out" / "r.html").string();
  const std::string merged = (dir / "merged.json").string();  // not beside the report
  CmdResult r = vitpe("report " + a + " " + b + " --tag fixed,scale --out " + html +
                      " --title 'Two regimes' --json " + merged);
  ASSERT_EQ(r.code, 0) << r.out;
  // --json: the merged results as one results.json, its contrasts tested over the tagged runs;
  // read back, it is the same study.
  {
    std::ifstream mf(merged);
    const nlohmann::ordered_json m = nlohmann::ordered_json::parse(mf);
    EXPECT_EQ(m.at("runs").size(), 24u);
    ASSERT_EQ(m.at("primary_contrasts").size(), 2u);
    EXPECT_EQ(m["primary_contrasts"][1]["contrast"], "rope-axial@scale vs none@scale @ 42");
    EXPECT_EQ(m["primary_contrasts"][1]["pairs"], 2);
    EXPECT_TRUE(m["primary_contrasts"][1]["testable"].get<bool>());
  }
  // Its pictures are linked from its own folder: a report drawn from it elsewhere finds them.
  CmdResult again = vitpe("report " + merged + " --out " + (dir / "again.html").string());
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_FALSE(contains(again.out, "listed in the results are missing")) << again.out;
  {
    std::ifstream af(dir / "again.html");
    const std::string page2((std::istreambuf_iterator<char>(af)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(page2, "src=\"a/pictures/rope-axial/phase.png\"")) << page2.size();
  }
  // Never over an input, never over an existing file without --force.
  CmdResult same = vitpe("report " + a + " --out " + (dir / "s.html").string() + " --json " + a);
  EXPECT_EQ(same.code, 2);
  EXPECT_TRUE(contains(same.out, "is one of the results.json read")) << same.out;
  CmdResult exists =
      vitpe("report " + a + " --out " + (dir / "s.html").string() + " --json " + merged);
  EXPECT_EQ(exists.code, 1);
  EXPECT_TRUE(contains(exists.out, "exists; --force replaces it")) << exists.out;
  EXPECT_TRUE(contains(r.out, "24 runs (12 encodings x 2 seeds)")) << r.out;
  EXPECT_TRUE(contains(r.out, "listed in the results are missing")) << r.out;
  std::ifstream f(html);
  const std::string page((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(page, "Two regimes"));
  EXPECT_TRUE(contains(page, "rope-axial@fixed"));
  EXPECT_TRUE(contains(page, "rope-axial@scale"));
  // Linked from the report's folder to the file beside the first results.json; the missing one
  // left out, and so is the second file's (it has no pictures folder).
  EXPECT_TRUE(contains(page, "src=\"../a/pictures/rope-axial/phase.png\"")) << page.size();
  EXPECT_FALSE(contains(page, "gone.png"));
  EXPECT_TRUE(contains(page, "merged from"));
  // Each file's declared contrast follows its tag (once each).
  EXPECT_TRUE(contains(page, "<td>rope-axial@fixed vs none@fixed @ 42</td>")) << page.size();
  EXPECT_TRUE(contains(page, "<td>rope-axial@scale vs none@scale @ 42</td>")) << page.size();
  EXPECT_TRUE(contains(page, "Holm over 2")) << page.size();

  // The same runs twice without tags, several files without --out, columns that differ: refused.
  r = vitpe("report " + a + " " + b + " --out " + (dir / "x.html").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "--tag names each file's runs apart")) << r.out;
  r = vitpe("report " + a + " " + b);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.out, "give --out")) << r.out;
  r = vitpe("report " + a + " " + b + " --tag x --out " + (dir / "x.html").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.out, "one tag per results.json (2), found 1")) << r.out;
  j["sizes"][1] = j["sizes"][1].get<int64_t>() + 4;
  j.erase("primary");  // its column is gone with the size
  std::ofstream(b, std::ios::trunc) << j.dump(1);
  r = vitpe("report " + a + " " + b + " --tag p,q --out " + (dir / "x.html").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "has other sizes than the first results.json")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "x.html"));
  fs::remove_all(dir);
}

}  // namespace
