// A naive decoder forward pass for tests: one sequence at a time, contiguous K/V, double
// precision, reading the checkpoint tensors by their Hugging Face names. It shares no code with
// the backends (not even the weight loader's fusing and transposing), so agreeing with it means
// something.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_REFERENCE_MODEL_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_REFERENCE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/model/model_config.h"
#include "worker/model/model_files.h"

namespace llmserve::worker::testing {

struct ReferenceOptions {
  // Round every projection's input to bf16, as the CPU backend does for bf16 weights.
  bool bf16_matmul_inputs = false;
};

class ReferenceModel {
 public:
  ReferenceModel(const ModelFiles& files, const ModelConfig& config,
                 const ReferenceOptions& options = {})
      : files_(files), config_(config), options_(options) {}

  // Logits [tokens.size()][vocab]: row p is the distribution after tokens[0..p].
  std::vector<std::vector<double>> Logits(const std::vector<int32_t>& tokens) const;
  // The last layer's hidden states after the final norm [tokens.size()][hidden_size] (what
  // embedding models pool).
  std::vector<std::vector<double>> Hidden(const std::vector<int32_t>& tokens) const;

 private:
  // The checkpoint tensor `name` as doubles (row-major, checkpoint layout).
  std::vector<double> Get(const std::string& name) const;

  const ModelFiles& files_;
  ModelConfig config_;
  ReferenceOptions options_;
};

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_REFERENCE_MODEL_H_
