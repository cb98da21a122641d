// What a request asks the output to be (OpenAI response_format, guided_regex, guided_choice,
// guided_grammar). Compiled against a vocabulary by GrammarCompiler.
//
// Thread-safety: a plain value.
#ifndef LLMSERVE_WORKER_STRUCTURED_CONSTRAINT_H_
#define LLMSERVE_WORKER_STRUCTURED_CONSTRAINT_H_

#include <string>
#include <vector>

namespace llmserve::worker::structured {

struct Constraint {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  // A reasoning block before the constrained output that the constraint leaves free: none; one
  // the prompt opened (free text up to the first "</think>"); or one the output may open with
  // "<think>" (inference.proto's StructuredOutput.ReasoningBlock says exactly what is allowed).
  enum class ReasoningBlock { kNone, kOpen, kOptional };
  Kind kind = Kind::kJsonObject;
  std::string text;                  // schema JSON text, regex, or GBNF source
  std::vector<std::string> choices;  // kChoice
  ReasoningBlock reasoning_block = ReasoningBlock::kNone;
};

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_CONSTRAINT_H_
