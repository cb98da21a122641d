#include "common/base/mapped_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/scoped_temp_dir.h"

namespace llmserve {
namespace {

using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

TEST(MappedFileTest, MapsTheWholeFile) {
  testing::ScopedTempDir dir;
  const std::string contents("model\0bytes\xff", 12);
  WriteFile(dir.File("weights"), contents);
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(dir.File("weights"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size(), contents.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*file)->data()), (*file)->size()), contents);
}

TEST(MappedFileTest, AnEmptyFileHasSizeZeroAndNoData) {
  testing::ScopedTempDir dir;
  WriteFile(dir.File("empty"), "");
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(dir.File("empty"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size(), 0u);
  EXPECT_EQ((*file)->data(), nullptr);
}

TEST(MappedFileTest, AMissingFileIsNotFoundAndADirectoryIsNotARegularFile) {
  testing::ScopedTempDir dir;
  const absl::Status missing = MappedFile::Open(dir.File("missing")).status();
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(missing.message(), HasSubstr(dir.File("missing")));
  const absl::Status directory = MappedFile::Open(dir.path()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(directory)) << directory;
  EXPECT_THAT(directory.message(), HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace llmserve
