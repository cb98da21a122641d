#include "worker/structured/grammar_compiler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8/utf8.h"
#include "worker/structured/gbnf_parser.h"
#include "worker/structured/json_schema_converter.h"
#include "worker/structured/regex_converter.h"

namespace llmserve::worker::structured {
namespace {

std::string CacheKey(const Constraint& c) {
  std::string key = absl::StrCat(static_cast<int>(c.kind), ":", c.text.size(), ":", c.text);
  if (c.kind == Constraint::Kind::kChoice) {
    for (const std::string& choice : c.choices)
      absl::StrAppend(&key, ":", choice.size(), ":", choice);
  }
  return key;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}

std::shared_ptr<const CachedMask> CompiledGrammar::FindMask(const std::string& state_key) const {
  absl::MutexLock lock(&mu_);
  const auto it = masks_.find(state_key);
  return it == masks_.end() ? nullptr : it->second;
}

void CompiledGrammar::StoreMask(const std::string& state_key,
                                std::shared_ptr<const CachedMask> mask) const {
  absl::MutexLock lock(&mu_);
  if (masks_.size() >= kMaxSharedMasks) masks_.clear();
  masks_.emplace(state_key, std::move(mask));
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab,
                                 size_t cache_capacity)
    : vocab_(std::move(vocab)), capacity_(cache_capacity) {}

absl::StatusOr<Grammar> GrammarCompiler::BuildGrammar(const Constraint& c) const {
  if (c.text.size() > kMaxConstraintBytes) {
    return absl::InvalidArgumentError(absl::StrCat("constraint text is ", c.text.size(),
                                                   " bytes, more than the limit of ",
                                                   kMaxConstraintBytes));
  }
  switch (c.kind) {
    case Constraint::Kind::kJsonObject:
      return ParseGbnf(JsonObjectGbnf(), "json_object");
    case Constraint::Kind::kJsonSchema: {
      absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(c.text);
      if (!gbnf.ok()) return gbnf.status();
      return ParseGbnf(*gbnf, "json_schema");
    }
    case Constraint::Kind::kRegex: {
      absl::StatusOr<std::string> expr = RegexToGbnf(c.text, {});
      if (!expr.ok()) return expr.status();
      return ParseGbnf(absl::StrCat("root ::= ", *expr), "regex");
    }
    case Constraint::Kind::kChoice: {
      if (c.choices.empty()) return absl::InvalidArgumentError("choice: no choices given");
      if (c.choices.size() > kMaxChoices) {
        return absl::InvalidArgumentError(
            absl::StrCat("choice: more than ", kMaxChoices, " choices"));
      }
      size_t total = 0;
      std::string gbnf = "root ::= ";
      for (size_t i = 0; i < c.choices.size(); ++i) {
        total += c.choices[i].size();
        if (total > kMaxConstraintBytes) {
          return absl::InvalidArgumentError("choice: the choices are too long in total");
        }
        if (!common::utf8::IsValid(c.choices[i])) {
          return absl::InvalidArgumentError(absl::StrCat("choice ", i, ": not valid UTF-8"));
        }
        absl::StrAppend(&gbnf, i > 0 ? " | " : "", GbnfLiteral(c.choices[i]));
      }
      return ParseGbnf(gbnf, "choice");
    }
    case Constraint::Kind::kGrammar:
      return ParseGbnf(c.text, "grammar");
  }
  return absl::InvalidArgumentError("unknown constraint kind");
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Compile(
    const Constraint& constraint) {
  const std::string key = CacheKey(constraint);
  {
    absl::MutexLock lock(&mu_);
    const auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: two threads may compile the same constraint; the first stored
  // wins and both return it.
  absl::StatusOr<Grammar> grammar = BuildGrammar(constraint);
  if (!grammar.ok()) return grammar.status();
  auto compiled = std::make_shared<const CompiledGrammar>(*std::move(grammar), vocab_);
  absl::MutexLock lock(&mu_);
  const auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  if (capacity_ == 0) return compiled;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace llmserve::worker::structured
