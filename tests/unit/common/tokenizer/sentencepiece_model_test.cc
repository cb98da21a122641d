// ParseSentencePieceModel on hand-built ModelProto bytes: a small BPE model becomes a tokenizer
// that merges by score, honours the normalizer_spec flags and falls back to bytes; what is not
// supported is refused naming the field; hostile bytes (truncated varints, lengths past the end,
// wrong wire types, bad piece types, every truncation of a valid file) are errors, never crashes.

#include "common/tokenizer/sentencepiece_model.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace llmserve::common::tokenizer {
namespace {

std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

std::string Tag(int field, int wire) { return Varint((uint64_t(field) << 3) | wire); }
std::string Bytes(int field, const std::string& value) {
  return Tag(field, 2) + Varint(value.size()) + value;
}
std::string Int(int field, int64_t value) { return Tag(field, 0) + Varint(uint64_t(value)); }
std::string Float(int field, float value) {
  std::string out = Tag(field, 5);
  char raw[4];
  std::memcpy(raw, &value, 4);
  return out + std::string(raw, 4);
}

std::string Piece(const std::string& piece, float score, int type = 0) {
  std::string message = Bytes(1, piece) + Float(2, score);
  if (type != 0) message += Int(3, type);
  return Bytes(1, message);
}

const std::string kSpace = "\xE2\x96\x81";

// <unk> <s> </s> <0x61> <0x62> ▁ a b ab ▁ab, then the trainer and normalizer specs.
std::string Pieces() {
  return Piece("<unk>", 0, 2) + Piece("<s>", 0, 3) + Piece("</s>", 0, 3) + Piece("<0x61>", 0, 6) +
         Piece("<0x62>", 0, 6) + Piece(kSpace, -1) + Piece("a", -2) + Piece("b", -3) +
         Piece("ab", -4) + Piece(kSpace + "ab", -5);
}
std::string BpeTrainer(bool byte_fallback = true) {
  return Bytes(2, Int(3, 2) + Int(35, byte_fallback ? 1 : 0));
}
std::string Normalizer(bool remove_extra_whitespaces) {
  return Bytes(3, Bytes(1, "identity") + Int(4, remove_extra_whitespaces ? 1 : 0));
}
std::string Model(bool remove_extra_whitespaces = false) {
  return Pieces() + BpeTrainer() + Normalizer(remove_extra_whitespaces);
}

std::unique_ptr<Tokenizer> Build(const std::string& bytes) {
  absl::StatusOr<SentencePieceModel> model = ParseSentencePieceModel(bytes);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  const TokenizerFiles files = TokenizerFilesFromSentencePiece(*model);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::FromJson(files.tokenizer_json, files.tokenizer_config_json);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

// The message of a failed parse, or "ok" (so that a test shows what it got).
std::string ParseError(const std::string& bytes) {
  absl::StatusOr<SentencePieceModel> model = ParseSentencePieceModel(bytes);
  return model.ok() ? "ok" : std::string(model.status().message());
}

TEST(SentencePieceModelTest, ReadsPiecesSpecsAndDefaults) {
  absl::StatusOr<SentencePieceModel> model = ParseSentencePieceModel(Model());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->vocabulary.pieces.size(), 10u);
  EXPECT_EQ(model->vocabulary.pieces[9], kSpace + "ab");
  EXPECT_EQ(model->vocabulary.scores[9], -5.0f);
  EXPECT_EQ(model->vocabulary.types[0], kPieceUnknown);
  EXPECT_EQ(model->vocabulary.types[3], kPieceByte);
  EXPECT_EQ(model->vocabulary.types[6], kPieceNormal);  // absent: NORMAL
  EXPECT_EQ(model->type, SentencePieceModel::Type::kBpe);
  EXPECT_TRUE(model->normalization.byte_fallback);
  EXPECT_TRUE(model->normalization.add_dummy_prefix);  // absent: true
  EXPECT_FALSE(model->normalization.remove_extra_whitespaces);
  EXPECT_EQ(model->unk_id, 0);
  EXPECT_EQ(model->bos_id, 1);
  EXPECT_EQ(model->eos_id, 2);
  EXPECT_EQ(model->pad_id, -1);
  // Negative int32s are 10-byte varints.
  model = ParseSentencePieceModel(Pieces() + Bytes(2, Int(3, 2) + Int(41, -1)));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->bos_id, -1);
}

TEST(SentencePieceModelTest, EncodesByScoreWithTheDummyPrefixAndByteFallback) {
  std::unique_ptr<Tokenizer> tok = Build(Model());
  ASSERT_NE(tok, nullptr);
  // "▁ab" (9) is a piece; "ba" is not, so "▁ba" is ▁ b a; spaces are never collapsed here.
  EXPECT_EQ(*tok->Encode("ab", true), (std::vector<int32_t>{1, 9}));
  EXPECT_EQ(*tok->Encode("ab ba", false), (std::vector<int32_t>{9, 5, 7, 6}));
  EXPECT_EQ(*tok->Decode({9, 5, 7, 6}, false), "ab ba");
  EXPECT_EQ(*tok->Encode("a  b", false), (std::vector<int32_t>{5, 6, 5, 5, 7}));
}

TEST(SentencePieceModelTest, RemoveExtraWhitespacesStripsAndCollapsesSpacesOnly) {
  std::unique_ptr<Tokenizer> tok = Build(Model(/*remove_extra_whitespaces=*/true));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(*tok->Encode("  a   b ", false), *tok->Encode("a b", false));
  // A leading newline (unknown here) is not a space: it stays.
  EXPECT_NE(*tok->Encode("\na", false), *tok->Encode("a", false));
}

