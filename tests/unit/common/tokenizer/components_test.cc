// Unit tests of the tokenizer components on tiny, hand-written configurations: each
// pre-tokenizer behavior, normalizer and decoder, BPE merge order, byte fallback, unk handling.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/unit/common/tokenizer/test_tokenizers.h"

namespace llmserve::common::tokenizer {
namespace {

using nlohmann::json;
using testing::BpeModelJson;

// Pre-tokenizes `text` (as the start of the input) and joins the splits with '|'.
std::string PreTokenize(const json& config, const std::string& text, bool at_start = true) {
  auto pre = PreTokenizerFromJson(config);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return "<error>";
  std::vector<PreTokenSplit> splits = {{text, at_start}};
  EXPECT_TRUE((*pre)->PreTokenize(&splits).ok());
  std::vector<std::string> parts;
  for (const auto& s : splits) parts.push_back(s.text);
  return absl::StrJoin(parts, "|");
}

json SplitDash(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"String", "-"}}},
          {"behavior", behavior},
          {"invert", invert}};
}

TEST(tokenizer_pre_tokenizer, SplitBehaviorsMatchHuggingFace) {
  EXPECT_EQ(PreTokenize(SplitDash("Removed"), "a-b--c"), "a|b|c");
  EXPECT_EQ(PreTokenize(SplitDash("Isolated"), "a-b--c"), "a|-|b|-|-|c");
  EXPECT_EQ(PreTokenize(SplitDash("MergedWithPrevious"), "a-b--c"), "a-|b-|-|c");
  EXPECT_EQ(PreTokenize(SplitDash("MergedWithNext"), "a-b--c"), "a|-b|-|-c");
  EXPECT_EQ(PreTokenize(SplitDash("Contiguous"), "a-b--c"), "a|-|b|--|c");
  EXPECT_EQ(PreTokenize(SplitDash("Removed", /*invert=*/true), "a-b--c"), "-|-|-");
  const json regex = {{"type", "Split"},
                      {"pattern", {{"Regex", "\\d+"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  EXPECT_EQ(PreTokenize(regex, "ab12cd345"), "ab|12|cd|345");
}

TEST(tokenizer_pre_tokenizer, DigitsUseUnicodeNumericAndIndividualFlag) {
  const json individual = {{"type", "Digits"}, {"individual_digits", true}};
  const json grouped = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(PreTokenize(individual, "a123b"), "a|1|2|3|b");
  EXPECT_EQ(PreTokenize(grouped, "a123b"), "a|123|b");
  EXPECT_EQ(PreTokenize(individual, "x ½²٣"), "x |½|²|٣");  // No, No, Nd
}

TEST(tokenizer_pre_tokenizer, PunctuationWhitespaceAndWhitespaceSplit) {
  EXPECT_EQ(PreTokenize({{"type", "Punctuation"}}, "hi!?x"), "hi|!|?|x");
  EXPECT_EQ(PreTokenize({{"type", "Punctuation"}, {"behavior", "Contiguous"}}, "hi!?x«"),
            "hi|!?|x|«");
  EXPECT_EQ(PreTokenize({{"type", "Whitespace"}}, "Hello, world!  ok"), "Hello|,|world|!|ok");
  EXPECT_EQ(PreTokenize({{"type", "WhitespaceSplit"}}, " a  b\tc\u3000d "), "a|b|c|d");
}

TEST(tokenizer_pre_tokenizer, ByteLevelMapsBytesAfterTheGpt2Regex) {
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(PreTokenize(byte_level, "Hello world's  12!\n"), "Hello|Ġworld|'s|Ġ|Ġ12|!|Ċ");
  const json prefix = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(PreTokenize(prefix, "hé"), "ĠhÃ©");
  // \s is Unicode-aware (PCRE2_UCP): U+3000 is whitespace, not a symbol.
  EXPECT_EQ(PreTokenize(byte_level, "a\u3000b"), "a|ãĢĢ|b");
}

TEST(tokenizer_pre_tokenizer, MetaspacePrependSchemes) {
  const json always = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  const json first = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  const json never = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}, {"split", true}};
  EXPECT_EQ(PreTokenize(always, "hello world"), "▁hello|▁world");
  EXPECT_EQ(PreTokenize(first, "hello world"), "▁hello▁world");
  EXPECT_EQ(PreTokenize(first, "hello", /*at_start=*/false), "hello");
  EXPECT_EQ(PreTokenize(never, "hello world"), "hello|▁world");
  const json sequence = {{"type", "Sequence"},
                         {"pretokenizers", {{{"type", "WhitespaceSplit"}}, always}}};
  EXPECT_EQ(PreTokenize(sequence, "a  b"), "▁a|▁b");
}

std::string Normalize(const json& config, std::string text) {
  auto normalizer = NormalizerFromJson(config);
  EXPECT_TRUE(normalizer.ok()) << normalizer.status();
  if (!normalizer.ok()) return "<error>";
  EXPECT_TRUE((*normalizer)->Normalize(&text).ok());
  return text;
}

TEST(tokenizer_normalizer, EachNormalizer) {
  EXPECT_EQ(Normalize({{"type", "NFC"}}, "e\u0301"), "\u00e9");
  EXPECT_EQ(Normalize({{"type", "NFD"}}, "\u00e9"), "e\u0301");
  EXPECT_EQ(Normalize({{"type", "NFKC"}}, "\ufb01\u00b2"), "fi2");
  EXPECT_EQ(Normalize({{"type", "NFKD"}}, "\u00e9\ufb01"), "e\u0301fi");
  EXPECT_EQ(Normalize({{"type", "Lowercase"}}, "HeLLo ÄÖ"), "hello äö");
  EXPECT_EQ(Normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, "  a b  "),
            "a b  ");
  EXPECT_EQ(Normalize({{"type", "Strip"}}, " \t a b \n"), "a b");
  EXPECT_EQ(Normalize({{"type", "StripAccents"}}, "e\u0301a"), "ea");
  EXPECT_EQ(Normalize({{"type", "Prepend"}, {"prepend", "▁"}}, "hi"), "▁hi");
  EXPECT_EQ(Normalize({{"type", "Prepend"}, {"prepend", "▁"}}, ""), "");
  EXPECT_EQ(
      Normalize({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}, "a b c"),
      "a▁b▁c");
  EXPECT_EQ(Normalize({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}},
                      "a   b  c"),
            "a b c");
  const json seq = {{"type", "Sequence"},
                    {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}};
  EXPECT_EQ(Normalize(seq, "\ufb01X"), "fix");
}

