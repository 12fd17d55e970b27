// write_file_atomic: new and replaced contents read back byte for byte; a failed write (target
// is a folder, folder missing) leaves no temporary file, keeps what was there, and names PATH.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ops/files.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(VITPE_BINARY_DIR) / "files_test" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  std::vector<std::string> entries() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

TEST_F(FilesTest, WritesPiecesInOrderAndReplaces) {
  const fs::path p = dir_ / "a.bin";
  const uint64_t n = 0x0102030405060708ull;
  const std::string tail("xyz\0w", 5);
  write_file_atomic(p.string(), {ByteSpan{&n, 8}, ByteSpan{tail.data(), tail.size()}});
  std::string want(reinterpret_cast<const char*>(&n), 8);
  EXPECT_EQ(read(p), want + tail);
  write_file_atomic(p.string(), "second");
  EXPECT_EQ(read(p), "second");
  write_file_atomic(p.string(), "");
  EXPECT_EQ(read(p), "");
  EXPECT_EQ(entries(), std::vector<std::string>{"a.bin"});
}

TEST_F(FilesTest, FailedRenameKeepsTheTargetAndRemovesTheTemporary) {
  const fs::path target = dir_ / "taken";
  fs::create_directories(target / "inside");
  try {
    write_file_atomic(target.string(), "data");
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rename"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"taken"});
  EXPECT_TRUE(fs::is_directory(target / "inside"));
}

TEST_F(FilesTest, MissingFolderNamesThePathAndTheReason) {
  const fs::path p = dir_ / "no" / "such" / "x.txt";
  try {
    write_file_atomic(p.string(), "data");
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "no"));
}

}  // namespace
}  // namespace vitpe