TEST(SentencePieceModelTest, WithoutTheDummyPrefixOrEscapingTheFlagsAreHonoured) {
  const std::string bytes =
      Pieces() + BpeTrainer() + Bytes(3, Int(3, 0) + Int(4, 0));  // add_dummy_prefix false
  std::unique_ptr<Tokenizer> tok = Build(bytes);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(*tok->Encode("ab", false), (std::vector<int32_t>{8}));
}

TEST(SentencePieceModelTest, UnigramModelsTakeTheBestScoringSegmentation) {
  // model_type absent is UNIGRAM. "▁ab" (9) scores -5, "▁" + "ab" -5.5 (piece scores changed
  // below), "▁" + "a" + "b" -6: the first wins. "ba" is ▁ b a; "c" is no piece: bytes are <0x63>,
  // absent, so unk (0).
  std::string pieces = Piece("<unk>", 0, 2) + Piece("<s>", 0, 3) + Piece("</s>", 0, 3) +
                       Piece("<0x61>", 0, 6) + Piece("<0x62>", 0, 6) + Piece(kSpace, -1) +
                       Piece("a", -2) + Piece("b", -3) + Piece("ab", -4.5f) +
                       Piece(kSpace + "ab", -5);
  std::unique_ptr<Tokenizer> tok =
      Build(pieces + Bytes(2, Int(35, 1)) + Normalizer(/*remove_extra_whitespaces=*/false));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(*tok->Encode("ab", true), (std::vector<int32_t>{1, 9}));
  EXPECT_EQ(*tok->Encode("ab ba", false), (std::vector<int32_t>{9, 5, 7, 6}));
  EXPECT_EQ(*tok->Decode({9, 5, 7, 6}, false), "ab ba");
  EXPECT_EQ(*tok->Encode("acb", false), (std::vector<int32_t>{5, 6, 0, 7}));
  // "ab" cheaper than "a" + "b": then ▁ + ab.
  pieces = Piece("<unk>", 0, 2) + Piece(kSpace, -1) + Piece("a", -2) + Piece("b", -3) +
           Piece("ab", -3.5f) + Piece(kSpace + "ab", -5);
  tok = Build(pieces + Bytes(2, Int(3, 1)) + Normalizer(false));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(*tok->Encode("ab", false), (std::vector<int32_t>{1, 4}));
}

TEST(SentencePieceModelTest, RefusesWhatIsNotSupportedNamingTheField) {
  EXPECT_NE(ParseError(Pieces() + Bytes(2, Int(3, 3))).find("trainer_spec.model_type WORD"),
            std::string::npos);
  EXPECT_NE(ParseError(Pieces() + Bytes(2, Int(3, 4))).find("CHAR"), std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(3, Bytes(1, "nmt_nfkc") + Bytes(2, "\x01\x02")))
                .find("normalizer_spec.precompiled_charsmap"),
            std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(3, Bytes(6, "a\tb"))).find("normalization_rule_tsv"),
            std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(2, Int(24, 1))).find("treat_whitespace_as_suffix"),
            std::string::npos);
}

TEST(SentencePieceModelTest, InvalidValuesAreErrorsNamingTheField) {
  EXPECT_NE(ParseError(BpeTrainer()).find("no pieces"), std::string::npos);
  EXPECT_NE(ParseError(Piece("a", 0, 9) + BpeTrainer()).find("pieces[0].type: 9"),
            std::string::npos);
  EXPECT_NE(ParseError(Piece("a", 0) + Piece("", 0) + BpeTrainer()).find("pieces[1].piece"),
            std::string::npos);
  EXPECT_NE(ParseError(Piece("a", 0) + Piece("a", 0) + BpeTrainer()).find("repeated"),
            std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(2, Int(41, 10))).find("trainer_spec.bos_id 10"),
            std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(2, Int(43, -2))).find("trainer_spec.pad_id -2"),
            std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(2, Int(40, int64_t{1} << 40))).find("not an int32"),
            std::string::npos);
  EXPECT_NE(ParseError(Model() + Bytes(2, Int(3, 7))).find("model_type"), std::string::npos);
}

TEST(SentencePieceModelTest, HostileBytesAreErrorsNotCrashes) {
  EXPECT_NE(ParseError("\x0a\x80").find("truncated varint"), std::string::npos);
  EXPECT_NE(ParseError("\x0a\x05"
                       "ab")
                .find("runs past the end"),
            std::string::npos);
  EXPECT_NE(ParseError(Tag(1, 2) + Varint(uint64_t{1} << 63)).find("runs past the end"),
            std::string::npos);
  EXPECT_NE(ParseError(Tag(1, 2) + std::string(11, '\xFF')).find("longer than 10 bytes"),
            std::string::npos);
  EXPECT_NE(ParseError(Int(1, 5)).find("pieces: wire type 0"), std::string::npos);
  EXPECT_NE(ParseError(Bytes(1, Tag(2, 5) + "\x01")).find("truncated float"), std::string::npos);
  EXPECT_NE(ParseError(Bytes(1, Int(2, 1))).find("score: wire type 0"), std::string::npos);
  EXPECT_NE(ParseError(Tag(9, 3)).find("unsupported wire type 3"), std::string::npos);
  EXPECT_NE(ParseError(Varint(0)).find("invalid field number 0"), std::string::npos);
  // Unknown fields of every wire type are skipped.
  EXPECT_EQ(ParseError(Model() + Int(99, 1) + Tag(98, 1) + std::string(8, '\0') + Float(97, 1) +
                       Bytes(96, "xyz")),
            "ok");
  // Every truncation of a valid model either parses or fails cleanly.
  const std::string bytes = Model();
  for (size_t n = 0; n < bytes.size(); ++n) ParseError(bytes.substr(0, n));
}

}  // namespace
}  // namespace llmserve::common::tokenizer
