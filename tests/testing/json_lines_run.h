// Runs a command-line tool to its exit and collects the JSON lines it printed (the benchmarks and
// engine tools report one JSON object per line, among human-readable lines).

#ifndef LLMSERVE_TESTS_TESTING_JSON_LINES_RUN_H_
#define LLMSERVE_TESTS_TESTING_JSON_LINES_RUN_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace llmserve::testing {

struct JsonLinesRun {
  std::optional<int> exit_code;  // nullopt: still running after the timeout
  std::string output;            // stdout and stderr
  // Every line that starts with '{', parsed; a malformed one is a discarded value (is_discarded()).
  std::vector<nlohmann::json> lines;
};

inline JsonLinesRun RunForJsonLines(const std::vector<std::string>& argv, absl::Duration timeout) {
  Subprocess process(argv);
  JsonLinesRun run;
  run.exit_code = process.WaitForExit(timeout);
  run.output = process.output();
  for (absl::string_view line : absl::StrSplit(run.output, '\n')) {
    if (!line.empty() && line.front() == '{') {
      run.lines.push_back(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false));
    }
  }
  return run;
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_JSON_LINES_RUN_H_
