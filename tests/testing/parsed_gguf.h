// A GGUF file parsed from bytes a test built in memory (gguf_writer.h), kept next to the bytes
// its tensors point into.
#ifndef LLMSERVE_TESTS_TESTING_PARSED_GGUF_H_
#define LLMSERVE_TESTS_TESTING_PARSED_GGUF_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tests/testing/gguf_writer.h"
#include "worker/model/gguf/gguf_file.h"

namespace llmserve::testing {

struct ParsedGguf {
  std::unique_ptr<ExactBuffer> buffer;
  absl::StatusOr<std::unique_ptr<worker::gguf::GgufFile>> file;
};

// `name` is the file name errors mention.
inline ParsedGguf ParseGgufBytes(const std::string& bytes, const std::string& name) {
  ParsedGguf parsed;
  parsed.buffer = std::make_unique<ExactBuffer>(bytes);
  parsed.file = worker::gguf::GgufFile::Parse(name, parsed.buffer->data.get(), parsed.buffer->size);
  return parsed;
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_PARSED_GGUF_H_
