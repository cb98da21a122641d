// The real model files of the test data ($LLMSERVE_TESTDATA/models; see its README).
#ifndef LLMSERVE_TESTS_TESTING_TESTDATA_MODELS_H_
#define LLMSERVE_TESTS_TESTING_TESTDATA_MODELS_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace llmserve::testing {

// $LLMSERVE_TESTDATA/models/<sub>, or "" (with the reason in `why`) when it is not there.
inline std::string ModelsDir(const std::string& sub, std::string* why) {
  const char* root = std::getenv("LLMSERVE_TESTDATA");
  if (root == nullptr || *root == '\0') {
    *why = "LLMSERVE_TESTDATA is not set (the GGUF files are in $LLMSERVE_TESTDATA/models)";
    return "";
  }
  const std::string dir = std::string(root) + "/models/" + sub;
  if (!std::filesystem::is_directory(dir)) {
    *why = dir + " does not exist";
    return "";
  }
  return dir;
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_TESTDATA_MODELS_H_
