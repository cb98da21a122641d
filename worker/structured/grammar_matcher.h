// The per-request matcher: the set of parse stacks of a byte-level pushdown automaton over a
// CompiledGrammar (like llama.cpp's grammar sampler), advanced byte by byte, and the token mask
// of each decode step.
//
// Design (why it is fast): stacks are interned as linked nodes (position, parent), so a matcher
// state is a small sorted set of ids; sets of stacks are interned as states of a lazily built
// DFA whose byte transitions are memoized (most steps inside a JSON string or number map a state
// to itself). The mask is a DFS over the vocabulary's token trie where each trie edge is one
// memoized transition and dead subtrees are skipped. Masks are cached per state in the matcher
// and in the CompiledGrammar for all its matchers. The shared entry is keyed by the state with
// its stacks cut below the shallowest stack top (XGrammar's context-independent tokens): inside
// a JSON string what remains is the same for every property and nesting level, so the full trie
// walk happens once per grammar; the tokens whose bytes would pop below the cut (those that
// close the string) are recorded as trie subtrees and checked against the real stacks.
//
// Bounds: at most kMaxStackDepth nested frames (deeper pushes are dropped: tokens that would
// nest deeper are masked), at most kMaxStacks stacks per state (an ambiguous grammar keeps the
// first ones: the mask stays valid but may allow fewer tokens), at most kMaxStates DFA states
// and kMaxNodes stack nodes between tokens (past them the tables are rebuilt from the current
// state), at most kMaxMasksPerMatcher masks kept per matcher (16 KB each at 128k tokens),
// Rollback of at most kMaxRollback tokens.
//
// Thread-safety: one matcher is used by one thread at a time (not synchronized). Matchers of
// the same CompiledGrammar may run on different threads.
#ifndef LLMSERVE_WORKER_STRUCTURED_GRAMMAR_MATCHER_H_
#define LLMSERVE_WORKER_STRUCTURED_GRAMMAR_MATCHER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/structured/grammar_compiler.h"

namespace llmserve::worker::structured {

class GrammarMatcher {
 public:
  static constexpr int kMaxStackDepth = 256;
  static constexpr size_t kMaxStacks = 1024;
  static constexpr size_t kMaxStates = 1 << 13;
  static constexpr size_t kMaxNodes = 1 << 18;
  static constexpr size_t kMaxRollback = 256;
  static constexpr size_t kMaxMasksPerMatcher = 32;
  // The default per-call work budget (CompiledGrammar::max_work_per_call says what a grammar's
  // matchers use, and what the units are).
  static constexpr int64_t kMaxWorkPerCall = CompiledGrammar::kDefaultMaxWorkPerCall;
  static constexpr int64_t kExpandCost = 16;

  // Computes the initial state within the work budget; status() says when it could not.
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // OK until a call ran past the grammar's max_work_per_call; then INVALID_ARGUMENT naming the
  // limit, and the matcher refuses everything (FillNextTokenBitmask and AcceptToken return false).
  const absl::Status& status() const { return status_; }

  // Sets bit t (bitmask[t / 32] >> (t % 32) & 1) for every token t that keeps the output a
  // prefix of the language; EOS ids iff the output so far is complete. Words past the
  // vocabulary are cleared. After termination only the EOS ids are set. false, with nothing set,
  // when the matcher failed (status()), now or before.
  bool FillNextTokenBitmask(absl::Span<uint32_t> bitmask);
  // Advances by the token. false (and no change) when the token is not allowed. Accepting an
  // EOS id where the grammar may end terminates the matcher.
  bool AcceptToken(int32_t token_id);
  // Advances by raw bytes (a forced prefix; tests). false (and no change) when not allowed.
  bool AcceptString(absl::string_view bytes);
  bool CanTerminate() const;  // the output so far is a complete sentence of the language
  bool IsTerminated() const { return terminated_; }
  // Undoes the last n accepted tokens/strings (speculative decoding). false (and no change)
  // when fewer than n are remembered.
  bool Rollback(int n);

  struct Stats {
    int64_t fills = 0;
    int64_t local_hits = 0;         // mask cached in this matcher for this state
    int64_t shared_hits = 0;        // mask found in the CompiledGrammar's cache
    int64_t computed = 0;           // full trie walks
    int64_t uncertain_checked = 0;  // trie subtrees checked against the real stacks
    int64_t trie_nodes_visited = 0;
    int64_t dfa_states = 0;
    int64_t max_call_work = 0;  // the most work units any one call took
  };
  Stats stats() const;

 private:
  struct Node {
    int32_t pos;     // element index; -1 for the accept node 0
    int32_t parent;  // node id
    int32_t depth;
  };
  struct State {
    std::vector<int32_t> nodes;  // sorted node ids; 0 = a complete parse
    bool popped = false;         // some stack popped into a cut (sentinel) node
    int32_t max_depth = 0;       // of its stacks
    std::shared_ptr<const TokenMask> mask;
    std::unique_ptr<int32_t[]> dense;  // 256 transitions, once more than kSparse are known
    uint8_t num_sparse = 0;
    std::array<uint8_t, 8> sparse_bytes;
    std::array<int32_t, 8> sparse_next;
  };
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kOverBudget = -3;  // Step ran out of work budget (not memoized)

  int32_t Intern(int32_t pos, int32_t parent);
  void Expand(int32_t start, std::vector<int32_t>* out);
  // Adds to this call's work; false (and status_ set) past the budget.
  bool Charge(int64_t units);
  int32_t InternState(const std::vector<int32_t>& nodes);
  int32_t InitialState();
  int32_t Transition(int32_t state, uint8_t byte);  // kUnknown when not memoized yet
  int32_t Step(int32_t state, uint8_t byte);
  std::shared_ptr<const TokenMask> ComputeMask(int32_t state);
  // The state with every stack cut below the depth of the shallowest stack top (itself when
  // that is the root). The cut stands at depth 0 unless `exact_depth`; *cut_depth gets its
  // real depth.
  int32_t Truncate(int32_t state, bool exact_depth, int32_t* cut_depth);
  int32_t Sentinel(int32_t depth);
  // Walks trie nodes [begin, end) (all deeper than base_depth) from `state`, setting the bits of
  // the tokens that stay alive; with `record`, subtrees that pop into a sentinel are recorded
  // there instead.
  void Walk(int32_t state, int32_t begin, int32_t end, int32_t base_depth, uint32_t* bits,
            CachedMask* record);
  std::shared_ptr<const CachedMask> ContextFreeMask(int32_t state, bool exact_depth,
                                                    int32_t* cut_depth);
  std::string StateKey(int32_t state) const;
  std::vector<std::vector<int32_t>> Stacks(int32_t state) const;
  void MaybeCompact();
  void ResetTables();
  int32_t RebuildState(const std::vector<std::vector<int32_t>>& stacks);
  void SetEos(absl::Span<uint32_t> bitmask) const;

  std::shared_ptr<const CompiledGrammar> compiled_;
  const Grammar* g_;
  const TokenVocabulary* vocab_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> state_ids_;
  int32_t current_ = 0;
  bool terminated_ = false;
  std::deque<int32_t> history_;
  size_t masks_held_ = 0;
  // Scratch of Step and ComputeMask.
  std::vector<int32_t> scratch_;
  absl::flat_hash_set<int32_t> expand_seen_;
  std::vector<int32_t> expand_stack_;
  int64_t work_ = 0;  // this call's
  absl::Status status_;
  std::vector<int32_t> trie_states_;
  std::string trie_path_;
  Stats stats_;
};

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_GRAMMAR_MATCHER_H_
