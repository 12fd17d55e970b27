// Tests of vit/io/data_files: the data folder of this build holds the bundled checkpoint and the
// class names; VITPE_DATA_DIR replaces the search; bad relative paths and missing files are
// errors that name what was searched. (The installed and packaged data folders, found from the
// library's own location, are checked by the consumer_example test.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "vit/io/checkpoint.h"
#include "vit/io/data_files.h"
#include "vit/models/model.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

const std::string kBuildData = std::string(VITPE_BINARY_DIR) + "/share/vitpe";

// Sets VITPE_DATA_DIR for one test and restores it.
class DataDirEnv {
 public:
  explicit DataDirEnv(const std::string& value) {
    if (const char* old = std::getenv("VITPE_DATA_DIR")) saved_ = old, had_ = true;
    ::setenv("VITPE_DATA_DIR", value.c_str(), 1);
  }
  ~DataDirEnv() {
    if (had_) {
      ::setenv("VITPE_DATA_DIR", saved_.c_str(), 1);
    } else {
      ::unsetenv("VITPE_DATA_DIR");
    }
  }

 private:
  std::string saved_;
  bool had_ = false;
};

TEST(DataFiles, BuildTreeHoldsTheBundledModelAndLabels) {
  ::unsetenv("VITPE_DATA_DIR");
  EXPECT_EQ(bundled_model(), kBuildData + "/models/vit-fmnist.safetensors");
  // The bundled checkpoint is the one in models/ (copied at configure time), byte for byte.
  EXPECT_EQ(fs::file_size(bundled_model()),
            fs::file_size(std::string(VITPE_SOURCE_DIR) + "/models/vit-fmnist.safetensors"));
  const LoadedModel m = load_model(bundled_model());
  EXPECT_EQ(m.model->config().labels, kFashionMnistLabels);
  // The class-name lists, one per line, as --labels reads them.
  EXPECT_EQ(read_labels(data_file("labels/imagenet-1k.txt")), imagenet_labels());
  EXPECT_EQ(read_labels(data_file("labels/fashion-mnist.txt")), kFashionMnistLabels);
}

TEST(DataFiles, EnvironmentReplacesTheSearch) {
  const fs::path dir = fs::temp_directory_path() / ("vitpe_data_" + std::to_string(::getpid()));
  fs::create_directories(dir / "labels");
  std::ofstream(dir / "labels" / "mine.txt") << "a\nb\n";
  {
    DataDirEnv env(dir.string());
    EXPECT_EQ(data_dirs(), std::vector<std::string>{dir.string()});
    EXPECT_EQ(data_file("labels/mine.txt"), (dir / "labels" / "mine.txt").string());
    // Only that folder is searched: the build tree's checkpoint is not found through it.
    try {
      bundled_model();
      ADD_FAILURE() << "expected an error";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("models/vit-fmnist.safetensors"), std::string::npos) << m;
      EXPECT_NE(m.find(dir.string()), std::string::npos) << m;
      EXPECT_NE(m.find("VITPE_DATA_DIR"), std::string::npos) << m;
    }
  }
  fs::remove_all(dir);
}

TEST(DataFiles, MissingFileNamesEveryFolderSearched) {
  ::unsetenv("VITPE_DATA_DIR");
  try {
    data_file("labels/no-such-list.txt");
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    for (const std::string& d : data_dirs()) EXPECT_NE(m.find(d), std::string::npos) << m;
  }
}

TEST(DataFiles, PathsMustStayInsideTheFolder) {
  for (const std::string bad :
       {"", "/etc/passwd", "../models/vit-fmnist.safetensors", "labels/../../x"}) {
    EXPECT_THROW(data_file(bad), std::runtime_error) << bad;
  }
}

}  // namespace
}  // namespace vitpe
