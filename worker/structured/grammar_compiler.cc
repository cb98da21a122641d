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

constexpr absl::string_view kReasoningStartRule = "llmserve-reasoning-start";

// The reasoning block before the constrained output (start rule kReasoningStartRule, the
// constraint's own start rule `root` after it). Its free text runs up to the first "</think>":
// the states of an automaton that has read 0 to 7 characters of it ("</think>" has no border, so
// a "<" is the only character that starts it again), each one a rule, every call in tail
// position (the matcher reuses the frame), ending with the tag's last character.
std::string ReasoningBlockGbnf(Constraint::ReasoningBlock block) {
  constexpr absl::string_view kClose = "</think>";
  std::string gbnf;
  for (size_t k = 0; k < kClose.size(); ++k) {
    // Rule k: k characters of the tag read. Its next character continues the tag, starts it
    // again ("<"), or drops back to state 0.
    absl::StrAppend(&gbnf, "llmserve-think-", k, " ::= [^<", k > 0 ? kClose.substr(k, 1) : "",
                    "] llmserve-think-0 | \"", kClose.substr(k, 1), "\"");
    if (k + 1 < kClose.size()) absl::StrAppend(&gbnf, " llmserve-think-", k + 1);
    if (k > 0) absl::StrAppend(&gbnf, " | \"<\" llmserve-think-1");
    gbnf += "\n";
  }
  absl::StrAppend(&gbnf, "llmserve-think-space ::= [ \\t\\r\\n]{0,8}\n");
  if (block == Constraint::ReasoningBlock::kOpen) {
    absl::StrAppend(&gbnf, kReasoningStartRule,
                    " ::= llmserve-think-0 llmserve-think-space root\n");
  } else {
    absl::StrAppend(&gbnf, kReasoningStartRule,
                    " ::= llmserve-think-space \"<think>\" llmserve-think-0 llmserve-think-space "
                    "root | root\n");
  }
  return gbnf;
}

std::string CacheKey(const Constraint& c) {
  std::string key = absl::StrCat(static_cast<int>(c.kind), ":", static_cast<int>(c.reasoning_block),
                                 ":", c.text.size(), ":", c.text);
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
  std::string gbnf;
  // Positions in errors only for text the client wrote: its own GBNF grammar.
  bool source_positions = false;
  switch (c.kind) {
    case Constraint::Kind::kJsonObject:
      gbnf = JsonObjectGbnf();
      break;
    case Constraint::Kind::kJsonSchema: {
      absl::StatusOr<std::string> converted = JsonSchemaToGbnf(c.text);
      if (!converted.ok()) return converted.status();
      gbnf = *std::move(converted);
      break;
    }
    case Constraint::Kind::kRegex: {
      absl::StatusOr<std::string> expr = RegexToGbnf(c.text, {});
      if (!expr.ok()) return expr.status();
      gbnf = absl::StrCat("root ::= ", *expr);
      break;
    }
    case Constraint::Kind::kChoice: {
      if (c.choices.empty()) return absl::InvalidArgumentError("choice: no choices given");
      if (c.choices.size() > kMaxChoices) {
        return absl::InvalidArgumentError(
            absl::StrCat("choice: more than ", kMaxChoices, " choices"));
      }
      size_t total = 0;
      gbnf = "root ::= ";
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
      break;
    }
    case Constraint::Kind::kGrammar:
      gbnf = c.text;
      source_positions = true;
      break;
  }
  if (c.reasoning_block == Constraint::ReasoningBlock::kNone) {
    return ParseGbnf(gbnf, KindName(c.kind), source_positions);
  }
  // The reasoning block's rules come after the constraint's; a client's grammar that defines one
  // of them is refused as a rule defined twice.
  const size_t own_size = gbnf.size();
  absl::StrAppend(&gbnf, "\n", ReasoningBlockGbnf(c.reasoning_block));
  absl::StatusOr<Grammar> grammar =
      ParseGbnf(gbnf, KindName(c.kind), source_positions, kReasoningStartRule);
  if (grammar.ok() || !source_positions) return grammar;
  // An error in a client's grammar (an unclosed group runs into the text after it) is reported
  // where it is in the client's own text: that text alone, parsed again, says where.
  absl::StatusOr<Grammar> alone =
      ParseGbnf(absl::string_view(gbnf).substr(0, own_size), KindName(c.kind), source_positions);
  return alone.ok() ? grammar.status() : alone.status();
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
