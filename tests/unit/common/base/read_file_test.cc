#include "common/base/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::common {
namespace {

using ::testing::HasSubstr;

TEST(ReadFileUpToTest, ReadsAWholeFileOfUpToTheLimit) {
  ::llmserve::testing::ScopedTempDir dir;
  const std::string contents(20000, 'k');  // more than one read's buffer
  std::ofstream(dir.File("key"), std::ios::binary) << contents;
  absl::StatusOr<std::string> read = ReadFileUpTo(dir.File("key"), contents.size(), "key file");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  std::ofstream(dir.File("empty"), std::ios::binary) << "";
  EXPECT_EQ(ReadFileUpTo(dir.File("empty"), 0, "key file").value_or("?"), "");
}

TEST(ReadFileUpToTest, ALargerFileIsRefusedNamingItAndTheLimit) {
  ::llmserve::testing::ScopedTempDir dir;
  std::ofstream(dir.File("key"), std::ios::binary) << "12345";
  absl::StatusOr<std::string> read = ReadFileUpTo(dir.File("key"), 4, "key file");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(),
              HasSubstr("key file " + dir.File("key") + " is larger than 4 bytes"));
}

TEST(ReadFileUpToTest, AnEndlessDeviceIsRefusedAfterTheLimit) {
  absl::StatusOr<std::string> read = ReadFileUpTo("/dev/zero", 1 << 20, "PEM file");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("/dev/zero is larger than 1048576 bytes"));
}

TEST(ReadFileUpToTest, AMissingFileADirectoryAndAFifoWithoutWriterEndAtOnce) {
  ::llmserve::testing::ScopedTempDir dir;
  absl::StatusOr<std::string> missing = ReadFileUpTo(dir.File("missing"), 10, "key file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot open key file " + dir.File("missing")));
  absl::StatusOr<std::string> directory = ReadFileUpTo(dir.path(), 10, "key file");
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.status().message(), HasSubstr("is a directory"));
  // A FIFO nobody writes: an open without O_NONBLOCK would wait for a writer forever.
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  absl::StatusOr<std::string> fifo = ReadFileUpTo(dir.File("fifo"), 10, "key file");
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  EXPECT_EQ(*fifo, "");
}

}  // namespace
}  // namespace llmserve::common
