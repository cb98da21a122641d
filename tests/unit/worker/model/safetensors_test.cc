#include "worker/model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

std::string Floats(std::vector<float> values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A file made of a raw header and data, for cases the writer would never produce.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  const uint64_t size = header.size();
  std::memcpy(file.data(), &size, 8);
  return file + header + data;
}

absl::StatusOr<std::vector<SafetensorsTensor>> Parse(const std::string& file) {
  return ParseSafetensors("test.safetensors", reinterpret_cast<const unsigned char*>(file.data()),
                          file.size());
}

void ExpectInvalid(const std::string& file, const std::string& fragment) {
  const auto parsed = Parse(file);
  ASSERT_FALSE(parsed.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find(fragment), absl::string_view::npos)
      << parsed.status().message();
  EXPECT_NE(parsed.status().message().find("test.safetensors"), absl::string_view::npos);
}

TEST(SafetensorsTest, WriterOutputParsesBack) {
  SafetensorsWriter writer;
  writer.Add("b", "F32", {2, 2}, Floats({1, 2, 3, 4}));
  writer.Add("a", "F16", {3}, std::string(6, '\x01'));
  writer.Add("empty", "F32", {0, 4}, "");
  writer.SetMetadata("format", "pt");
  const std::string file = writer.Serialize();
  EXPECT_EQ((file.size() - 8 - 6 - 16) % 8, 0u);  // header padded to 8 bytes
  const auto parsed = Parse(file);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 3u);
  const SafetensorsTensor& b = (*parsed)[1];
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.dtype, "F32");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b.NumElements(), 4);
  float values[4];
  std::memcpy(values, b.data, 16);
  EXPECT_EQ(values[3], 4.0f);
}

TEST(SafetensorsTest, RejectsBrokenFiles) {
  ExpectInvalid("1234", "shorter than the 8-byte header length");
  std::string huge(8, '\0');
  huge[6] = 1;  // 2^48-ish header length
  ExpectInvalid(huge + "{}", "exceeds the limit");
  std::string too_long = RawFile("{}", "");
  too_long[0] = 50;
  ExpectInvalid(too_long, "exceeds the file");
  ExpectInvalid(RawFile("{not json", ""), "not valid JSON");
  ExpectInvalid(RawFile("[1,2]", ""), "not a JSON object");
  ExpectInvalid(RawFile(R"({"t": 5})", ""), "tensor 't' is not an object");
  ExpectInvalid(RawFile(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})", "abcd"),
                "tensor 't' has no string 'dtype'");
  ExpectInvalid(RawFile(R"({"t": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}})", "abcd"),
                "unknown dtype 'Q4'");
  ExpectInvalid(
      RawFile(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd"),
      "not a non-negative integer");
  ExpectInvalid(RawFile(R"({"t": {"dtype": "F32", "data_offsets": [0, 4]}})", "abcd"),
                "no array 'shape'");
  ExpectInvalid(RawFile(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "abcd"),
                "'data_offsets' as two non-negative integers");
  ExpectInvalid(RawFile(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", "abcd"),
                "outside the data section");
  ExpectInvalid(RawFile(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "abcd"),
                "needs 8 bytes but data_offsets span 4");
  ExpectInvalid(
      RawFile(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}})",
              "abcd"),
      "unknown field 'extra'");
  ExpectInvalid(RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                        R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                        "abcdefgh"),
                "overlaps");
  ExpectInvalid(
      RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", "abcdefgh"),
      "bytes [0, 4) of the data section belong to no tensor");
  ExpectInvalid(
      RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "abcdefgh"),
      "bytes [4, 8) of the data section belong to no tensor");
  ExpectInvalid(RawFile(R"({"__metadata__": {"k": 1}})", ""), "__metadata__ 'k' is not a string");
  ExpectInvalid(RawFile(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296, 65536],)"
                        R"( "data_offsets": [0, 4]}})",
                        "abcd"),
                "impossibly large shape");
}

TEST(SafetensorsTest, EmptyHeaderIsAValidEmptyFile) {
  const auto parsed = Parse(RawFile("{}", ""));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->empty());
}

TEST(SafetensorsTest, OpenMapsAFileAndFindsTensors) {
  const ::llmserve::testing::ScopedTempDir temp;
  const std::string path = temp.File("open_test.safetensors");
  SafetensorsWriter writer;
  writer.Add("w", "BF16", {2}, std::string("\x80\x3f\x00\x40", 4));
  ASSERT_TRUE(writer.WriteFile(path).ok());
  const auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsTensor* w = (*file)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->size, 4u);
  EXPECT_EQ(w->data[1], 0x3f);
  EXPECT_EQ((*file)->Find("missing"), nullptr);
  std::filesystem::remove(path);
}

TEST(SafetensorsTest, OpenReportsMissingAndBadFiles) {
  const ::llmserve::testing::ScopedTempDir temp;
  const auto missing = SafetensorsFile::Open(temp.File("no_such.safetensors"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const auto directory = SafetensorsFile::Open(temp.path());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string path = temp.File("short.safetensors");
  std::ofstream(path) << "abc";
  const auto short_file = SafetensorsFile::Open(path);
  EXPECT_EQ(short_file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_file.status().message().find(path), absl::string_view::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace llmserve::worker
