// A benchmark dataset: a JSONL file, one request per line —
//   {"prompt": "text"} | {"prompt_ids": [1, 2, 3]} | {"messages": [{"role": ..., "content": ...}]}
// with an optional "output_len" (tokens to generate; the --output-len default otherwise).
// Blank lines are skipped. Every error names the file and line.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_TOOLS_BENCH_DATASET_H_
#define LLMSERVE_TOOLS_BENCH_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/bench/bench_client.h"

namespace llmserve::tools {

// Parses the dataset's text (`name` is used in errors). INVALID_ARGUMENT for a line that is not
// one of the forms above, an empty prompt, an output_len out of [1, 1 << 20], or no request.
absl::StatusOr<std::vector<BenchRequest>> ParseJsonlDataset(absl::string_view text,
                                                            absl::string_view name,
                                                            int32_t default_output_len);

// Reads and parses the file at `path` (NOT_FOUND when it cannot be read).
absl::StatusOr<std::vector<BenchRequest>> LoadJsonlDataset(const std::string& path,
                                                           int32_t default_output_len);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_DATASET_H_
