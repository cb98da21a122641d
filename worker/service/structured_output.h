// The worker's side of structured outputs: the vocabulary's grammar compiler, built once from the
// model's tokenizer, and the conversion of a request's StructuredOutput (proto) into a compiled
// grammar the engine masks with. Compiling runs on the gRPC thread that received the request,
// never on the engine thread; the compiler caches by constraint.
//
// Thread-safe.

#ifndef LLMSERVE_WORKER_SERVICE_STRUCTURED_OUTPUT_H_
#define LLMSERVE_WORKER_SERVICE_STRUCTURED_OUTPUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llmserve/v1/inference.pb.h"
#include "worker/structured/grammar_compiler.h"

namespace llmserve::worker {

class StructuredOutputCompiler {
 public:
  // From the model's tokenizer.json / tokenizer_config.json text. FAILED_PRECONDITION when the
  // tokenizer does not load (the worker then refuses constrained requests, naming why).
  static absl::StatusOr<std::unique_ptr<StructuredOutputCompiler>> Create(
      const std::string& tokenizer_json, const std::string& tokenizer_config_json,
      int32_t vocab_size, std::vector<int32_t> eos_token_ids);

  // INVALID_ARGUMENT "structured_output.<kind>: ..." naming what is wrong (for a schema, its
  // path).
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> Compile(
      const ::llmserve::v1::StructuredOutput& output);

 private:
  explicit StructuredOutputCompiler(std::unique_ptr<structured::GrammarCompiler> compiler)
      : compiler_(std::move(compiler)) {}

  std::unique_ptr<structured::GrammarCompiler> compiler_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_STRUCTURED_OUTPUT_H_
