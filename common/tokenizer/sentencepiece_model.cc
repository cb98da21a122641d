#include "common/tokenizer/sentencepiece_model.h"

#include <cstring>
#include <fstream>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace llmserve::common::tokenizer {
namespace {

enum ProtoWireType : uint32_t {
  kProtoVarint = 0,
  kProtoFixed64 = 1,
  kProtoLengthDelimited = 2,
  kProtoFixed32 = 5
};

// One protobuf message's bytes, read field by field. Every read checks the bytes left, so a
// hostile length or varint is an error naming `where`, never a read past the end.
class ProtoWireReader {
 public:
  ProtoWireReader(absl::string_view bytes, std::string where)
      : bytes_(bytes), where_(std::move(where)) {}

  bool done() const { return pos_ >= bytes_.size(); }
  const std::string& where() const { return where_; }

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    std::string name = where_;
    if (!field.empty()) absl::StrAppend(&name, ".", field);
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece model: ", name, ": ", what,
                                                   " (byte ", pos_, " of ", bytes_.size(), ")"));
  }

  absl::StatusOr<uint64_t> Varint(absl::string_view field) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return Error(field, "truncated varint");
      const uint8_t byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= uint64_t{byte & 0x7Fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return Error(field, "varint longer than 10 bytes");
  }

  // The next field's number and wire type; field 0 is invalid in protobuf.
  absl::Status Tag(uint32_t* field, uint32_t* wire) {
    uint64_t tag;
    LLMSERVE_ASSIGN_OR_RETURN(tag, Varint("tag"));
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF)
      return Error("", absl::StrCat("invalid field number ", tag >> 3));
    *field = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<uint32_t>(tag & 7);
    return absl::OkStatus();
  }

  absl::StatusOr<absl::string_view> LengthDelimited(absl::string_view field) {
    uint64_t length;
    LLMSERVE_ASSIGN_OR_RETURN(length, Varint(field));
    if (length > bytes_.size() - pos_) {
      return Error(field, absl::StrCat("length ", length, " runs past the end"));
    }
    const absl::string_view value = bytes_.substr(pos_, length);
    pos_ += length;
    return value;
  }

  absl::StatusOr<float> Float(absl::string_view field) {
    if (bytes_.size() - pos_ < 4) return Error(field, "truncated float");
    float value;
    std::memcpy(&value, bytes_.data() + pos_, 4);  // little-endian, as protobuf's fixed32
    pos_ += 4;
    return value;
  }

  // Reads a value of `wire` type and checks that the field has the type `want`.
  absl::Status Expect(absl::string_view field, uint32_t wire, uint32_t want) const {
    if (wire == want) return absl::OkStatus();
    return Error(field, absl::StrCat("wire type ", wire, ", expected ", want));
  }

  absl::StatusOr<uint64_t> VarintField(absl::string_view field, uint32_t wire) {
    LLMSERVE_RETURN_IF_ERROR(Expect(field, wire, kProtoVarint));
    return Varint(field);
  }

  // An int32 field (negative values are 10-byte varints, as protobuf encodes them).
  absl::StatusOr<int32_t> Int32Field(absl::string_view field, uint32_t wire) {
    uint64_t value;
    LLMSERVE_ASSIGN_OR_RETURN(value, VarintField(field, wire));
    const auto signed_value = static_cast<int64_t>(value);
    if (signed_value < INT32_MIN || signed_value > INT32_MAX) {
      return Error(field, absl::StrCat(signed_value, " is not an int32"));
    }
    return static_cast<int32_t>(signed_value);
  }

  absl::StatusOr<absl::string_view> BytesField(absl::string_view field, uint32_t wire) {
    LLMSERVE_RETURN_IF_ERROR(Expect(field, wire, kProtoLengthDelimited));
    return LengthDelimited(field);
  }

  // Skips an unknown field. Groups (wire types 3 and 4) are not used by sentencepiece_model.proto.
  absl::Status Skip(uint32_t field, uint32_t wire) {
    const std::string name = absl::StrCat("field ", field);
    switch (wire) {
      case kProtoVarint:
        return Varint(name).status();
      case kProtoLengthDelimited:
        return LengthDelimited(name).status();
      case kProtoFixed64:
      case kProtoFixed32: {
        const size_t size = wire == kProtoFixed64 ? 8 : 4;
        if (bytes_.size() - pos_ < size) return Error(name, "truncated fixed-size value");
        pos_ += size;
        return absl::OkStatus();
      }
      default:
        return Error(name, absl::StrCat("unsupported wire type ", wire));
    }
  }

 private:
  absl::string_view bytes_;
  size_t pos_ = 0;
  std::string where_;
};

