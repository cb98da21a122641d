// Compiles a Constraint into a CompiledGrammar for one vocabulary, with an LRU cache so that
// the same constraint compiles once.
//
// Frontends: JSON Schema and JSON mode (json_schema_converter.h), regex (regex_converter.h;
// the whole output must match), choice (exactly one of the strings), GBNF (gbnf_parser.h).
// Bounds: constraint text at most kMaxConstraintBytes, at most kMaxChoices choices; the bounds
// of grammar.h and the frontends apply. Errors are INVALID_ARGUMENT naming what is wrong.
//
// Thread-safety: GrammarCompiler is safe to call from any number of threads. A CompiledGrammar
// is immutable apart from its internal mask cache, which is thread-safe.
#ifndef LLMSERVE_WORKER_STRUCTURED_GRAMMAR_COMPILER_H_
#define LLMSERVE_WORKER_STRUCTURED_GRAMMAR_COMPILER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/structured/constraint.h"
#include "worker/structured/grammar.h"
#include "worker/structured/vocabulary.h"

namespace llmserve::worker::structured {

inline constexpr size_t kMaxConstraintBytes = 1 << 20;
inline constexpr size_t kMaxChoices = 4096;

using TokenMask = std::vector<uint32_t>;

// A mask computed for a matcher state, shared by the matchers of a grammar. When the state was
// truncated to its top frames (see grammar_matcher.h), `bits` holds the tokens valid in any
// context below them and `uncertain_roots` the token-trie subtrees whose tokens pop into that
// context (each with its path bytes, excluding the root's own byte): the matcher checks those
// against its real state.
struct CachedMask {
  TokenMask bits;
  std::vector<int32_t> uncertain_roots;
  std::vector<std::string> uncertain_prefixes;
  // The deepest stack seen by the walk, counting cut stacks from depth 0: the entry is valid for
  // a real state whose cut depth plus this stays within the matcher's depth bound.
  int32_t max_depth = 0;
};

class CompiledGrammar {
 public:
  // The work one matcher call (the constructor, a mask, a token) may do, so that one request's
  // mask delays the others' step by a bounded amount. Units: a trie node walked or a stack tested
  // costs 1, a stack expanded GrammarMatcher::kExpandCost (10-16 ns a unit on a 2-core EPYC; a
  // cold mask of a 128k vocabulary is ~340k units; docs/structured-outputs.md has the figures).
  static constexpr int64_t kDefaultMaxWorkPerCall = int64_t{1} << 22;

  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab,
                  int64_t max_work_per_call = kDefaultMaxWorkPerCall);

  const Grammar& grammar() const { return grammar_; }
  // The per-call work budget of every matcher of this grammar.
  int64_t max_work_per_call() const { return max_work_per_call_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  // What this grammar can hold in memory: its tables and a full shared mask cache.
  size_t MemoryBound() const;

  // Masks shared by every matcher of this grammar, keyed by the canonical matcher state.
  // At most kMaxSharedMasks are kept (the cache is cleared when full).
  static constexpr size_t kMaxSharedMasks = 64;
  std::shared_ptr<const CachedMask> FindMask(const std::string& state_key) const;
  void StoreMask(const std::string& state_key, std::shared_ptr<const CachedMask> mask) const;

 private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  int64_t max_work_per_call_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const CachedMask>> masks_
      ABSL_GUARDED_BY(mu_);
};

class GrammarCompiler {
 public:
  // The cache keeps at most cache_capacity grammars and cache_bytes of them (each counted at its
  // CompiledGrammar::MemoryBound), evicting the least recently used. The grammars it compiles
  // have the per-call work budget max_work_per_call (the probe below included); the worker uses
  // the default, the fuzz target a smaller one so that an expensive input costs it less time.
  static constexpr size_t kDefaultCacheBytes = size_t{256} << 20;
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab,
                           size_t cache_capacity = 128, size_t cache_bytes = kDefaultCacheBytes,
                           int64_t max_work_per_call = CompiledGrammar::kDefaultMaxWorkPerCall);

  // Cached by (kind, text, choices). INVALID_ARGUMENT naming what is wrong; for schemas the
  // JSON path ("response_format schema: properties.age.type: ..."). Compiling includes a probe:
  // the initial mask, computed within GrammarMatcher's per-token work budget (refused past it).
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const Constraint& constraint);

  size_t cached_bytes() const;
  size_t cached_grammars() const;

 private:
  absl::StatusOr<Grammar> BuildGrammar(const Constraint& constraint) const;

  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    size_t bytes;
  };

  std::shared_ptr<const TokenVocabulary> vocab_;
  const size_t capacity_;
  const size_t cache_bytes_;
  const int64_t max_work_per_call_;
  mutable absl::Mutex mu_;
  // LRU: most recent at the front.
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, decltype(lru_)::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_GRAMMAR_COMPILER_H_
