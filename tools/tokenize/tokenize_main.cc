// llmserve-tokenize: encode text to ids or decode ids to text with a Hugging Face tokenizer.
//
//   llmserve-tokenize --tokenizer DIR --text "Hello world"      -> ids, space-separated
//   llmserve-tokenize --tokenizer DIR --ids "15496 995"         -> text
//   echo "Hello" | llmserve-tokenize --tokenizer DIR            -> ids of stdin
//
// Exit codes: 0 ok, 1 bad input (tokenizer, text or ids), 2 usage error.
#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/tokenizer.h"

ABSL_FLAG(std::string, tokenizer, "", "directory with tokenizer.json (+ tokenizer_config.json)");
ABSL_FLAG(std::string, text, "", "text to encode (stdin when neither --text nor --ids is given)");
ABSL_FLAG(std::string, ids, "", "token ids to decode, separated by spaces or commas");
ABSL_FLAG(bool, add_special_tokens, false, "encode: add BOS/EOS as the tokenizer config says");
ABSL_FLAG(bool, skip_special_tokens, false, "decode: drop special tokens");

namespace {

using llmserve::common::tokenizer::Tokenizer;

int Encode(const Tokenizer& tok, const std::string& text) {
  auto ids = tok.Encode(text, absl::GetFlag(FLAGS_add_special_tokens));
  if (!ids.ok()) {
    std::cerr << "llmserve-tokenize: " << ids.status().message() << "\n";
    return 1;
  }
  std::cout << absl::StrJoin(*ids, " ") << "\n";
  return 0;
}

int Decode(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part :
       absl::StrSplit(text, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      std::cerr << "llmserve-tokenize: \"" << part << "\" is not a token id\n";
      return 1;
    }
    ids.push_back(id);
  }
  auto decoded = tok.Decode(ids, absl::GetFlag(FLAGS_skip_special_tokens));
  if (!decoded.ok()) {
    std::cerr << "llmserve-tokenize: " << decoded.status().message() << "\n";
    return 1;
  }
  std::cout << *decoded << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "encode or decode with a Hugging Face tokenizer.\n"
      "  llmserve-tokenize --tokenizer DIR [--text TEXT | --ids \"1 2 3\"] "
      "[--add-special-tokens] [--skip-special-tokens]");
  // absl flags spell --add_special_tokens; accept the dashed spelling too.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& arg : args) {
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t i = 2; i < end; ++i) {
      if (arg[i] == '-') arg[i] = '_';
    }
  }
  std::vector<char*> argv2;
  for (std::string& arg : args) argv2.push_back(arg.data());
  const std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(argv2.size()), argv2.data());
  const std::string dir = absl::GetFlag(FLAGS_tokenizer);
  const bool has_text = !absl::GetFlag(FLAGS_text).empty();
  const bool has_ids = !absl::GetFlag(FLAGS_ids).empty();
  if (positional.size() > 1 || dir.empty() || (has_text && has_ids)) {
    std::cerr << "usage: llmserve-tokenize --tokenizer DIR [--text TEXT | --ids \"1 2 3\"]\n";
    return 2;
  }
  auto tok = Tokenizer::FromDirectory(dir);
  if (!tok.ok()) {
    std::cerr << "llmserve-tokenize: " << tok.status().message() << "\n";
    return 1;
  }
  if (has_ids) return Decode(**tok, absl::GetFlag(FLAGS_ids));
  if (has_text) return Encode(**tok, absl::GetFlag(FLAGS_text));
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  return Encode(**tok, input);
}
