// Builds GGUF files in memory for tests: valid by default, with knobs to break one thing at a
// time (hostile-file tests, fuzz seeds). GgufBytes appends raw little-endian encodings;
// GgufWriter lays out a whole file (header, metadata pairs, tensor infos, padding, data).

#ifndef LLMSERVE_TESTS_TESTING_GGUF_WRITER_H_
#define LLMSERVE_TESTS_TESTING_GGUF_WRITER_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llmserve::testing {

// GGUF value type ids (the specification's numbering).
enum GgufTypeId : uint32_t {
  kGgufUint8 = 0,
  kGgufInt8 = 1,
  kGgufUint16 = 2,
  kGgufInt16 = 3,
  kGgufUint32 = 4,
  kGgufInt32 = 5,
  kGgufFloat32 = 6,
  kGgufBool = 7,
  kGgufString = 8,
  kGgufArray = 9,
  kGgufUint64 = 10,
  kGgufInt64 = 11,
  kGgufFloat64 = 12,
};

// ggml tensor type ids used by the tests.
enum GgmlTypeId : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ4_1 = 3,
  kGgmlQ5_0 = 6,
  kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8,
  kGgmlQ2_K = 10,
  kGgmlQ4_K = 12,
  kGgmlQ5_K = 13,
  kGgmlQ6_K = 14,
  kGgmlBF16 = 30,
};

class GgufBytes {
 public:
  template <typename T>
  GgufBytes& Put(T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));  // little-endian hosts only, as the reader
    bytes_.append(raw, sizeof(T));
    return *this;
  }
  GgufBytes& U8(uint8_t value) { return Put(value); }
  GgufBytes& U16(uint16_t value) { return Put(value); }
  GgufBytes& U32(uint32_t value) { return Put(value); }
  GgufBytes& I32(int32_t value) { return Put(value); }
  GgufBytes& U64(uint64_t value) { return Put(value); }
  GgufBytes& F32(float value) { return Put(value); }
  // A GGUF string: uint64 length, then the bytes.
  GgufBytes& Str(const std::string& value) {
    U64(value.size());
    bytes_ += value;
    return *this;
  }
  GgufBytes& Raw(const std::string& value) {
    bytes_ += value;
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

// A heap copy of exactly `bytes.size()` bytes (std::string keeps a terminator and spare capacity
// past its end, where AddressSanitizer would not see an overread).
struct ExactBuffer {
  explicit ExactBuffer(const std::string& bytes)
      : data(new unsigned char[bytes.size()]), size(bytes.size()) {
    if (size > 0) std::memcpy(data.get(), bytes.data(), size);
  }
  std::unique_ptr<unsigned char[]> data;
  size_t size;
};

class GgufWriter {
 public:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type = kGgmlF32;
    std::string data;
    // Written as is when set; otherwise the next multiple of `alignment` after the previous one.
    std::optional<uint64_t> offset;
  };

  // Header knobs.
  uint32_t magic = 0x46554747;  // "GGUF"
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // instead of the real count
  std::optional<uint64_t> pair_count;    // instead of the real count
  // Layout of the data section (general.alignment is a metadata pair the test adds or not).
  uint64_t alignment = 32;

  // One metadata pair: the key, the type id, then `value` (already encoded).
  GgufWriter& AddPair(const std::string& key, uint32_t type, const std::string& value) {
    pairs_.Str(key).U32(type).Raw(value);
    ++num_pairs_;
    return *this;
  }
  GgufWriter& AddU32(const std::string& key, uint32_t value) {
    return AddPair(key, kGgufUint32, GgufBytes().U32(value).str());
  }
  GgufWriter& AddF32(const std::string& key, float value) {
    return AddPair(key, kGgufFloat32, GgufBytes().F32(value).str());
  }
  GgufWriter& AddBool(const std::string& key, bool value) {
    return AddPair(key, kGgufBool, GgufBytes().U8(value ? 1 : 0).str());
  }
  GgufWriter& AddString(const std::string& key, const std::string& value) {
    return AddPair(key, kGgufString, GgufBytes().Str(value).str());
  }
  GgufWriter& AddStringArray(const std::string& key, const std::vector<std::string>& values) {
    GgufBytes bytes;
    bytes.U32(kGgufString).U64(values.size());
    for (const std::string& value : values) bytes.Str(value);
    return AddPair(key, kGgufArray, bytes.str());
  }
  GgufWriter& AddI32Array(const std::string& key, const std::vector<int32_t>& values) {
    GgufBytes bytes;
    bytes.U32(kGgufInt32).U64(values.size());
    for (int32_t value : values) bytes.I32(value);
    return AddPair(key, kGgufArray, bytes.str());
  }
  GgufWriter& AddF32Array(const std::string& key, const std::vector<float>& values) {
    GgufBytes bytes;
    bytes.U32(kGgufFloat32).U64(values.size());
    for (float value : values) bytes.F32(value);
    return AddPair(key, kGgufArray, bytes.str());
  }

  GgufWriter& AddTensor(Tensor tensor) {
    tensors_.push_back(std::move(tensor));
    return *this;
  }
  // An f32 tensor holding 0, 1, 2, ... (dims[0] fastest).
  GgufWriter& AddF32Tensor(const std::string& name, std::vector<uint64_t> dims) {
    uint64_t count = 1;
    for (uint64_t extent : dims) count *= extent;
    GgufBytes data;
    for (uint64_t i = 0; i < count; ++i) data.F32(static_cast<float>(i));
    return AddTensor({name, std::move(dims), kGgmlF32, data.str(), std::nullopt});
  }

  // The header, then everything up to the data section (no padding): where tensor infos end.
  std::string BuildHeaderAndInfos() const {
    GgufBytes out;
    out.U32(magic).U32(version);
    out.U64(tensor_count.value_or(tensors_.size())).U64(pair_count.value_or(num_pairs_));
    out.Raw(pairs_.str());
    uint64_t next = 0;
    for (const Tensor& tensor : tensors_) {
      out.Str(tensor.name).U32(static_cast<uint32_t>(tensor.dims.size()));
      for (uint64_t extent : tensor.dims) out.U64(extent);
      out.U32(tensor.type).U64(tensor.offset.value_or(next));
      next = AlignUp(tensor.offset.value_or(next) + tensor.data.size());
    }
    return out.str();
  }

  static constexpr uint64_t kMaxWrittenOffset = uint64_t{1} << 24;

  // The whole file: tensor data placed at their offsets, zero padding in between.
  std::string Build() const {
    std::string file = BuildHeaderAndInfos();
    if (tensors_.empty()) return file;
    file.resize(AlignUp(file.size()), '\0');
    const size_t data_start = file.size();
    uint64_t next = 0;
    for (const Tensor& tensor : tensors_) {
      const uint64_t offset = tensor.offset.value_or(next);
      // A hostile offset far past the end stays a claim: its data is not written.
      if (offset > kMaxWrittenOffset) continue;
      if (data_start + offset + tensor.data.size() > file.size()) {
        file.resize(data_start + offset + tensor.data.size(), '\0');
      }
      file.replace(data_start + offset, tensor.data.size(), tensor.data);
      next = AlignUp(offset + tensor.data.size());
    }
    return file;
  }

 private:
  uint64_t AlignUp(uint64_t value) const { return (value + alignment - 1) / alignment * alignment; }

  GgufBytes pairs_;
  uint64_t num_pairs_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_GGUF_WRITER_H_
