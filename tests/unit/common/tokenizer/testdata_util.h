// Helpers for tests that use the shared conformance data ($LLMSERVE_TESTDATA/tokenizers/*/).
#ifndef LLMSERVE_TESTS_UNIT_TOKENIZER_TESTDATA_UTIL_H_
#define LLMSERVE_TESTS_UNIT_TOKENIZER_TESTDATA_UTIL_H_

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace llmserve::common::tokenizer::testing {

// "" when LLMSERVE_TESTDATA is unset.
inline std::string TestdataDir() {
  const char* dir = std::getenv("LLMSERVE_TESTDATA");
  return dir == nullptr ? std::string() : std::string(dir);
}

// Every $LLMSERVE_TESTDATA/tokenizers/NAME folder that has a tokenizer.json, sorted by name.
inline std::vector<std::filesystem::path> TokenizerDirs() {
  std::vector<std::filesystem::path> dirs;
  const std::string root = TestdataDir();
  if (root.empty()) return dirs;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(root) / "tokenizers", error)) {
    if (std::filesystem::exists(entry.path() / "tokenizer.json")) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace llmserve::common::tokenizer::testing

#endif  // LLMSERVE_TESTS_UNIT_TOKENIZER_TESTDATA_UTIL_H_
