// The GGUF reader on well-formed files built by the test writer: header versions, every metadata
// value type (arrays and nested arrays included), typed lookups and their errors, alignment,
// tensor views, and opening from disk.

#include "worker/model/gguf/gguf_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/gguf_writer.h"
#include "tests/testing/parsed_gguf.h"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::worker::gguf {
namespace {

using ::llmserve::testing::GgufBytes;
using ::llmserve::testing::GgufWriter;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Parsed = ::llmserve::testing::ParsedGguf;

Parsed Parse(const std::string& bytes) {
  return ::llmserve::testing::ParseGgufBytes(bytes, "test.gguf");
}

TEST(GgufFileTest, ReadsHeaderMetadataAndTensorsOfVersion3) {
  GgufWriter writer;
  writer.AddString("general.architecture", "llama").AddU32("llama.block_count", 5);
  writer.AddF32Tensor("a", {4, 3}).AddF32Tensor("b", {5});
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  const GgufFile& file = **parsed.file;
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.data_offset() % 32, 0u);
  EXPECT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(*file.metadata().GetString("general.architecture"), "llama");
  EXPECT_EQ(*file.metadata().GetInt("llama.block_count"), 5);
  ASSERT_EQ(file.tensors().size(), 2u);
  const GgufTensor& a = file.tensors()[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.type, GgmlType::kF32);
  EXPECT_THAT(a.dims, ElementsAre(4, 3));
  EXPECT_EQ(a.num_elements, 12);
  EXPECT_EQ(a.num_rows(), 3);
  EXPECT_EQ(a.row_length(), 4);
  EXPECT_EQ(a.size, 48u);
  EXPECT_EQ(a.row_bytes(), 16u);
  EXPECT_EQ(a.data, parsed.buffer->data.get() + file.data_offset());
  float last;
  std::memcpy(&last, a.data + 44, 4);
  EXPECT_EQ(last, 11.0f);
  const GgufTensor& b = file.tensors()[1];
  EXPECT_EQ(b.offset, 64u);  // 48 bytes, padded to 32
  EXPECT_EQ(file.FindTensor("b"), &b);
  EXPECT_EQ(file.FindTensor("c"), nullptr);
  EXPECT_EQ(*file.GetTensor("a"), &a);
  EXPECT_EQ(file.GetTensor("c").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.GetTensor("c").status().message(), HasSubstr("'c'"));
}

TEST(GgufFileTest, ReadsVersion2) {
  GgufWriter writer;
  writer.version = 2;
  writer.AddF32Tensor("x", {8});
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  EXPECT_EQ((*parsed.file)->version(), 2u);
}

TEST(GgufFileTest, MetadataOnlyFileNeedsNoDataSection) {
  GgufWriter writer;
  writer.AddString("general.name", "vocab only");
  const Parsed parsed = Parse(writer.BuildHeaderAndInfos());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  EXPECT_TRUE((*parsed.file)->tensors().empty());
}

TEST(GgufFileTest, HonoursGeneralAlignment) {
  GgufWriter writer;
  writer.alignment = 64;
  writer.AddU32("general.alignment", 64);
  writer.AddF32Tensor("a", {3}).AddF32Tensor("b", {3});
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  const GgufFile& file = **parsed.file;
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.data_offset() % 64, 0u);
  EXPECT_EQ(file.tensors()[1].offset, 64u);
}

