#include "worker/structured/grammar_compiler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8/utf8.h"
#include "worker/structured/gbnf_parser.h"
#include "worker/structured/grammar_matcher.h"
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

// The name every error of a constraint starts with (the parser's and the probe's alike).
const char* KindName(Constraint::Kind kind) {
  switch (kind) {
    case Constraint::Kind::kJsonSchema:
      return "json_schema";
    case Constraint::Kind::kJsonObject:
      return "json_object";
    case Constraint::Kind::kRegex:
      return "regex";
    case Constraint::Kind::kChoice:
      return "choice";
    case Constraint::Kind::kGrammar:
      return "grammar";
  }
  return "constraint";
}

size_t GrammarBytes(const Grammar& g) {
  size_t bytes = sizeof(Grammar) + g.elements.capacity() * sizeof(Element) +
                 g.byte_sets.capacity() * sizeof(ByteSet);
  for (const std::vector<int32_t>& alts : g.alternatives) {
    bytes += sizeof(alts) + alts.capacity() * sizeof(int32_t);
  }
  for (const std::string& name : g.rule_names) bytes += sizeof(name) + name.capacity();
  return bytes;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab,
                                 int64_t max_work_per_call)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      max_work_per_call_(max_work_per_call) {}

size_t CompiledGrammar::MemoryBound() const {
  // The grammar, and its shared mask cache when full (each mask a bit per token; the
  // uncertain-subtree lists are small beside it).
  const size_t mask_bytes = (static_cast<size_t>(vocab_->size()) + 31) / 32 * sizeof(uint32_t);
  return GrammarBytes(grammar_) + kMaxSharedMasks * (mask_bytes + 256);
}

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
                                 size_t cache_capacity, size_t cache_bytes,
                                 int64_t max_work_per_call)
    : vocab_(std::move(vocab)),
      capacity_(cache_capacity),
      cache_bytes_(cache_bytes),
      max_work_per_call_(max_work_per_call) {}

size_t GrammarCompiler::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t GrammarCompiler::cached_grammars() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

absl::StatusOr<Grammar> GrammarCompiler::BuildGrammar(const Constraint& c) const {
  if (c.text.size() > kMaxConstraintBytes) {
    return absl::InvalidArgumentError(absl::StrCat("constraint text is ", c.text.size(),
                                                   " bytes, more than the limit of ",
                                                   kMaxConstraintBytes));
  }
  switch (c.kind) {
    case Constraint::Kind::kJsonObject:
      return ParseGbnf(JsonObjectGbnf(), KindName(c.kind), /*source_positions=*/false);
    case Constraint::Kind::kJsonSchema: {
      absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(c.text);
      if (!gbnf.ok()) return gbnf.status();
      return ParseGbnf(*gbnf, KindName(c.kind), /*source_positions=*/false);
    }
    case Constraint::Kind::kRegex: {
      absl::StatusOr<std::string> expr = RegexToGbnf(c.text, {});
      if (!expr.ok()) return expr.status();
      return ParseGbnf(absl::StrCat("root ::= ", *expr), KindName(c.kind),
                       /*source_positions=*/false);
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
      return ParseGbnf(gbnf, KindName(c.kind), /*source_positions=*/false);
    }
    case Constraint::Kind::kGrammar:
      return ParseGbnf(c.text, KindName(c.kind));
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
      return it->second->grammar;
    }
  }
  // Compiled outside the lock: two threads may compile the same constraint; the first stored
  // wins and both return it.
  absl::StatusOr<Grammar> grammar = BuildGrammar(constraint);
  if (!grammar.ok()) return grammar.status();
  auto compiled =
      std::make_shared<const CompiledGrammar>(*std::move(grammar), vocab_, max_work_per_call_);
  {
    // The probe: the initial state and its mask, within the matcher's per-token work budget,
    // here on the caller's thread rather than on the engine thread. A constraint whose start is
    // too expensive is refused now; the mask lands in the grammar's shared cache.
    GrammarMatcher probe(compiled);
    std::vector<uint32_t> bits((static_cast<size_t>(vocab_->size()) + 31) / 32);
    if (!probe.FillNextTokenBitmask(absl::MakeSpan(bits))) {
      return absl::InvalidArgumentError(
          absl::StrCat(KindName(constraint.kind), ": ", probe.status().message()));
    }
  }
  const size_t bytes = key.size() + compiled->MemoryBound();
  absl::MutexLock lock(&mu_);
  const auto it = index_.find(key);
  if (it != index_.end()) return it->second->grammar;
  // One grammar larger than the whole budget is used but not kept.
  if (capacity_ == 0 || bytes > cache_bytes_) return compiled;
  lru_.push_front({key, compiled, bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (lru_.size() > capacity_ || bytes_ > cache_bytes_) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace llmserve::worker::structured
