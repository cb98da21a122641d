#include "tools/make_model/bpe_builder.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/tokenizer/byte_level.h"

namespace llmserve::tools {
namespace {

// Training text: ordinary prose and some code, so that frequent English words and common code
// fragments become single tokens, as in real vocabularies.
constexpr char kCorpus[] = R"(The quick brown fox jumps over the lazy dog. Once upon a time, there
was a small village by the sea where the people worked hard and the children played in the sun.
Every morning the fishermen went out in their boats, and every evening they came back with the
day's catch. The market was full of voices, colors and the smell of fresh bread. In the middle of
the village there was an old tree, and under the tree the old men told stories about the past.
They talked about storms and ships, about the war and the peace that came after it, about the
people who left and the people who came back. The children listened and asked questions: what
is the sea like far away, where do the birds go in winter, why is the sky blue? Nobody knew all
the answers, but everybody had something to say. Hello world! How are you today? I am fine,
thank you. What time is it? It is ten past nine in the morning. The weather is nice and warm.
A language model predicts the next token of a text from the tokens before it. It is trained on a
large amount of text and learns the patterns of language: grammar, facts and style. Serving such
a model means running it for many users at once, as fast as the hardware allows, which is why
inference servers batch requests together and keep a cache of keys and values for every token.
def greet(name):
    return f"Hello, {name}!"

for i in range(10):
    print(i, greet("world"))

int main(int argc, char** argv) {
  std::vector<int> values = {1, 2, 3};
  for (int value : values) std::cout << value << std::endl;
  return 0;
}
{"model": "llmserve", "prompt": "Hello", "max_tokens": 16, "temperature": 0.7}
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14159 42.
)";

// Words with their leading space, as GPT-2's pre-tokenizer would roughly cut them: runs of
// letters, runs of digits, runs of other non-space characters, runs of spaces.
std::vector<std::string> SplitWords(const std::string& text) {
  auto kind = [](unsigned char c) {
    if (std::isalpha(c) || c >= 0x80) return 0;
    if (std::isdigit(c)) return 1;
    if (std::isspace(c)) return 2;
    return 3;
  };
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    if (text[i] == ' ' && i + 1 < text.size() && kind(text[i + 1]) != 2) ++i;
    const int k = kind(static_cast<unsigned char>(text[i]));
    while (i < text.size() && kind(static_cast<unsigned char>(text[i])) == k) ++i;
    words.push_back(text.substr(start, i - start));
  }
  return words;
}

// One code point's UTF-8 string at a time: the symbols BPE starts from.
std::vector<std::string> ByteLevelSymbols(const std::string& word) {
  std::string mapped;
  common::tokenizer::AppendByteLevel(word, &mapped);
  std::vector<std::string> symbols;
  for (size_t i = 0; i < mapped.size();) {
    const unsigned char lead = static_cast<unsigned char>(mapped[i]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    symbols.push_back(mapped.substr(i, length));
    i += length;
  }
  return symbols;
}

}  // namespace

BuiltTokenizer BuildByteLevelTokenizer(int num_merges) {
  // The vocabulary starts with the 256 byte symbols in byte order.
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    common::tokenizer::AppendByteLevel(std::string(1, static_cast<char>(b)), &symbol);
    vocab[symbol] = b;
  }
  std::map<std::vector<std::string>, int> word_counts;
  for (const std::string& word : SplitWords(kCorpus)) ++word_counts[ByteLevelSymbols(word)];
  std::vector<std::pair<std::vector<std::string>, int>> words(word_counts.begin(),
                                                              word_counts.end());
  nlohmann::json merges = nlohmann::json::array();
  for (int m = 0; m < num_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
    }
    if (pairs.empty()) break;
    // Most frequent pair; ties go to the smallest pair, which std::map's order makes the first.
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto [left, right] = best->first;
    const std::string merged = left + right;
    if (!vocab.contains(merged)) vocab[merged] = static_cast<int>(vocab.size());
    merges.push_back(left + " " + right);
    for (auto& [symbols, count] : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(symbols[i]);
        }
      }
      symbols = std::move(next);
    }
  }

  BuiltTokenizer built;
  nlohmann::json added = nlohmann::json::array();
  int32_t next_id = static_cast<int32_t>(vocab.size());
  for (const char* special : {kBosToken, kEosToken, kImStartToken, kImEndToken}) {
    added.push_back({{"id", next_id},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    ++next_id;
  }
  built.bos_token_id = static_cast<int32_t>(vocab.size());
  built.eos_token_id = built.bos_token_id + 1;
  built.vocab_size = next_id;
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  nlohmann::ordered_json tokenizer = {{"version", "1.0"},
                                      {"truncation", nullptr},
                                      {"padding", nullptr},
                                      {"added_tokens", added},
                                      {"normalizer", nullptr},
                                      {"pre_tokenizer", byte_level},
                                      {"post_processor", byte_level},
                                      {"decoder", byte_level},
                                      {"model",
                                       {{"type", "BPE"},
                                        {"dropout", nullptr},
                                        {"unk_token", nullptr},
                                        {"continuing_subword_prefix", nullptr},
                                        {"end_of_word_suffix", nullptr},
                                        {"fuse_unk", false},
                                        {"byte_fallback", false},
                                        {"vocab", vocab},
                                        {"merges", merges}}}};
  built.tokenizer_json = tokenizer.dump(1);
  // A ChatML template, with Hermes-style tools (as Qwen2.5's): tools go into the system turn,
  // calls are <tool_call>{"name": ..., "arguments": {...}}</tool_call>, results are `tool` turns.
  // Without tools it renders exactly as plain ChatML.
  const std::string chat_template = R"tmpl({%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}

{% endif %}# Tools

You may call functions. Their signatures, within <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Write each call as <tool_call>{"name": <name>, "arguments": <arguments object>}</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if not (tools and loop.first and message['role'] == 'system') %}<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] }}{% endif %}
{%- if message['tool_calls'] is defined %}{% for call in message['tool_calls'] %}<tool_call>{"name": {{ call['function']['name'] | tojson }}, "arguments": {{ call['function']['arguments'] | tojson }}}</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
)tmpl";
  const nlohmann::ordered_json config = {
      {"add_bos_token", true},  {"add_eos_token", false},         {"bos_token", kBosToken},
      {"eos_token", kEosToken}, {"chat_template", chat_template}, {"model_max_length", 1 << 20}};
  built.tokenizer_config_json = config.dump(1);
  return built;
}

}  // namespace llmserve::tools