TEST(GgufFileTest, ReadsEveryScalarType) {
  GgufWriter writer;
  writer.AddPair("u8", testing::kGgufUint8, GgufBytes().U8(200).str());
  writer.AddPair("i8", testing::kGgufInt8, GgufBytes().Put<int8_t>(-100).str());
  writer.AddPair("u16", testing::kGgufUint16, GgufBytes().U16(60000).str());
  writer.AddPair("i16", testing::kGgufInt16, GgufBytes().Put<int16_t>(-30000).str());
  writer.AddPair("u32", testing::kGgufUint32, GgufBytes().U32(4294967295u).str());
  writer.AddPair("i32", testing::kGgufInt32, GgufBytes().I32(-2000000000).str());
  writer.AddPair("u64", testing::kGgufUint64, GgufBytes().U64(uint64_t{1} << 40).str());
  writer.AddPair("u64_big", testing::kGgufUint64, GgufBytes().U64(~uint64_t{0}).str());
  writer.AddPair("i64", testing::kGgufInt64, GgufBytes().Put<int64_t>(-(int64_t{1} << 50)).str());
  writer.AddPair("f32", testing::kGgufFloat32, GgufBytes().F32(1e-5f).str());
  writer.AddPair("f64", testing::kGgufFloat64, GgufBytes().Put<double>(0.1).str());
  writer.AddBool("yes", true).AddBool("no", false).AddString("s", std::string("a\0b", 3));
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  const GgufMetadata& metadata = (*parsed.file)->metadata();
  EXPECT_EQ(*metadata.GetInt("u8"), 200);
  EXPECT_EQ(*metadata.GetInt("i8"), -100);
  EXPECT_EQ(*metadata.GetInt("u16"), 60000);
  EXPECT_EQ(*metadata.GetInt("i16"), -30000);
  EXPECT_EQ(*metadata.GetInt("u32"), 4294967295);
  EXPECT_EQ(*metadata.GetInt("i32"), -2000000000);
  EXPECT_EQ(*metadata.GetInt("u64"), int64_t{1} << 40);
  EXPECT_THAT(metadata.GetInt("u64_big").status().message(), HasSubstr("'u64_big'"));
  EXPECT_EQ(metadata.Find("u64_big")->uint_value, ~uint64_t{0});
  EXPECT_EQ(*metadata.GetInt("i64"), -(int64_t{1} << 50));
  EXPECT_EQ(*metadata.GetFloat("f32"), static_cast<double>(1e-5f));
  EXPECT_EQ(*metadata.GetFloat("f64"), 0.1);
  EXPECT_TRUE(*metadata.GetBool("yes"));
  EXPECT_FALSE(*metadata.GetBool("no"));
  EXPECT_EQ(*metadata.GetString("s"), std::string("a\0b", 3));
  ASSERT_EQ(metadata.entries().size(), 14u);
  EXPECT_EQ(metadata.entries()[0].first, "u8");  // file order
}

TEST(GgufFileTest, ReadsArraysAndNestedArrays) {
  GgufWriter writer;
  writer.AddStringArray("tokens", {"<unk>", "", "\xe2\x96\x81the"});
  writer.AddF32Array("scores", {0.5f, -1.0f});
  writer.AddI32Array("types", {1, 2, 3});
  writer.AddPair("u64s", testing::kGgufArray,
                 GgufBytes().U32(testing::kGgufUint64).U64(2).U64(7).U64(~uint64_t{0}).str());
  // [[1, 2], ["x"], []]
  GgufBytes nested;
  nested.U32(testing::kGgufArray).U64(3);
  nested.U32(testing::kGgufUint8).U64(2).U8(1).U8(2);
  nested.U32(testing::kGgufString).U64(1).Str("x");
  nested.U32(testing::kGgufInt32).U64(0);
  writer.AddPair("nested", testing::kGgufArray, nested.str());
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  const GgufMetadata& metadata = (*parsed.file)->metadata();
  EXPECT_THAT(*metadata.GetStringArray("tokens"), ElementsAre("<unk>", "", "\xe2\x96\x81the"));
  EXPECT_THAT(*metadata.GetFloatArray("scores"), ElementsAre(0.5f, -1.0f));
  EXPECT_THAT(*metadata.GetIntArray("types"), ElementsAre(1, 2, 3));
  EXPECT_THAT(metadata.GetIntArray("u64s").status().message(), HasSubstr("element 1"));
  const GgufValue* value = *metadata.GetArray("nested");
  ASSERT_EQ(value->element_type, GgufValueType::kArray);
  ASSERT_EQ(value->arrays.size(), 3u);
  EXPECT_EQ(value->arrays[0].element_type, GgufValueType::kUint8);
  EXPECT_EQ(value->arrays[0].IntAt(1), 2);
  EXPECT_THAT(value->arrays[1].strings, ElementsAre("x"));
  EXPECT_EQ(value->arrays[2].count, 0u);
}

