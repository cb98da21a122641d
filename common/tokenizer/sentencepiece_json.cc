#include "common/tokenizer/sentencepiece_json.h"

#include <algorithm>
#include <cstddef>

#include "absl/container/flat_hash_map.h"

namespace llmserve::common::tokenizer {
namespace {

constexpr const char* kSentencePieceSpace =
    "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// Byte offsets where UTF-8 characters start in `piece`, past the first (Python's str indices).
std::vector<size_t> SentencePieceCharacterBoundaries(const std::string& piece) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < piece.size(); ++i) {
    if ((static_cast<unsigned char>(piece[i]) & 0xC0) != 0x80) cuts.push_back(i);
  }
  return cuts;
}

// Hugging Face's SentencePieceExtractor.extract(vocab_scores) (the header says what it does).
Json SentencePieceMerges(const SentencePieceVocabulary& v) {
  absl::flat_hash_map<std::string, int64_t> id_of;
  // Python's dict keeps the last id of a repeated piece.
  for (size_t i = 0; i < v.pieces.size(); ++i) id_of[v.pieces[i]] = static_cast<int64_t>(i);
  struct Merge {
    int64_t left, right;
    float score;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    const std::string& piece = v.pieces[i];
    std::vector<Merge> local;
    for (size_t cut : SentencePieceCharacterBoundaries(piece)) {
      const auto left = id_of.find(piece.substr(0, cut));
      const auto right = id_of.find(piece.substr(cut));
      if (left != id_of.end() && right != id_of.end()) {
        local.push_back({left->second, right->second, v.scores[i]});
      }
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  Json out = Json::array();
  for (const Merge& m : merges) out.push_back({v.pieces[m.left], v.pieces[m.right]});
  return out;
}

Json SentencePieceReplaceRegex(const char* regex, const char* content) {
  return {{"type", "Replace"}, {"pattern", {{"Regex", regex}}}, {"content", content}};
}

Json SentencePieceNormalizerJson(const SentencePieceNormalization& n) {
  Json steps = Json::array();
  if (n.remove_extra_whitespaces) {
    // SentencePiece's identity rule: only U+0020 counts; \z, since $ also matches before "\n".
    steps.push_back(SentencePieceReplaceRegex("^ +| +\\z", ""));
    steps.push_back(SentencePieceReplaceRegex(" {2,}", " "));
  }
  if (n.add_dummy_prefix) steps.push_back({{"type", "Prepend"}, {"prepend", kSentencePieceSpace}});
  if (n.escape_whitespaces) {
    steps.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSentencePieceSpace}});
  }
  if (steps.empty()) return nullptr;
  return {{"type", "Sequence"}, {"normalizers", steps}};
}

Json SentencePieceDecoderJson(const SentencePieceNormalization& n) {
  Json steps = {
      {{"type", "Replace"}, {"pattern", {{"String", kSentencePieceSpace}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}}};
  if (n.add_dummy_prefix) {
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  return {{"type", "Sequence"}, {"decoders", steps}};
}

// The whole tokenizer.json around `model`: added tokens, normalizer and decoder from the
// SentencePiece flags, no pre-tokenizer (the model sees the whole normalized text).
Json SentencePieceTokenizerJson(const SentencePieceVocabulary& vocabulary,
                                const SentencePieceNormalization& normalization, Json model);

}  // namespace

Json VocabJson(const std::vector<std::string>& pieces) {
  Json vocab = Json::object();
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
  return vocab;
}

Json AddedTokensJson(const std::vector<std::string>& pieces, const std::vector<int64_t>& types) {
  Json added = Json::array();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t type = types[i];
    if (type != kPieceControl && type != kPieceUserDefined && type != kPieceUnknown) continue;
    added.push_back({{"id", i},
                     {"content", pieces[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", type == kPieceUserDefined},
                     {"special", type != kPieceUserDefined}});
  }
  return added;
}

namespace {

Json SentencePieceTokenizerJson(const SentencePieceVocabulary& vocabulary,
                                const SentencePieceNormalization& normalization, Json model) {
  return Json{{"version", "1.0"},
              {"added_tokens", AddedTokensJson(vocabulary.pieces, vocabulary.types)},
              {"normalizer", SentencePieceNormalizerJson(normalization)},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", SentencePieceDecoderJson(normalization)},
              {"model", std::move(model)}};
}

}  // namespace

Json SentencePieceBpeTokenizerJson(const SentencePieceVocabulary& vocabulary,
                                   const std::string& unk_token,
                                   const SentencePieceNormalization& normalization) {
  return SentencePieceTokenizerJson(
      vocabulary, normalization,
      {{"type", "BPE"},
       {"dropout", nullptr},
       {"unk_token", unk_token.empty() ? Json(nullptr) : Json(unk_token)},
       {"continuing_subword_prefix", nullptr},
       {"end_of_word_suffix", nullptr},
       {"fuse_unk", true},
       {"byte_fallback", normalization.byte_fallback},
       {"ignore_merges", false},
       {"vocab", VocabJson(vocabulary.pieces)},
       {"merges", SentencePieceMerges(vocabulary)}});
}

Json SentencePieceUnigramTokenizerJson(const SentencePieceVocabulary& vocabulary, int32_t unk_id,
                                       const SentencePieceNormalization& normalization) {
  Json vocab = Json::array();
  for (size_t i = 0; i < vocabulary.pieces.size(); ++i) {
    vocab.push_back({vocabulary.pieces[i], vocabulary.scores[i]});
  }
  return SentencePieceTokenizerJson(vocabulary, normalization,
                                    {{"type", "Unigram"},
                                     {"unk_id", unk_id < 0 ? Json(nullptr) : Json(unk_id)},
                                     {"byte_fallback", normalization.byte_fallback},
                                     {"vocab", std::move(vocab)}});
}

}  // namespace llmserve::common::tokenizer
