// Hostile GGUF files: each malformed field gives INVALID_ARGUMENT with a message naming the field
// (and the key or tensor), never a crash, an out-of-bounds read (the bytes are parsed from an
// exact-size heap buffer, so AddressSanitizer sees any overread) or an allocation sized by a
// count the file cannot back.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gguf_writer.h"
#include "worker/model/gguf/gguf_file.h"

namespace llmserve::worker::gguf {
namespace {

using ::llmserve::testing::ExactBuffer;
using ::llmserve::testing::GgufBytes;
using ::llmserve::testing::GgufWriter;
using ::testing::HasSubstr;

constexpr uint64_t kTwoTo63 = uint64_t{1} << 63;

absl::Status ParseStatus(const std::string& bytes) {
  const ExactBuffer buffer(bytes);
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Parse("hostile.gguf", buffer.data.get(), buffer.size);
  return file.status();
}

void ExpectError(const std::string& bytes, const std::string& expected) {
  const absl::Status status = ParseStatus(bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("hostile.gguf: "));
  EXPECT_THAT(status.message(), HasSubstr(expected));
}

// A small valid file: two pairs (one a string array) and two tensors.
GgufWriter ValidWriter() {
  GgufWriter writer;
  writer.AddString("general.architecture", "llama");
  writer.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  writer.AddF32Tensor("w", {4, 2}).AddF32Tensor("v", {3});
  return writer;
}

// A file whose only pair is `key` of `type` with `value` bytes (and nothing after).
std::string OnePair(const std::string& key, uint32_t type, const std::string& value) {
  GgufWriter writer;
  writer.AddPair(key, type, value);
  return writer.Build();
}

// A file whose only tensor is `tensor`.
std::string OneTensor(GgufWriter::Tensor tensor) {
  GgufWriter writer;
  writer.AddTensor(std::move(tensor));
  return writer.Build();
}

TEST(GgufHostileTest, EveryTruncationIsAnError) {
  const std::string valid = ValidWriter().Build();
  ASSERT_TRUE(ParseStatus(valid).ok()) << ParseStatus(valid);
  for (size_t length = 0; length < valid.size(); ++length) {
    const absl::Status status = ParseStatus(valid.substr(0, length));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "prefix of " << length;
  }
  ExpectError(valid.substr(0, 6), "truncated: the version needs 4 bytes at offset 4");
  ExpectError(valid.substr(0, valid.size() - 1), "tensor 'v' needs 12 bytes at offset 32");
}

TEST(GgufHostileTest, Header) {
  std::string bytes = ValidWriter().Build();
  bytes[0] = 'g';
  ExpectError(bytes, "not a GGUF file: magic is 67 47 55 46");
  GgufWriter writer = ValidWriter();
  writer.version = 1;
  ExpectError(writer.Build(), "version 1 is not supported (only 2 and 3; version 1 used 32-bit");
  writer.version = 4;
  ExpectError(writer.Build(), "version 4 is not supported");
  writer.version = 0x03000000;
  ExpectError(writer.Build(), "big-endian");
}

TEST(GgufHostileTest, AbsurdCounts) {
  GgufWriter writer = ValidWriter();
  writer.tensor_count = uint64_t{1} << 40;
  ExpectError(writer.Build(), "tensor count 1099511627776 is over the limit of 1048576");
  writer.tensor_count = 1000;
  ExpectError(writer.Build(), "the tensor count is 1000, but that many need at least 33 bytes");
  writer = ValidWriter();
  writer.pair_count = kTwoTo63;
  ExpectError(writer.Build(), "metadata pair count 9223372036854775808 is over the limit");
  writer.pair_count = 100000;
  ExpectError(writer.Build(), "the metadata pair count is 100000, but that many need");
  writer.pair_count = 3;  // one more than written: the third key reads tensor infos as a pair
  EXPECT_EQ(ParseStatus(writer.Build()).code(), absl::StatusCode::kInvalidArgument);
  ExpectError(OnePair("a", testing::kGgufArray,
                      GgufBytes().U32(testing::kGgufUint32).U64(uint64_t{1} << 60).str()),
              "the array length of metadata key 'a' is 1152921504606846976");
  ExpectError(OnePair("a", testing::kGgufArray,
                      GgufBytes().U32(testing::kGgufString).U64(1000).Str("x").str()),
              "the array length of metadata key 'a' is 1000, but that many need at least 8");
  ExpectError(OnePair("a", testing::kGgufArray,
                      GgufBytes().U32(testing::kGgufArray).U64(~uint64_t{0}).str()),
              "the array length of metadata key 'a' is 18446744073709551615");
}

TEST(GgufHostileTest, StringLengths) {
  ExpectError(GgufBytes()
                  .U32(0x46554747)
                  .U32(3)
                  .U64(0)
                  .U64(1)
                  .U64(kTwoTo63)
                  .Raw(std::string(20, '\0'))
                  .str(),
              "the key of metadata pair #0 has length 9223372036854775808, over the limit of "
              "65535 bytes");
  ExpectError(OnePair("k", testing::kGgufString, GgufBytes().U64(kTwoTo63).str()),
              "metadata key 'k' has length 9223372036854775808 but the file has 0 bytes left");
  ExpectError(OnePair("k", testing::kGgufArray,
                      GgufBytes().U32(testing::kGgufString).U64(2).Str("ok").U64(kTwoTo63).str()),
              "metadata key 'k' element 1 has length 9223372036854775808");
  ExpectError(OnePair(std::string(70000, 'k'), testing::kGgufUint8, "x"), "over the limit");
  GgufBytes tensor_name;
  tensor_name.U32(0x46554747).U32(3).U64(1).U64(0).U64(kTwoTo63).Raw(std::string(40, '\0'));
  ExpectError(tensor_name.str(), "the name of tensor info #0 has length 9223372036854775808");
  ExpectError(OnePair("", testing::kGgufUint32, "xxxx"), "metadata pair #0 has an empty key");
  ExpectError(OneTensor({"", {1}, testing::kGgmlF32, std::string(4, '\0'), std::nullopt}),
              "tensor info #0 has an empty name");
}

TEST(GgufHostileTest, UnknownAndInvalidValues) {
  ExpectError(OnePair("k", 13, "xxxxxxxx"), "metadata key 'k' has unknown value type 13");
  ExpectError(OnePair("k", testing::kGgufArray, GgufBytes().U32(99).U64(0).str()),
              "metadata key 'k' has unknown array element type 99");
  ExpectError(OnePair("k", testing::kGgufBool, GgufBytes().U8(2).str()),
              "metadata key 'k' is a bool of value 2, neither 0 nor 1");
  ExpectError(OnePair("k", testing::kGgufArray,
                      GgufBytes().U32(testing::kGgufBool).U64(2).U8(1).U8(7).str()),
              "metadata key 'k' element 1 is a bool of value 7");
  GgufWriter duplicate = ValidWriter();
  duplicate.AddU32("general.architecture", 1);
  ExpectError(duplicate.Build(), "duplicate metadata key 'general.architecture'");
  // Arrays nested deeper than the limit.
  GgufBytes deep;
  for (int i = 0; i < 20; ++i) deep.U32(testing::kGgufArray).U64(1);
  ExpectError(OnePair("deep", testing::kGgufArray, deep.str()), "nests arrays deeper than 8");
}

TEST(GgufHostileTest, Alignment) {
  GgufWriter writer = ValidWriter();
  writer.AddU32("general.alignment", 48);
  ExpectError(writer.Build(), "general.alignment 48 is not a power of two");
  writer = ValidWriter();
  writer.AddU32("general.alignment", 0);
  ExpectError(writer.Build(), "general.alignment 0 is not a power of two");
  writer = ValidWriter();
  writer.AddString("general.alignment", "32");
  ExpectError(writer.Build(), "general.alignment has type string, expected uint32");
  ExpectError(OneTensor({"w", {4}, testing::kGgmlF32, std::string(16, '\0'), 16}),
              "tensor 'w' has offset 16, not a multiple of the alignment 32");
  // Written with 16-byte alignment, read with the default 32.
  writer = GgufWriter();
  writer.alignment = 16;
  writer.AddF32Tensor("a", {1}).AddF32Tensor("b", {1});
  ExpectError(writer.Build(), "tensor 'b' has offset 16, not a multiple of the alignment 32");
}

TEST(GgufHostileTest, TensorShapes) {
  auto tensor = [](std::vector<uint64_t> dims, uint32_t type) {
    return OneTensor({"t", std::move(dims), type, std::string(64, '\0'), std::nullopt});
  };
  ExpectError(tensor({}, testing::kGgmlF32), "tensor 't' has 0 dimensions; 1 to 4 are allowed");
  ExpectError(tensor({1, 1, 1, 1, 1}, testing::kGgmlF32), "tensor 't' has 5 dimensions");
  ExpectError(tensor({4, 0}, testing::kGgmlF32), "tensor 't' dimension 1 is 0");
  ExpectError(tensor({kTwoTo63}, testing::kGgmlF32),
              "tensor 't' dimension 0 is 9223372036854775808");
  ExpectError(tensor({uint64_t{1} << 62, 4}, testing::kGgmlF32),
              "tensor 't' has shape [4611686018427387904, 4], more than 2^63 elements");
  ExpectError(tensor({uint64_t{1} << 62}, testing::kGgmlF32),
              "tensor 't' of type F32 and shape [4611686018427387904] takes more than 2^63 bytes");
  ExpectError(tensor({uint64_t{1} << 61, 2}, testing::kGgmlF16),
              "tensor 't' of type F16 and shape [2305843009213693952, 2] takes more than 2^63 "
              "bytes");
  ExpectError(tensor({100}, testing::kGgmlQ4_K),
              "tensor 't' of type Q4_K has rows of 100 elements, not a multiple of its block of "
              "256");
  ExpectError(tensor({16}, 99), "tensor 't' has unknown type 99");
  ExpectError(tensor({16}, 4), "tensor 't' has unknown type 4");  // removed Q4_2
  ExpectError(tensor({256}, testing::kGgmlQ2_K),
              "tensor 't' has type Q2_K (10), which this reader does not support (supported: F32, "
              "F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16)");
  // A shape that needs more bytes than the tensor's place in the file holds.
  ExpectError(tensor({1 << 20}, testing::kGgmlF32),
              "tensor 't' needs 4194304 bytes at offset 0 of the data section, which has 64 "
              "bytes");
}

TEST(GgufHostileTest, TensorPlacement) {
  ExpectError(OneTensor({"w", {4}, testing::kGgmlF32, std::string(16, '\0'), uint64_t{1} << 40}),
              "tensor 'w' needs 16 bytes at offset 1099511627776 of the data section, which has "
              "0 bytes");
  ExpectError(OneTensor({"w", {4}, testing::kGgmlF32, std::string(16, '\0'), ~uint64_t{0} - 31}),
              "tensor 'w' needs 16 bytes at offset 18446744073709551584 of the data section");
  GgufWriter overlap;
  overlap.AddTensor({"a", {16}, testing::kGgmlF32, std::string(64, '\0'), 0});
  overlap.AddTensor({"b", {8}, testing::kGgmlF32, std::string(32, '\0'), 32});
  ExpectError(overlap.Build(), "tensors 'a' and 'b' overlap in the data section");
  GgufWriter duplicate;
  duplicate.AddF32Tensor("w", {4}).AddF32Tensor("w", {4});
  ExpectError(duplicate.Build(), "duplicate tensor name 'w' (tensor infos #0 and #1)");
  // Tensor infos end, then the file stops before the padded start of the data section.
  GgufWriter writer;
  writer.AddF32Tensor("w", {1});
  ExpectError(writer.BuildHeaderAndInfos(), "truncated: the data section starts at offset");
}

}  // namespace
}  // namespace llmserve::worker::gguf
