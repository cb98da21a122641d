#include "common/tokenizer/tokenizer_model.h"

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/bpe_model.h"
#include "common/tokenizer/unigram_model.h"

namespace llmserve::common::tokenizer {

absl::StatusOr<std::unique_ptr<TokenizerModel>> ModelFromJson(const Json& model) {
  if (ComponentType(model) == "Unigram") {
    std::unique_ptr<UnigramModel> unigram;
    LLMSERVE_ASSIGN_OR_RETURN(unigram, UnigramModel::FromJson(model));
    return unigram;
  }
  std::unique_ptr<BpeModel> bpe;
  LLMSERVE_ASSIGN_OR_RETURN(bpe, BpeModel::FromJson(model));
  return bpe;
}

}  // namespace llmserve::common::tokenizer
