#include "worker/model/gguf/gguf_dequantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::gguf {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "block fields are read in place");

uint16_t LoadU16(const unsigned char* p) {
  uint16_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

float LoadF16(const unsigned char* p) { return F16ToF32(LoadU16(p)); }

// Block layouts (ggml-common.h). Each block of 32 holds elements [0, 16) in the low nibbles of
// qs[0..16) and elements [16, 32) in the high nibbles; Q5 types add a fifth bit per element from
// the 32-bit qh (bit j for element j).
constexpr int kBlock = 32;
constexpr int kSuperBlock = 256;

void DequantizeQ4_0(const unsigned char* block, float* out) {  // d, qs[16]
  const float d = LoadF16(block);
  const unsigned char* qs = block + 2;
  for (int j = 0; j < kBlock / 2; ++j) {
    out[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    out[j + kBlock / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void DequantizeQ4_1(const unsigned char* block, float* out) {  // d, m, qs[16]
  const float d = LoadF16(block);
  const float m = LoadF16(block + 2);
  const unsigned char* qs = block + 4;
  for (int j = 0; j < kBlock / 2; ++j) {
    out[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
    out[j + kBlock / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// The 5-bit values of a Q5 block (0..31): qh holds the fifth bit of element j at bit j.
void Unpack5Bits(const unsigned char* qh_bytes, const unsigned char* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < kBlock / 2; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + kBlock / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + kBlock / 2)) & 1u) << 4);
  }
}

void DequantizeQ5_0(const unsigned char* block, float* out) {  // d, qh[4], qs[16]
  const float d = LoadF16(block);
  int q[kBlock];
  Unpack5Bits(block + 2, block + 6, q);
  for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(q[j] - 16) * d;
}

void DequantizeQ5_1(const unsigned char* block, float* out) {  // d, m, qh[4], qs[16]
  const float d = LoadF16(block);
  const float m = LoadF16(block + 2);
  int q[kBlock];
  Unpack5Bits(block + 4, block + 8, q);
  for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(q[j]) * d + m;
}

void DequantizeQ8_0(const unsigned char* block, float* out) {  // d, qs[32] (int8)
  const float d = LoadF16(block);
  for (int j = 0; j < kBlock; ++j) {
    out[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
  }
}

// Q4_K and Q5_K: eight sub-blocks of 32, each with a 6-bit scale and a 6-bit minimum, packed
// into 12 bytes: sub-blocks 0-3 keep theirs in the low 6 bits of bytes 0-3 (scales) and 4-7
// (minimums); sub-blocks 4-7 keep their low 4 bits in the nibbles of bytes 8-11 and their high 2
// bits in the top bits of bytes 0-3 (scales) and 4-7 (minimums).
void ScaleAndMin(const unsigned char* scales, int sub_block, int* scale, int* min) {
  if (sub_block < 4) {
    *scale = scales[sub_block] & 63;
    *min = scales[sub_block + 4] & 63;
  } else {
    *scale = (scales[sub_block + 4] & 0x0f) | ((scales[sub_block - 4] >> 6) << 4);
    *min = (scales[sub_block + 4] >> 4) | ((scales[sub_block] >> 6) << 4);
  }
}

// Q4_K super-block: d, dmin, scales[12], qs[128]. Each 64 elements share 32 bytes of qs: the
// first 32 elements in the low nibbles, the next 32 in the high nibbles.
// Q5_K adds qh[32] before qs: for element l of 64-element chunk c, the fifth bit of the
// low-nibble half is bit 2c of qh[l], of the high-nibble half bit 2c+1.
template <bool kFiveBits>
void DequantizeK4Or5(const unsigned char* block, float* out) {
  const float d = LoadF16(block);
  const float dmin = LoadF16(block + 2);
  const unsigned char* scales = block + 4;
  const unsigned char* qh = block + 16;
  const unsigned char* qs = block + (kFiveBits ? 48 : 16);
  for (int chunk = 0; chunk < kSuperBlock / 64; ++chunk) {
    int scale_lo, min_lo, scale_hi, min_hi;
    ScaleAndMin(scales, 2 * chunk, &scale_lo, &min_lo);
    ScaleAndMin(scales, 2 * chunk + 1, &scale_hi, &min_hi);
    const float d_lo = d * static_cast<float>(scale_lo);
    const float m_lo = dmin * static_cast<float>(min_lo);
    const float d_hi = d * static_cast<float>(scale_hi);
    const float m_hi = dmin * static_cast<float>(min_hi);
    for (int l = 0; l < 32; ++l) {
      int lo = qs[l] & 0x0f;
      int hi = qs[l] >> 4;
      if constexpr (kFiveBits) {
        lo |= ((qh[l] >> (2 * chunk)) & 1) << 4;
        hi |= ((qh[l] >> (2 * chunk + 1)) & 1) << 4;
      }
      out[l] = d_lo * static_cast<float>(lo) - m_lo;
      out[l + 32] = d_hi * static_cast<float>(hi) - m_hi;
    }
    qs += 32;
    out += 64;
  }
}

// Q6_K super-block: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8, one per 16
// elements), d. Each half of 128 elements uses 64 bytes of ql and 32 of qh: element l (0..31) of
// quarter k takes its low bits from ql[l] (k = 0, 2: low/high nibble) or ql[l + 32] (k = 1, 3),
// its high bits from bits 2k..2k+1 of qh[l], and is offset by -32.
void DequantizeQ6_K(const unsigned char* block, float* out) {
  const unsigned char* ql = block;
  const unsigned char* qh = block + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = LoadF16(block + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int sub = l / 16;
      const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(scales[sub]) * static_cast<float>(q0);
      out[l + 32] = d * static_cast<float>(scales[sub + 2]) * static_cast<float>(q1);
      out[l + 64] = d * static_cast<float>(scales[sub + 4]) * static_cast<float>(q2);
      out[l + 96] = d * static_cast<float>(scales[sub + 6]) * static_cast<float>(q3);
    }
    ql += 64;
    qh += 32;
    scales += 8;
    out += 128;
  }
}

// The Int4Matrix form of the 4-bit blocks: 32 values (0..15) per group, written as Int4Matrix
// bytes (column 2j in the low nibble of byte j, 2j + 1 in the high one), and the group's scale
// and offset, computed with the same f32 operations as the dequantizers above so that
// fma(q, scale, -offset) is their value bit for bit (gguf_dequantize.h says why).
void PackGroup(const int* q, uint8_t* packed) {
  for (int j = 0; j < kBlock / 2; ++j) {
    packed[j] = static_cast<uint8_t>(q[2 * j] | (q[2 * j + 1] << 4));
  }
}

void Int4GroupsQ4_0(const unsigned char* block, uint8_t* packed, float* scales, float* offsets) {
  const float d = LoadF16(block);
  int q[kBlock];
  for (int j = 0; j < kBlock / 2; ++j) {
    q[j] = block[2 + j] & 0x0f;
    q[j + kBlock / 2] = block[2 + j] >> 4;
  }
  PackGroup(q, packed);
  scales[0] = d;
  offsets[0] = 8.0f * d;
}

void Int4GroupsQ4_1(const unsigned char* block, uint8_t* packed, float* scales, float* offsets) {
  int q[kBlock];
  for (int j = 0; j < kBlock / 2; ++j) {
    q[j] = block[4 + j] & 0x0f;
    q[j + kBlock / 2] = block[4 + j] >> 4;
  }
  PackGroup(q, packed);
  scales[0] = LoadF16(block);
  offsets[0] = -LoadF16(block + 2);
}

void Int4GroupsQ4_K(const unsigned char* block, uint8_t* packed, float* scales, float* offsets) {
  const float d = LoadF16(block);
  const float dmin = LoadF16(block + 2);
  const unsigned char* qs = block + 16;
  for (int chunk = 0; chunk < kSuperBlock / 64; ++chunk) {
    int lo[kBlock], hi[kBlock];
    for (int l = 0; l < kBlock; ++l) {
      lo[l] = qs[32 * chunk + l] & 0x0f;
      hi[l] = qs[32 * chunk + l] >> 4;
    }
    PackGroup(lo, packed + (2 * chunk) * (kBlock / 2));
    PackGroup(hi, packed + (2 * chunk + 1) * (kBlock / 2));
    for (int half = 0; half < 2; ++half) {
      int scale, min;
      ScaleAndMin(block + 4, 2 * chunk + half, &scale, &min);
      scales[2 * chunk + half] = d * static_cast<float>(scale);
      offsets[2 * chunk + half] = dmin * static_cast<float>(min);
    }
  }
}

template <void (*kDequantizeBlock)(const unsigned char*, float*)>
void ForEachBlock(const unsigned char* data, int64_t num_blocks, int64_t block_size,
                  int64_t block_bytes, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    kDequantizeBlock(data + b * block_bytes, out + b * block_size);
  }
}

}  // namespace

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t result;
  if (exponent == 0x1f) {  // infinity or NaN (payload kept)
    result = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal: rebias 15 -> 127
    result = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    result = sign;
  } else {  // subnormal: shift the mantissa up to a normal f32
    uint32_t shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    result = sign | ((113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &result, sizeof(value));
  return value;
}

float BF16ToF32(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

void DequantizeBlocks(GgmlType type, const unsigned char* data, int64_t num_blocks, float* out) {
  const GgmlTypeInfo& info = GgmlTypeInfoOf(type);
  const int64_t size = info.block_size;
  const int64_t bytes = info.block_bytes;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, data, num_blocks * sizeof(float));
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < num_blocks; ++i) out[i] = F16ToF32(LoadU16(data + 2 * i));
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < num_blocks; ++i) out[i] = BF16ToF32(LoadU16(data + 2 * i));
      return;
    case GgmlType::kQ4_0:
      return ForEachBlock<DequantizeQ4_0>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ4_1:
      return ForEachBlock<DequantizeQ4_1>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ5_0:
      return ForEachBlock<DequantizeQ5_0>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ5_1:
      return ForEachBlock<DequantizeQ5_1>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ8_0:
      return ForEachBlock<DequantizeQ8_0>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ4_K:
      return ForEachBlock<DequantizeK4Or5<false>>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ5_K:
      return ForEachBlock<DequantizeK4Or5<true>>(data, num_blocks, size, bytes, out);
    case GgmlType::kQ6_K:
      return ForEachBlock<DequantizeQ6_K>(data, num_blocks, size, bytes, out);
  }
}

