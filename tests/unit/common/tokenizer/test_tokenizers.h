// Small tokenizer.json documents built in code, so unit tests do not depend on external data:
// a byte-level BPE (GPT-2 style) and a SentencePiece-style BPE with byte fallback (Llama-2
// style). Both have a few merges so that merge order matters.
#ifndef LLMSERVE_TESTS_UNIT_TOKENIZER_TEST_TOKENIZERS_H_
#define LLMSERVE_TESTS_UNIT_TOKENIZER_TEST_TOKENIZERS_H_

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "nlohmann/json.hpp"

namespace llmserve::common::tokenizer::testing {

using nlohmann::json;

// A BPE model: vocab = `tokens` in order (id = index), merges as "left right" strings.
inline json BpeModelJson(const std::vector<std::string>& tokens,
                         const std::vector<std::string>& merges, json extra = json::object()) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  for (auto it = extra.begin(); it != extra.end(); ++it) model[it.key()] = it.value();
  return model;
}

inline json AddedTokenJson(int id, const std::string& content, bool special,
                           bool normalized = false) {
  return {
      {"id", id},        {"content", content}, {"special", special},  {"normalized", normalized},
      {"lstrip", false}, {"rstrip", false},    {"single_word", false}};
}

// GPT-2 style: the 256 byte-level chars, then merged tokens; <|endoftext|> is special.
inline std::string ByteLevelTokenizerJson() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendByteLevel(std::string(1, static_cast<char>(b)), &c);
    tokens.push_back(c);
  }
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a",     "e r",
                                           "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2"};
  for (const std::string& m : merges)
    tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  tokens.push_back("<|endoftext|>");
  const int eot = static_cast<int>(tokens.size()) - 1;
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  json tok = {{"version", "1.0"},
              {"added_tokens", {AddedTokenJson(eot, "<|endoftext|>", true)}},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model", BpeModelJson(tokens, merges)}};
  return tok.dump();
}

// Llama-2 style: <unk> <s> </s>, 256 byte tokens, "▁" and letters, merges; byte fallback.
inline std::string SpmTokenizerJson() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
  }
  for (const char* t : {"▁", "a", "b", "c", "d", "e", "h", "l", "o", "r", "w", "1", "2"}) {
    tokens.push_back(t);
  }
  const std::vector<std::string> merges = {"▁ h", "l l", "e ll",  "▁h ell", "▁hell o",
                                           "▁ w", "o r", "▁w or", "l d",    "▁wor ld"};
  for (const std::string& m : merges)
    tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  json normalizer = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", "▁"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  json decoder = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  json post = {{"type", "TemplateProcessing"},
               {"single",
                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  json tok = {
      {"version", "1.0"},
      {"added_tokens",
       {AddedTokenJson(0, "<unk>", true), AddedTokenJson(1, "<s>", true),
        AddedTokenJson(2, "</s>", true)}},
      {"normalizer", normalizer},
      {"pre_tokenizer", nullptr},
      {"post_processor", post},
      {"decoder", decoder},
      {"model",
       BpeModelJson(tokens, merges,
                    {{"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}})}};
  return tok.dump();
}

inline constexpr char kSpmConfigJson[] =
    R"({"add_bos_token": true, "add_eos_token": false, "bos_token": "<s>", "eos_token": "</s>"})";

}  // namespace llmserve::common::tokenizer::testing

#endif  // LLMSERVE_TESTS_UNIT_TOKENIZER_TEST_TOKENIZERS_H_
