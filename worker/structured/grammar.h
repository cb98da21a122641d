// The byte-level context-free grammar every constraint compiles to, and the builder the
// frontends (GBNF, regex, JSON Schema, choice) use to produce it.
//
// Terminals are byte sets; code-point classes are expanded to UTF-8 byte sequences by
// AddCodePointClass, so a grammar can never accept invalid UTF-8 unless a frontend asks for raw
// bytes. Build() checks the grammar: undefined rules, an empty language, left recursion (the
// matcher expands rules eagerly and would not terminate), and prunes alternatives that can never
// complete (so every live matcher state can still reach a complete sentence).
//
// Bounds: at most kMaxGrammarSymbols symbols and kMaxGrammarRules rules in all (repetitions are
// expanded, so x{m,n} costs O(n) symbols); repetition counts are at most kMaxRepetition; the
// stacks one expansion may visit at most kMaxExpansion (Build computes the bound statically).
//
// Thread-safety: a built Grammar is immutable and safe to share; a GrammarBuilder is not.
#ifndef LLMSERVE_WORKER_STRUCTURED_GRAMMAR_H_
#define LLMSERVE_WORKER_STRUCTURED_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker::structured {

inline constexpr int64_t kMaxGrammarSymbols = 1 << 20;
inline constexpr int64_t kMaxGrammarRules = 1 << 18;
inline constexpr int kMaxRepetition = 4096;
// The most grammar positions one expansion (the stacks reachable without consuming input) may
// visit, by a static bound computed in Build: nested repetitions of nullable items multiply.
inline constexpr int64_t kMaxExpansion = 1 << 15;

struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet& o) const {
    return bits[0] == o.bits[0] && bits[1] == o.bits[1] && bits[2] == o.bits[2] &&
           bits[3] == o.bits[3];
  }
};

enum class ElementKind : uint8_t { kBytes, kRule, kEnd };
struct Element {
  ElementKind kind;
  int32_t value;  // kBytes: index into byte_sets; kRule: rule id
};

// Flattened: each alternative is a run of elements ending with kEnd.
struct Grammar {
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<std::vector<int32_t>> alternatives;  // per rule: start positions
  std::vector<std::string> rule_names;
  int32_t root = 0;
};

struct Symbol {
  bool is_rule = false;
  int32_t id = 0;  // byte-set index or rule id
};
using Sequence = std::vector<Symbol>;

// Inclusive code-point ranges, sorted and disjoint after Normalize.
using CodePointRanges = std::vector<std::pair<char32_t, char32_t>>;
void NormalizeRanges(CodePointRanges* ranges);
// All scalar values (surrogates excluded) not in `ranges` (normalized).
CodePointRanges NegateRanges(const CodePointRanges& ranges);
// `ranges` minus the surrogates U+D800..U+DFFF.
CodePointRanges WithoutSurrogates(const CodePointRanges& ranges);

class GrammarBuilder {
 public:
  GrammarBuilder();

  // Rule id of `name`, declaring it when new (it must be defined before Build).
  int32_t RuleId(absl::string_view name);
  // A fresh rule with a unique name derived from `base`.
  int32_t NewRule(absl::string_view base);
  bool IsDefined(int32_t rule) const { return defined_[rule]; }
  // Defines (or redefines) `rule`. Errors when the grammar grows past its bounds.
  absl::Status Define(int32_t rule, std::vector<Sequence> alternatives);
  const std::string& RuleName(int32_t rule) const { return names_[rule]; }

  Symbol Bytes(const ByteSet& set);
  // Appends the symbols of a byte string.
  void AppendLiteral(absl::string_view bytes, Sequence* seq);
  // Appends a symbol matching exactly one code point of `ranges` (normalized, no surrogates),
  // encoded as UTF-8. An empty class appends a symbol that matches nothing.
  absl::Status AppendCodePointClass(const CodePointRanges& ranges, Sequence* seq);
  // A symbol for a sequence (itself when it is one symbol; otherwise a helper rule).
  absl::StatusOr<Symbol> Group(Sequence seq);
  // Appends `item` repeated min..max times (max < 0: unbounded). Errors past kMaxRepetition.
  absl::Status AppendRepeat(Symbol item, int min, int max, Sequence* seq);

  // Checks and flattens. `what` prefixes error messages ("grammar", "regex", ...).
  absl::StatusOr<Grammar> Build(absl::string_view root, absl::string_view what);

 private:
  absl::Status CountSymbols(int64_t n);

  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<ByteSet> byte_sets_;
  absl::flat_hash_map<std::string, int32_t> byte_set_ids_;
  absl::flat_hash_map<std::string, int32_t> class_rules_;  // memo of AppendCodePointClass
  int32_t never_ = -1;                                     // rule with no alternatives
  int64_t symbols_ = 0;
  int helpers_ = 0;
};

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_GRAMMAR_H_