absl::Status DequantizeRows(const GgufTensor& tensor, int64_t first_row, int64_t num_rows,
                            absl::Span<float> out) {
  const int64_t rows = tensor.num_rows();
  if (first_row < 0 || num_rows < 0 || first_row > rows || num_rows > rows - first_row) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "': rows [", first_row,
                                                   ", +", num_rows, ") are outside its ", rows,
                                                   " rows"));
  }
  const int64_t row_length = tensor.row_length();
  if (static_cast<int64_t>(out.size()) / row_length != num_rows ||
      static_cast<int64_t>(out.size()) % row_length != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name, "': ", num_rows, " rows of ", row_length,
                     " elements do not fill an output of ", out.size(), " floats"));
  }
  const GgmlTypeInfo& info = GgmlTypeInfoOf(tensor.type);
  const int64_t blocks_per_row = row_length / info.block_size;
  DequantizeBlocks(tensor.type, tensor.data + first_row * tensor.row_bytes(),
                   num_rows * blocks_per_row, out.data());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DequantizeTensor(const GgufTensor& tensor) {
  std::vector<float> out(static_cast<size_t>(tensor.num_elements));
  absl::Status status = DequantizeRows(tensor, 0, tensor.num_rows(), absl::MakeSpan(out));
  if (!status.ok()) return status;
  return out;
}