TEST(GgufFileTest, LookupErrorsNameTheKeyAndTypes) {
  GgufWriter writer;
  writer.AddString("name", "x").AddU32("count", 3).AddI32Array("ids", {1});
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  const GgufMetadata& metadata = (*parsed.file)->metadata();
  EXPECT_EQ(metadata.GetString("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(metadata.GetString("missing").status().message(), HasSubstr("'missing'"));
  EXPECT_EQ(metadata.GetInt("name").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(metadata.GetInt("name").status().message(),
            "metadata key 'name' has type string, expected an integer");
  EXPECT_EQ(metadata.GetString("count").status().message(),
            "metadata key 'count' has type uint32, expected string");
  EXPECT_EQ(metadata.GetStringArray("ids").status().message(),
            "metadata key 'ids' has type array of int32, expected array of string");
  EXPECT_THAT(metadata.GetFloat("count").status().message(), HasSubstr("expected float32"));
  EXPECT_THAT(metadata.GetBool("count").status().message(), HasSubstr("expected bool"));
  EXPECT_THAT(metadata.GetArray("count").status().message(), HasSubstr("expected array"));
  EXPECT_TRUE(metadata.Has("ids"));
  EXPECT_FALSE(metadata.Has("id"));
}

TEST(GgufFileTest, TensorTypesAndBlockSizes) {
  GgufWriter writer;
  // One Q4_K super-block (144 bytes) and two Q8_0 blocks (34 bytes each) per row.
  writer.AddTensor({"k", {256, 2}, testing::kGgmlQ4_K, std::string(288, '\0'), std::nullopt});
  writer.AddTensor({"q", {64, 1, 1, 3}, testing::kGgmlQ8_0, std::string(204, '\0'), std::nullopt});
  writer.AddTensor({"h", {3}, testing::kGgmlBF16, std::string(6, '\0'), std::nullopt});
  const Parsed parsed = Parse(writer.Build());
  ASSERT_TRUE(parsed.file.ok()) << parsed.file.status();
  const GgufFile& file = **parsed.file;
  EXPECT_EQ(file.tensors()[0].type, GgmlType::kQ4_K);
  EXPECT_EQ(file.tensors()[0].size, 288u);
  EXPECT_EQ(file.tensors()[0].row_bytes(), 144u);
  EXPECT_EQ(file.tensors()[1].type, GgmlType::kQ8_0);
  EXPECT_EQ(file.tensors()[1].num_rows(), 3);
  EXPECT_EQ(file.tensors()[1].row_bytes(), 68u);
  EXPECT_EQ(file.tensors()[2].type, GgmlType::kBF16);
  EXPECT_EQ(file.tensors()[2].size, 6u);
}

TEST(GgufFileTest, OpensFromDiskAndReportsMissingFiles) {
  testing::ScopedTempDir dir("gguf");
  GgufWriter writer;
  writer.AddString("general.architecture", "llama").AddF32Tensor("w", {2, 2});
  const std::string bytes = writer.Build();
  std::ofstream(dir.File("m.gguf"), std::ios::binary).write(bytes.data(), bytes.size());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->name(), dir.File("m.gguf"));
  ASSERT_NE((*file)->FindTensor("w"), nullptr);
  float value;
  std::memcpy(&value, (*file)->FindTensor("w")->data + 12, 4);
  EXPECT_EQ(value, 3.0f);

  EXPECT_EQ(GgufFile::Open(dir.File("none.gguf")).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(dir.File("empty.gguf"), std::ios::binary).flush();
  EXPECT_THAT(GgufFile::Open(dir.File("empty.gguf")).status().message(), HasSubstr("empty"));
  EXPECT_THAT(GgufFile::Open(dir.path()).status().message(), HasSubstr("not a regular file"));
}

// The fuzz target's seeds (tests/fuzz/make_gguf_seeds.py) are accepted whole, so that fuzzing
// starts from files that reach every stage of the parser.
TEST(GgufFileTest, FuzzSeedsAreValidFiles) {
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::string(::llmserve::testing::SourceDir()) + "/tests/fuzz/seeds/gguf")) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const Parsed parsed = Parse(bytes);
    EXPECT_TRUE(parsed.file.ok()) << entry.path() << ": " << parsed.file.status();
    ++seeds;
  }
  EXPECT_GE(seeds, 4);
}

}  // namespace
}  // namespace llmserve::worker::gguf
