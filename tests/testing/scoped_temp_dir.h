// A fresh directory for one test, removed with everything in it when the object goes away.
// mkdtemp makes the name unique, so test cases running in parallel (ctest -j) and concurrent
// runs on one machine never share files.

#ifndef LLMSERVE_TESTS_TESTING_SCOPED_TEMP_DIR_H_
#define LLMSERVE_TESTS_TESTING_SCOPED_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace llmserve::testing {

class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix = "llmserve") {
    std::string pattern = ::testing::TempDir() + "/" + prefix + "_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    }
    path_ = pattern;
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ~ScopedTempDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }

  const std::string& path() const { return path_; }
  // path()/name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_SCOPED_TEMP_DIR_H_