bool HasInt4Groups(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K;
}

absl::Status Int4GroupsOfRow(const GgufTensor& tensor, int64_t row, uint8_t* packed, float* scales,
                             float* offsets) {
  if (!HasInt4Groups(tensor.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name, "' is ", GgmlTypeInfoOf(tensor.type).name,
                     ", not a type of 4-bit groups (Q4_0, Q4_1, Q4_K)"));
  }
  if (row < 0 || row >= tensor.num_rows()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "': row ", row,
                                                   " is outside its ", tensor.num_rows(), " rows"));
  }
  const GgmlTypeInfo& info = GgmlTypeInfoOf(tensor.type);
  const int64_t blocks = tensor.row_length() / info.block_size;
  const int64_t groups_per_block = info.block_size / kInt4GroupSize;
  const unsigned char* data = tensor.data + row * tensor.row_bytes();
  for (int64_t b = 0; b < blocks; ++b) {
    const unsigned char* block = data + b * info.block_bytes;
    uint8_t* block_packed = packed + b * info.block_size / 2;
    float* block_scales = scales + b * groups_per_block;
    float* block_offsets = offsets + b * groups_per_block;
    switch (tensor.type) {
      case GgmlType::kQ4_0:
        Int4GroupsQ4_0(block, block_packed, block_scales, block_offsets);
        break;
      case GgmlType::kQ4_1:
        Int4GroupsQ4_1(block, block_packed, block_scales, block_offsets);
        break;
      default:
        Int4GroupsQ4_K(block, block_packed, block_scales, block_offsets);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker::gguf