absl::Status ParseSentencePiece(absl::string_view bytes, size_t index, SentencePieceModel* model) {
  ProtoWireReader r(bytes, absl::StrCat("pieces[", index, "]"));
  std::string piece;
  float score = 0;
  int64_t type = kPieceNormal;
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    LLMSERVE_RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field == 1) {
      absl::string_view value;
      LLMSERVE_ASSIGN_OR_RETURN(value, r.BytesField("piece", wire));
      piece = std::string(value);
    } else if (field == 2) {
      LLMSERVE_RETURN_IF_ERROR(r.Expect("score", wire, kProtoFixed32));
      LLMSERVE_ASSIGN_OR_RETURN(score, r.Float("score"));
    } else if (field == 3) {
      int32_t value;
      LLMSERVE_ASSIGN_OR_RETURN(value, r.Int32Field("type", wire));
      if (value < kPieceNormal || value > kPieceByte) {
        return r.Error("type", absl::StrCat(value, " is not a piece type (1 to 6)"));
      }
      type = value;
    } else {
      LLMSERVE_RETURN_IF_ERROR(r.Skip(field, wire));
    }
  }
  if (piece.empty()) return r.Error("piece", "is empty");
  model->vocabulary.pieces.push_back(std::move(piece));
  model->vocabulary.scores.push_back(score);
  model->vocabulary.types.push_back(type);
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(absl::string_view bytes, SentencePieceModel* model) {
  ProtoWireReader r(bytes, "trainer_spec");
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    LLMSERVE_RETURN_IF_ERROR(r.Tag(&field, &wire));
    uint64_t value = 0;
    switch (field) {
      case 3: {
        LLMSERVE_ASSIGN_OR_RETURN(value, r.VarintField("model_type", wire));
        if (value < 1 || value > 4) {
          return r.Error("model_type", absl::StrCat(value, " is not a model type (1 to 4)"));
        }
        model->type = static_cast<SentencePieceModel::Type>(value);
        break;
      }
      case 24: {
        LLMSERVE_ASSIGN_OR_RETURN(value, r.VarintField("treat_whitespace_as_suffix", wire));
        if (value != 0) {
          return absl::UnimplementedError(
              "SentencePiece model: trainer_spec.treat_whitespace_as_suffix is not supported");
        }
        break;
      }
      case 35:
        LLMSERVE_ASSIGN_OR_RETURN(value, r.VarintField("byte_fallback", wire));
        model->normalization.byte_fallback = value != 0;
        break;
      case 40:
        LLMSERVE_ASSIGN_OR_RETURN(model->unk_id, r.Int32Field("unk_id", wire));
        break;
      case 41:
        LLMSERVE_ASSIGN_OR_RETURN(model->bos_id, r.Int32Field("bos_id", wire));
        break;
      case 42:
        LLMSERVE_ASSIGN_OR_RETURN(model->eos_id, r.Int32Field("eos_id", wire));
        break;
      case 43:
        LLMSERVE_ASSIGN_OR_RETURN(model->pad_id, r.Int32Field("pad_id", wire));
        break;
      default:
        LLMSERVE_RETURN_IF_ERROR(r.Skip(field, wire));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(absl::string_view bytes, SentencePieceModel* model) {
  ProtoWireReader r(bytes, "normalizer_spec");
  std::string name = "(unnamed)";
  SentencePieceNormalization& n = model->normalization;
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    LLMSERVE_RETURN_IF_ERROR(r.Tag(&field, &wire));
    absl::string_view text;
    uint64_t value = 0;
    switch (field) {
      case 1:
        LLMSERVE_ASSIGN_OR_RETURN(text, r.BytesField("name", wire));
        name = std::string(text);
        break;
      case 2:
        LLMSERVE_ASSIGN_OR_RETURN(text, r.BytesField("precompiled_charsmap", wire));
        if (!text.empty()) {
          return absl::UnimplementedError(absl::StrCat(
              "SentencePiece model: normalizer_spec.precompiled_charsmap (normalizer '", name,
              "') is not supported: only the identity normalizer is"));
        }
        break;
      case 3:
        LLMSERVE_ASSIGN_OR_RETURN(value, r.VarintField("add_dummy_prefix", wire));
        n.add_dummy_prefix = value != 0;
        break;
      case 4:
        LLMSERVE_ASSIGN_OR_RETURN(value, r.VarintField("remove_extra_whitespaces", wire));
        n.remove_extra_whitespaces = value != 0;
        break;
      case 5:
        LLMSERVE_ASSIGN_OR_RETURN(value, r.VarintField("escape_whitespaces", wire));
        n.escape_whitespaces = value != 0;
        break;
      case 6:
        LLMSERVE_ASSIGN_OR_RETURN(text, r.BytesField("normalization_rule_tsv", wire));
        if (!text.empty()) {
          return absl::UnimplementedError(
              "SentencePiece model: normalizer_spec.normalization_rule_tsv is not supported");
        }
        break;
      default:
        LLMSERVE_RETURN_IF_ERROR(r.Skip(field, wire));
    }
  }
  return absl::OkStatus();
}

const char* SentencePieceTypeName(SentencePieceModel::Type type) {
  switch (type) {
    case SentencePieceModel::Type::kUnigram:
      return "UNIGRAM";
    case SentencePieceModel::Type::kBpe:
      return "BPE";
    case SentencePieceModel::Type::kWord:
      return "WORD";
    case SentencePieceModel::Type::kChar:
      return "CHAR";
  }
  return "?";
}

absl::Status ValidateSentencePieceModel(const SentencePieceModel& model) {
  const std::vector<std::string>& pieces = model.vocabulary.pieces;
  if (pieces.empty()) return absl::InvalidArgumentError("SentencePiece model: no pieces");
  if (model.type != SentencePieceModel::Type::kBpe &&
      model.type != SentencePieceModel::Type::kUnigram) {
    return absl::UnimplementedError(absl::StrCat("SentencePiece model: trainer_spec.model_type ",
                                                 SentencePieceTypeName(model.type),
                                                 " is not supported (BPE and UNIGRAM are)"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!seen.insert(pieces[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("SentencePiece model: pieces[", i, "].piece '", pieces[i], "' is repeated"));
    }
  }
  const auto n = static_cast<int64_t>(pieces.size());
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"unk_id", model.unk_id},
                                 {"bos_id", model.bos_id},
                                 {"eos_id", model.eos_id},
                                 {"pad_id", model.pad_id}}) {
    if (id < -1 || id >= n) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece model: trainer_spec.", name,
                                                     " ", id, " is outside the ", n, " pieces"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(absl::string_view bytes) {
  SentencePieceModel model;
  // Defaults of a BPE model's NormalizerSpec when the message is absent are protobuf's.
  model.normalization = {.add_dummy_prefix = true,
                         .remove_extra_whitespaces = true,
                         .escape_whitespaces = true,
                         .byte_fallback = false};
  ProtoWireReader r(bytes, "ModelProto");
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    LLMSERVE_RETURN_IF_ERROR(r.Tag(&field, &wire));
    absl::string_view message;
    if (field == 1) {
      LLMSERVE_ASSIGN_OR_RETURN(message, r.BytesField("pieces", wire));
      const size_t index = model.vocabulary.pieces.size();
      if (static_cast<int64_t>(index) >= kMaxSentencePieces) {
        return r.Error("pieces", absl::StrCat("more than ", kMaxSentencePieces, " pieces"));
      }
      LLMSERVE_RETURN_IF_ERROR(ParseSentencePiece(message, index, &model));
    } else if (field == 2) {
      LLMSERVE_ASSIGN_OR_RETURN(message, r.BytesField("trainer_spec", wire));
      LLMSERVE_RETURN_IF_ERROR(ParseTrainerSpec(message, &model));
    } else if (field == 3) {
      LLMSERVE_ASSIGN_OR_RETURN(message, r.BytesField("normalizer_spec", wire));
      LLMSERVE_RETURN_IF_ERROR(ParseNormalizerSpec(message, &model));
    } else {
      // self_test_data and denormalizer_spec (which only affects decoding) are not used.
      LLMSERVE_RETURN_IF_ERROR(r.Skip(field, wire));
    }
  }
  LLMSERVE_RETURN_IF_ERROR(ValidateSentencePieceModel(model));
  return model;
}

TokenizerFiles TokenizerFilesFromSentencePiece(const SentencePieceModel& model) {
  const std::vector<std::string>& pieces = model.vocabulary.pieces;
  const auto piece = [&](int32_t id) { return id < 0 ? std::string() : pieces[id]; };
  Json config = Json::object();
  for (const auto& [field, id] : {std::pair<const char*, int32_t>{"bos_token", model.bos_id},
                                  {"eos_token", model.eos_id},
                                  {"unk_token", model.unk_id},
                                  {"pad_token", model.pad_id}}) {
    if (id >= 0) config[field] = pieces[id];
  }
  config["add_bos_token"] = true;
  config["add_eos_token"] = false;
  const Json tokenizer =
      model.type == SentencePieceModel::Type::kUnigram
          ? SentencePieceUnigramTokenizerJson(model.vocabulary, model.unk_id, model.normalization)
          : SentencePieceBpeTokenizerJson(model.vocabulary, piece(model.unk_id),
                                          model.normalization);
  TokenizerFiles files;
  // Pieces are bytes; invalid UTF-8 becomes U+FFFD rather than an exception.
  files.tokenizer_json = tokenizer.dump(-1, ' ', false, Json::error_handler_t::replace);
  files.tokenizer_config_json = config.dump(-1, ' ', false, Json::error_handler_t::replace);
  return files;
}

absl::StatusOr<SentencePieceModel> ReadSentencePieceModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxSentencePieceFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size, " bytes is not a size of a ",
                                                   "SentencePiece model (at most ",
                                                   kMaxSentencePieceFileBytes, ")"));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (size > 0 && !in.read(bytes.data(), size)) {
    return absl::DataLossError(absl::StrCat(path, ": read failed"));
  }
  absl::StatusOr<SentencePieceModel> model = ParseSentencePieceModel(bytes);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  return model;
}

}  // namespace llmserve::common::tokenizer