std::string DecodeTokens(const json& config, std::vector<std::string> tokens) {
  auto decoder = DecoderFromJson(config);
  EXPECT_TRUE(decoder.ok()) << decoder.status();
  if (!decoder.ok()) return "<error>";
  (*decoder)->DecodeChain(&tokens, DecodeMode::kText);
  return absl::StrJoin(tokens, "|");
}

TEST(tokenizer_decoder, EachDecoder) {
  EXPECT_EQ(DecodeTokens({{"type", "ByteLevel"}}, {"Hello", "Ġw", "Ã©", "<|x|>"}), "Hello wé<|x|>");
  EXPECT_EQ(DecodeTokens({{"type", "ByteLevel"}}, {"Ã"}), "\uFFFD");  // lone 0xC3: lossy
  EXPECT_EQ(DecodeTokens({{"type", "ByteFallback"}}, {"a", "<0xE2>", "<0x82>", "<0xAC>", "b"}),
            "a|€|b");
  // HF: one U+FFFD per byte of an invalid run.
  EXPECT_EQ(DecodeTokens({{"type", "ByteFallback"}}, {"<0xE2>", "<0x82>", "x"}), "\uFFFD|\uFFFD|x");
  EXPECT_EQ(DecodeTokens({{"type", "Fuse"}}, {"a", "b", "c"}), "abc");
  EXPECT_EQ(DecodeTokens({{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                         {"▁a", "b▁"}),
            " a|b ");
  EXPECT_EQ(DecodeTokens({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}},
                         {"  a ", " b"}),
            " a|b");
  EXPECT_EQ(
      DecodeTokens({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}},
                   {"▁hi", "▁there"}),
      "hi| there");
  EXPECT_EQ(DecodeTokens({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}},
                         {"▁hi"}),
            " hi");
}

