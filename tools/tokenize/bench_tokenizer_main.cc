// llmserve-bench-tokenizer: encoding throughput of one tokenizer on a deterministic corpus.
//
// The corpus (--mb megabytes, default 4) is built by cycling through fixed paragraphs of
// English prose, C++/Python code, numbers and multilingual text with emoji; each repetition
// gets its index appended so that the text is not one paragraph repeated verbatim. The same
// flags give the same bytes on every machine. Prints one JSON line with the median of --runs.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer, "",
          "tokenizer directory (default: $LLMSERVE_TESTDATA/tokenizers/gpt-2)");
ABSL_FLAG(int, mb, 4, "corpus size in MB");
ABSL_FLAG(int, runs, 5, "timed runs; the median is reported");

namespace {

constexpr const char* kParagraphs[] = {
    "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11 landed on the Moon; "
    "Neil Armstrong's first words were transmitted to an audience of about 650 million people.\n",
    "int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) {\n    "
    "std::printf(\"%d: %s\\n\", i, argv[i]);\n  }\n  return 0;\n}\n",
    "def fib(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a  # 0, 1, 1, 2, 3, 5, 8, 13, 21, 34\n",
    "Prices rose 3.7% to $1,234.56 on 2024-03-15 at 09:30:00 UTC; volume was 12,345,678 shares.\n",
    "Ünïcödé: Füßgänger überqueren die Straße. Ça va très bien, merci ! ¿Dónde está la estación?\n",
    "日本語のテキストと中文文本，以及한국어 문장。"
    "Русский текст и ελληνικά γράμματα. 🚀🔥👍🏽 ½ ² ³\n",
    "    \t  Multiple   spaces\tand\ttabs,\n\n\nblank lines, and trailing whitespace   \n",
};

std::string BuildCorpus(size_t bytes) {
  std::string corpus;
  corpus.reserve(bytes + 1024);
  for (size_t i = 0; corpus.size() < bytes; ++i) {
    corpus += kParagraphs[i % std::size(kParagraphs)];
    if (i % std::size(kParagraphs) == 0) corpus += absl::StrCat("Section ", i, ".\n");
  }
  return corpus;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_tokenizer);
  if (dir.empty()) {
    const char* testdata = std::getenv("LLMSERVE_TESTDATA");
    if (testdata == nullptr) {
      std::cerr << "llmserve-bench-tokenizer: pass --tokenizer DIR or set LLMSERVE_TESTDATA\n";
      return 2;
    }
    dir = std::string(testdata) + "/tokenizers/gpt-2";
  }
  auto tok = llmserve::common::tokenizer::Tokenizer::FromDirectory(dir);
  if (!tok.ok()) {
    std::cerr << "llmserve-bench-tokenizer: " << tok.status().message() << "\n";
    return 1;
  }
  const std::string corpus = BuildCorpus(static_cast<size_t>(absl::GetFlag(FLAGS_mb)) << 20);
  std::vector<double> seconds;
  size_t tokens = 0;
  for (int run = 0; run < std::max(1, absl::GetFlag(FLAGS_runs)); ++run) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = (*tok)->Encode(corpus, false);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (!ids.ok()) {
      std::cerr << "llmserve-bench-tokenizer: " << ids.status().message() << "\n";
      return 1;
    }
    tokens = ids->size();
    seconds.push_back(elapsed.count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  nlohmann::json line = {{"tokenizer", dir},
                         {"bytes", corpus.size()},
                         {"tokens", tokens},
                         {"seconds", median},
                         {"mb_per_s", static_cast<double>(corpus.size()) / (1 << 20) / median}};
  std::cout << line.dump() << "\n";
  return 0;
}
