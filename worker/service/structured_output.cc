#include "worker/service/structured_output.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "worker/structured/constraint.h"
#include "worker/structured/vocabulary.h"

namespace llmserve::worker {

absl::StatusOr<std::unique_ptr<StructuredOutputCompiler>> StructuredOutputCompiler::Create(
    const std::string& tokenizer_json, const std::string& tokenizer_config_json, int32_t vocab_size,
    std::vector<int32_t> eos_token_ids) {
  if (tokenizer_json.empty()) {
    return absl::FailedPreconditionError(
        "the model has no tokenizer.json: structured outputs need the vocabulary");
  }
  absl::StatusOr<std::unique_ptr<common::tokenizer::Tokenizer>> tokenizer =
      common::tokenizer::Tokenizer::FromJson(tokenizer_json, tokenizer_config_json);
  if (!tokenizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tokenizer does not load, so structured outputs are off: ",
                     tokenizer.status().message()));
  }
  absl::StatusOr<std::shared_ptr<const structured::TokenVocabulary>> vocabulary =
      structured::TokenVocabulary::FromTokenizer(**tokenizer, vocab_size, std::move(eos_token_ids));
  if (!vocabulary.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "structured outputs are off: the vocabulary: ", vocabulary.status().message()));
  }
  return std::unique_ptr<StructuredOutputCompiler>(new StructuredOutputCompiler(
      std::make_unique<structured::GrammarCompiler>(*std::move(vocabulary))));
}

absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>>
StructuredOutputCompiler::Compile(const ::llmserve::v1::StructuredOutput& output) {
  using Proto = ::llmserve::v1::StructuredOutput;
  structured::Constraint constraint;
  switch (output.kind_case()) {
    case Proto::kJsonSchema:
      constraint.kind = structured::Constraint::Kind::kJsonSchema;
      constraint.text = output.json_schema();
      break;
    case Proto::kJsonObject:
      if (!output.json_object()) {
        return absl::InvalidArgumentError("structured_output.json_object: must be true when set");
      }
      constraint.kind = structured::Constraint::Kind::kJsonObject;
      break;
    case Proto::kRegex:
      constraint.kind = structured::Constraint::Kind::kRegex;
      constraint.text = output.regex();
      break;
    case Proto::kChoice:
      constraint.kind = structured::Constraint::Kind::kChoice;
      constraint.choices.assign(output.choice().choices().begin(), output.choice().choices().end());
      break;
    case Proto::kGrammar:
      constraint.kind = structured::Constraint::Kind::kGrammar;
      constraint.text = output.grammar();
      break;
    case Proto::KIND_NOT_SET:
      return absl::InvalidArgumentError(
          "structured_output: set one of json_schema, json_object, regex, choice, grammar");
  }
  switch (output.reasoning_block()) {
    case Proto::REASONING_BLOCK_NONE:
      break;
    case Proto::REASONING_BLOCK_OPEN:
      constraint.reasoning_block = structured::Constraint::ReasoningBlock::kOpen;
      break;
    case Proto::REASONING_BLOCK_OPTIONAL:
      constraint.reasoning_block = structured::Constraint::ReasoningBlock::kOptional;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("structured_output.reasoning_block: ", output.reasoning_block(),
                       " is not NONE (0), OPEN (1) or OPTIONAL (2)"));
  }
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
      compiler_->Compile(constraint);
  if (!grammar.ok()) {
    // The compiler's messages start with the kind ("json_schema: properties.age.type: ...",
    // "regex: position 3: ...", "grammar: line 2, column 5: ...").
    return absl::Status(grammar.status().code(),
                        absl::StrCat("structured_output.", grammar.status().message()));
  }
  return grammar;
}

}  // namespace llmserve::worker