std::unique_ptr<Tokenizer> Load(const json& model, const json& extra = json::object()) {
  json doc = {{"model", model}, {"added_tokens", json::array()}};
  for (auto it = extra.begin(); it != extra.end(); ++it) doc[it.key()] = it.value();
  auto tok = Tokenizer::FromJson(doc.dump(), "");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& tok, const std::string& text) {
  auto ids = tok.Encode(text, false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(tokenizer_bpe, MergesApplyInRankOrderNotLeftToRight) {
  const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc"};
  // "b c" outranks "a b": abc -> a|bc -> abc via "a bc".
  auto tok = Load(BpeModelJson(vocab, {"b c", "a b", "a bc"}));
  EXPECT_EQ(Ids(*tok, "abc"), (std::vector<int32_t>{5}));
  // Without "a bc" the result stops at a|bc although "a b" exists.
  tok = Load(BpeModelJson(vocab, {"b c", "a b"}));
  EXPECT_EQ(Ids(*tok, "abc"), (std::vector<int32_t>{0, 4}));
  // Pair-array merges (newer HF files) mean the same thing.
  tok = Load(BpeModelJson(
      vocab, {}, {{"merges", json::array({json::array({"a", "b"}), json::array({"b", "c"})})}}));
  EXPECT_EQ(Ids(*tok, "abc"), (std::vector<int32_t>{3, 2}));
}

TEST(tokenizer_bpe, EqualRanksMergeLeftmostFirst) {
  auto tok = Load(BpeModelJson({"a", "aa"}, {"a a"}));
  EXPECT_EQ(Ids(*tok, "aaa"), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(Ids(*tok, "aaaa"), (std::vector<int32_t>{1, 1}));
}

TEST(tokenizer_bpe, ByteFallbackUnkAndFuseUnk) {
  std::vector<std::string> vocab = {"<unk>", "a", "<0xE2>", "<0x82>", "<0xAC>"};
  auto fallback = Load(BpeModelJson(vocab, {}, {{"byte_fallback", true}, {"unk_token", "<unk>"}}));
  EXPECT_EQ(Ids(*fallback, "a€"), (std::vector<int32_t>{1, 2, 3, 4}));
  // "é" has no byte tokens: unk; consecutive unks fuse only with fuse_unk.
  EXPECT_EQ(Ids(*fallback, "aééa"), (std::vector<int32_t>{1, 0, 0, 1}));
  auto fused = Load(BpeModelJson(vocab, {}, {{"fuse_unk", true}, {"unk_token", "<unk>"}}));
  EXPECT_EQ(Ids(*fused, "aééa"), (std::vector<int32_t>{1, 0, 1}));
  auto no_unk = Load(BpeModelJson(vocab, {}));
  EXPECT_EQ(Ids(*no_unk, "aéa"), (std::vector<int32_t>{1, 1}));  // HF drops the char
}

TEST(tokenizer_added_vocabulary, LeftmostLongestMatchBeforePreTokenization) {
  const json added = {testing::AddedTokenJson(10, "<x>", true),
                      testing::AddedTokenJson(11, "<xy>", true),
                      testing::AddedTokenJson(12, "y>b", false)};
  json doc = {{"model", BpeModelJson({"a", "b", "<", ">", "x", "y"}, {})}, {"added_tokens", added}};
  auto tok = Tokenizer::FromJson(doc.dump(), "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // At offset 1 both <x> and <xy> match: the longer wins; "y>b" starts later and loses.
  EXPECT_EQ(Ids(**tok, "a<xy>b"), (std::vector<int32_t>{0, 11, 1}));
  EXPECT_EQ(Ids(**tok, "<x>y>b"), (std::vector<int32_t>{10, 12}));
  EXPECT_EQ(*(*tok)->Decode({0, 11, 1}, /*skip_special_tokens=*/true),
            "a b");  // no decoder: joined
  EXPECT_TRUE((*tok)->IsSpecial(11));
  EXPECT_FALSE((*tok)->IsSpecial(12));
}

TEST(tokenizer_spm, PrependPerPieceEmptyInputAndBos) {
  auto tok = Tokenizer::FromJson(testing::SpmTokenizerJson(), testing::kSpmConfigJson);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto id = [&](const char* t) { return *(*tok)->TokenToId(t); };
  EXPECT_EQ(Ids(**tok, ""), (std::vector<int32_t>{}));
  EXPECT_EQ(Ids(**tok, "hello world"), (std::vector<int32_t>{id("▁hello"), id("▁world")}));
  // Each piece between added tokens gets its own ▁.
  EXPECT_EQ(Ids(**tok, "hello</s>hello"), (std::vector<int32_t>{id("▁hello"), 2, id("▁hello")}));
  EXPECT_EQ(Ids(**tok, "\n"), (std::vector<int32_t>{id("▁"), id("<0x0A>")}));
  EXPECT_EQ(*(*tok)->Encode("hello", true), (std::vector<int32_t>{1, id("▁hello")}));
  EXPECT_EQ(*(*tok)->Decode({1, id("▁hello"), id("▁world"), id("<0x0A>")}, true), "hello world\n");
  EXPECT_EQ(*(*tok)->Decode({1, id("▁hello")}, false), "<s> hello");
}

TEST(tokenizer_errors, InvalidUtf8AndOutOfRangeIds) {
  auto tok = Tokenizer::FromJson(testing::ByteLevelTokenizerJson(), "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto bad = (*tok)->Encode("abc\xC3(", false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("byte offset 3"), std::string::npos) << bad.status();
  for (int32_t id : {-1, (*tok)->vocab_size(), 1 << 30}) {
    auto text = (*tok)->Decode({1, id}, false);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(text.status().message().find(std::to_string(id)), std::string::npos);
  }
}

struct LoadErrorCase {
  std::string name;
  json doc;
  std::string fragment;
};

TEST(tokenizer_errors, UnsupportedOrMalformedComponentsNameTheComponent) {
  const json bpe = BpeModelJson({"a", "b", "ab"}, {"a b"});
  auto with = [&](const char* key, json value) {
    json doc = {{"model", bpe}};
    doc[key] = value;
    return doc;
  };
  const std::vector<LoadErrorCase> cases = {
      {"wordpiece", {{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}}, "WordPiece"},
      {"unigram", {{"model", {{"type", "Unigram"}, {"vocab", json::array()}}}}, "Unigram"},
      {"unigram repeated",
       {{"model",
         {{"type", "Unigram"},
          {"vocab", json::array({json::array({"a", -1.0}), json::array({"a", -2.0})})}}}},
       "model Unigram: vocab[1] \"a\" is repeated"},
      {"unigram score",
       {{"model", {{"type", "Unigram"}, {"vocab", json::array({json::array({"a", "high"})})}}}},
       "vocab[0] must be a [piece, finite score] pair"},
      {"unigram unk_id",
       {{"model",
         {{"type", "Unigram"}, {"unk_id", 1}, {"vocab", json::array({json::array({"a", -1.0})})}}}},
       "\"unk_id\" must be null or an index below 1"},
      {"no model", json::object(), "model"},
      {"pre_tokenizer", with("pre_tokenizer", {{"type", "BertPreTokenizer"}}), "BertPreTokenizer"},
      {"normalizer", with("normalizer", {{"type", "Precompiled"}}), "Precompiled"},
      {"decoder", with("decoder", {{"type", "WordPiece"}}), "decoder type \"WordPiece\""},
      {"bad regex",
       with("pre_tokenizer",
            {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}}),
       "pre_tokenizer Split: regex"},
      {"bad behavior",
       with("pre_tokenizer",
            {{"type", "Split"}, {"pattern", {{"String", "a"}}}, {"behavior", "Sideways"}}),
       "Sideways"},
      {"bad merge", {{"model", BpeModelJson({"a", "b", "ab"}, {"ab"})}}, "merge 0"},
      {"oov merge", {{"model", BpeModelJson({"a", "b"}, {"a b"})}}, "not in the vocabulary"},
      {"merge type", {{"model", BpeModelJson({"a", "b", "ab"}, {}, {{"merges", {1}}})}}, "merge 0"},
      {"vocab type",
       {{"model", {{"type", "BPE"}, {"vocab", {{"a", "x"}}}, {"merges", json::array()}}}},
       "vocab entry \"a\""},
      {"added token", with("added_tokens", {{{"content", "x"}}}), "added_tokens[0]"},
      {"post_processor", with("post_processor", {{"type", "Mystery"}}), "post_processor"},
  };
  for (const LoadErrorCase& c : cases) {
    auto tok = Tokenizer::FromJson(c.doc.dump(), "");
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(tok.status().message().find(c.fragment), std::string::npos)
        << c.name << ": " << tok.status();
  }
  EXPECT_NE(Tokenizer::FromJson("{not json", "").status().message().find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(Tokenizer::FromJson("[1]", "").status().message().find("must be an object"),
            std::string::npos);
  EXPECT_FALSE(Tokenizer::FromJson(testing::ByteLevelTokenizerJson(), "{bad").ok());
  EXPECT_EQ(Tokenizer::FromDirectory("/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace llmserve::common::tokenizer
