#include "worker/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : compiled_(std::move(grammar)), g_(&compiled_->grammar()), vocab_(&compiled_->vocab()) {
  trie_states_.resize(vocab_->trie_max_depth() + 1);
  trie_path_.resize(vocab_->trie_max_depth() + 1);
  ResetTables();
  work_ = 0;
  current_ = InitialState();
}

void GrammarMatcher::ResetTables() {
  nodes_.clear();
  node_ids_.clear();
  states_.clear();
  state_ids_.clear();
  masks_held_ = 0;
  nodes_.push_back({-1, 0, 0});  // accept
}

int32_t GrammarMatcher::Intern(int32_t pos, int32_t parent) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  const auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  const int32_t depth = nodes_[parent].depth + 1;
  if (depth > kMaxStackDepth) return kDead;
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent, depth});
  node_ids_.emplace(key, id);
  return id;
}

// Collects the stacks reachable from `node` without consuming input whose top is a byte set (or
// the accept node). Iterative: chains of nullable rules can be as long as the grammar's static
// expansion bound, far deeper than a thread's stack. Terminates because left recursion is
// rejected at compile time; each visit is charged to the work budget.
void GrammarMatcher::Expand(int32_t start, std::vector<int32_t>* out) {
  expand_stack_.clear();
  expand_stack_.push_back(start);
  while (!expand_stack_.empty()) {
    const int32_t node = expand_stack_.back();
    expand_stack_.pop_back();
    if (node < 0 || !expand_seen_.insert(node).second) continue;
    if (!Charge(kExpandCost)) return;
    const Node n = nodes_[node];
    if (n.pos < 0) {  // accept, or a cut: the stack continues in an unknown context
      out->push_back(node);
      continue;
    }
    const Element& e = g_->elements[n.pos];
    if (e.kind == ElementKind::kBytes) {
      out->push_back(node);
      continue;
    }
    if (e.kind == ElementKind::kEnd) {
      expand_stack_.push_back(n.parent);
      continue;
    }
    // A rule: continue after it (a tail call needs no frame), then enter each alternative. Pushed
    // in reverse so that alternatives are visited in order.
    int32_t ret = n.parent;
    if (g_->elements[n.pos + 1].kind != ElementKind::kEnd) {
      ret = Intern(n.pos + 1, n.parent);
      if (ret < 0) continue;
    }
    const std::vector<int32_t>& alts = g_->alternatives[e.value];
    for (auto it = alts.rbegin(); it != alts.rend(); ++it) {
      expand_stack_.push_back(g_->elements[*it].kind == ElementKind::kEnd ? ret : Intern(*it, ret));
    }
  }
}

bool GrammarMatcher::Charge(int64_t units) {
  work_ += units;
  stats_.max_call_work = std::max(stats_.max_call_work, work_);
  if (work_ <= compiled_->max_work_per_call()) return true;
  if (status_.ok()) {
    // The constraint's fault, not the worker's: never retried elsewhere.
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "the constraint needs more than ", compiled_->max_work_per_call(),
        " units of matching work for one token (the limit; a unit is 10-16 ns on a 2-core EPYC): "
        "simplify it, e.g. fewer nested or counted repetitions of optional items"));
  }
  return false;
}

int32_t GrammarMatcher::InternState(const std::vector<int32_t>& nodes) {
  const auto it = state_ids_.find(nodes);
  if (it != state_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(states_.size());
  states_.emplace_back();
  states_.back().nodes = nodes;
  for (const int32_t n : nodes) {
    states_.back().popped |= nodes_[n].pos <= -2;
    states_.back().max_depth = std::max(states_.back().max_depth, nodes_[n].depth);
  }
  state_ids_.emplace(nodes, id);
  return id;
}

int32_t GrammarMatcher::InitialState() {
  scratch_.clear();
  expand_seen_.clear();
  for (const int32_t alt : g_->alternatives[g_->root]) {
    if (g_->elements[alt].kind == ElementKind::kEnd) {
      Expand(0, &scratch_);
    } else {
      Expand(Intern(alt, 0), &scratch_);
    }
  }
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.size() > kMaxStacks) scratch_.resize(kMaxStacks);
  return InternState(scratch_);
}

inline int32_t GrammarMatcher::Transition(int32_t state, uint8_t byte) {
  const State& s = states_[state];
  if (s.dense) return s.dense[byte];
  for (int i = 0; i < s.num_sparse; ++i) {
    if (s.sparse_bytes[i] == byte) return s.sparse_next[i];
  }
  return kUnknown;
}

int32_t GrammarMatcher::Step(int32_t state, uint8_t byte) {
  const int32_t known = Transition(state, byte);
  if (known != kUnknown) return known;
  scratch_.clear();
  expand_seen_.clear();
  const size_t count = states_[state].nodes.size();
  for (size_t i = 0; i < count; ++i) {
    if (!Charge(1)) return kOverBudget;
    const int32_t id = states_[state].nodes[i];
    const Node n = nodes_[id];
    if (n.pos < 0) continue;
    if (!g_->byte_sets[g_->elements[n.pos].value].Has(byte)) continue;
    if (g_->elements[n.pos + 1].kind == ElementKind::kEnd) {
      Expand(n.parent, &scratch_);
    } else {
      Expand(Intern(n.pos + 1, n.parent), &scratch_);
    }
    if (!status_.ok()) return kOverBudget;  // a partial expansion is never memoized
  }
  int32_t next = kDead;
  if (!scratch_.empty()) {
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
    if (scratch_.size() > kMaxStacks) scratch_.resize(kMaxStacks);
    next = InternState(scratch_);
  }
  State& s = states_[state];
  if (s.dense) {
    s.dense[byte] = next;
  } else if (s.num_sparse < s.sparse_bytes.size()) {
    s.sparse_bytes[s.num_sparse] = byte;
    s.sparse_next[s.num_sparse] = next;
    ++s.num_sparse;
  } else {
    s.dense.reset(new int32_t[256]);
    std::fill(s.dense.get(), s.dense.get() + 256, kUnknown);
    for (int i = 0; i < s.num_sparse; ++i) s.dense[s.sparse_bytes[i]] = s.sparse_next[i];
    s.dense[byte] = next;
  }
  return next;
}

bool GrammarMatcher::CanTerminate() const {
  const std::vector<int32_t>& nodes = states_[current_].nodes;
  return !terminated_ && !nodes.empty() && nodes[0] == 0;
}

void GrammarMatcher::SetEos(absl::Span<uint32_t> bitmask) const {
  for (const int32_t eos : vocab_->eos_token_ids()) {
    if (static_cast<size_t>(eos / 32) < bitmask.size()) bitmask[eos / 32] |= 1u << (eos % 32);
  }
}

int32_t GrammarMatcher::Sentinel(int32_t depth) {
  const int32_t pos = -2 - depth;
  const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32;
  const auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, 0, depth});
  node_ids_.emplace(key, id);
  return id;
}

int32_t GrammarMatcher::Truncate(int32_t state, bool exact_depth, int32_t* cut_depth) {
  // Cut every stack below the shallowest stack top: what lies below is the context (inside a
  // JSON string: the property, array or nesting level the string belongs to).
  int32_t top = kMaxStackDepth + 1;
  for (const int32_t id : states_[state].nodes) {
    if (nodes_[id].pos >= 0) top = std::min(top, nodes_[id].depth);
  }
  *cut_depth = top - 1;
  if (top <= 1 || top > kMaxStackDepth) {
    *cut_depth = 0;
    return state;
  }
  const int32_t sentinel = Sentinel(exact_depth ? top - 1 : 0);
  std::vector<int32_t> ids;
  std::vector<int32_t> frames;
  const size_t count = states_[state].nodes.size();
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = states_[state].nodes[i];
    if (nodes_[id].pos < 0) {
      ids.push_back(id);
      continue;
    }
    frames.clear();
    for (int32_t n = id; nodes_[n].depth >= top; n = nodes_[n].parent) frames.push_back(n);
    int32_t base = sentinel;
    for (auto it = frames.rbegin(); it != frames.rend() && base >= 0; ++it) {
      base = Intern(nodes_[*it].pos, base);
    }
    if (base >= 0) ids.push_back(base);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return InternState(ids);
}

void GrammarMatcher::Walk(int32_t state, int32_t begin, int32_t end, int32_t base_depth,
                          uint32_t* bits, CachedMask* record) {
  const uint8_t* bytes = vocab_->trie_bytes().data();
  const int32_t* depths = vocab_->trie_depths().data();
  const int32_t* ends = vocab_->trie_subtree_ends().data();
  const int32_t* token_begin = vocab_->trie_token_begins().data();
  const int32_t* tokens = vocab_->trie_tokens().data();
  trie_states_[base_depth] = state;
  int64_t visited = 0;
  int32_t i = begin;
  while (i < end) {
    ++visited;
    const int32_t depth = depths[i];
    const int32_t next = Step(trie_states_[depth - 1], bytes[i]);
    if (next == kOverBudget || !Charge(1)) break;
    if (next < 0) {
      i = ends[i];
      continue;
    }
    if (record != nullptr) {
      record->max_depth = std::max(record->max_depth, states_[next].max_depth);
      if (states_[next].popped) {
        record->uncertain_roots.push_back(i);
        record->uncertain_prefixes.emplace_back(trie_path_.data(), depth - 1);
        i = ends[i];
        continue;
      }
      trie_path_[depth - 1] = static_cast<char>(bytes[i]);
    }
    trie_states_[depth] = next;
    for (int32_t k = token_begin[i]; k < token_begin[i + 1]; ++k) {
      bits[tokens[k] >> 5] |= 1u << (tokens[k] & 31);
    }
    ++i;
  }
  stats_.trie_nodes_visited += visited;
}

std::shared_ptr<const CachedMask> GrammarMatcher::ContextFreeMask(int32_t state, bool exact_depth,
                                                                  int32_t* cut_depth) {
  const int32_t context_free = Truncate(state, exact_depth, cut_depth);
  const std::string key = StateKey(context_free);
  std::shared_ptr<const CachedMask> cached = compiled_->FindMask(key);
  if (cached != nullptr) {
    ++stats_.shared_hits;
    return cached;
  }
  ++stats_.computed;
  auto entry = std::make_shared<CachedMask>();
  entry->bits.assign((vocab_->size() + 31) / 32, 0);
  entry->max_depth = states_[context_free].max_depth;
  Walk(context_free, 1, vocab_->trie_size(), 0, entry->bits.data(), entry.get());
  if (!status_.ok()) return nullptr;  // cut short: not a mask
  compiled_->StoreMask(key, entry);
  return entry;
}

std::shared_ptr<const TokenMask> GrammarMatcher::ComputeMask(int32_t state) {
  int32_t cut_depth = 0;
  std::shared_ptr<const CachedMask> cached = ContextFreeMask(state, false, &cut_depth);
  if (cached != nullptr && cut_depth + cached->max_depth > kMaxStackDepth) {
    // Near the depth bound the cut's depth matters: key it by the real depth.
    cached = ContextFreeMask(state, true, &cut_depth);
  }
  if (cached == nullptr) return nullptr;
  auto mask = std::make_shared<TokenMask>(cached->bits);
  const int32_t* ends = vocab_->trie_subtree_ends().data();
  const int32_t* depths = vocab_->trie_depths().data();
  for (size_t u = 0; u < cached->uncertain_roots.size(); ++u) {
    ++stats_.uncertain_checked;
    int32_t s = state;
    for (const char c : cached->uncertain_prefixes[u]) {
      s = Step(s, static_cast<uint8_t>(c));
      if (s < 0) break;
    }
    if (s == kOverBudget) return nullptr;
    if (s < 0) continue;
    const int32_t root = cached->uncertain_roots[u];
    Walk(s, root, ends[root], depths[root] - 1, mask->data(), nullptr);
  }
  if (!status_.ok()) return nullptr;
  const std::vector<int32_t>& nodes = states_[state].nodes;
  if (!nodes.empty() && nodes[0] == 0) SetEos(absl::MakeSpan(*mask));
  return mask;
}

std::vector<std::vector<int32_t>> GrammarMatcher::Stacks(int32_t state) const {
  std::vector<std::vector<int32_t>> stacks;
  for (const int32_t id : states_[state].nodes) {
    std::vector<int32_t> stack;  // top first
    for (int32_t n = id; n != 0; n = nodes_[n].parent) stack.push_back(nodes_[n].pos);
    stacks.push_back(std::move(stack));
  }
  std::sort(stacks.begin(), stacks.end());
  return stacks;
}

std::string GrammarMatcher::StateKey(int32_t state) const {
  std::string key;
  for (const std::vector<int32_t>& stack : Stacks(state)) {
    key.append(reinterpret_cast<const char*>(stack.data()), stack.size() * sizeof(int32_t));
    const int32_t separator = -1;
    key.append(reinterpret_cast<const char*>(&separator), sizeof(separator));
  }
  return key;
}

bool GrammarMatcher::FillNextTokenBitmask(absl::Span<uint32_t> bitmask) {
  std::fill(bitmask.begin(), bitmask.end(), 0);
  if (!status_.ok()) return false;
  if (terminated_) {
    SetEos(bitmask);
    return true;
  }
  ++stats_.fills;
  work_ = 0;
  State& s = states_[current_];
  std::shared_ptr<const TokenMask> mask = s.mask;
  if (mask != nullptr) {
    ++stats_.local_hits;
  } else {
    mask = ComputeMask(current_);
    if (mask == nullptr) return false;
    // Masks kept per state are bounded; past the bound they are dropped (the shared cache and
    // the memoized transitions still make a recompute cheap).
    if (++masks_held_ > kMaxMasksPerMatcher) {
      for (State& state : states_) state.mask.reset();
      masks_held_ = 1;
    }
    states_[current_].mask = mask;
  }
  const size_t n = std::min(bitmask.size(), mask->size());
  std::copy(mask->begin(), mask->begin() + n, bitmask.begin());
  return true;
}

int32_t GrammarMatcher::RebuildState(const std::vector<std::vector<int32_t>>& stacks) {
  std::vector<int32_t> ids;
  for (const std::vector<int32_t>& stack : stacks) {
    int32_t node = 0;
    for (auto it = stack.rbegin(); it != stack.rend() && node >= 0; ++it) node = Intern(*it, node);
    if (node >= 0) ids.push_back(node);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return InternState(ids);
}

void GrammarMatcher::MaybeCompact() {
  if (states_.size() <= kMaxStates && nodes_.size() <= kMaxNodes) return;
  const std::vector<std::vector<int32_t>> current = Stacks(current_);
  std::vector<std::vector<std::vector<int32_t>>> history;
  for (const int32_t state : history_) history.push_back(Stacks(state));
  ResetTables();
  current_ = RebuildState(current);
  for (size_t i = 0; i < history.size(); ++i) history_[i] = RebuildState(history[i]);
}

bool GrammarMatcher::AcceptString(absl::string_view bytes) {
  if (terminated_ || !status_.ok()) return false;
  MaybeCompact();
  work_ = 0;
  int32_t state = current_;
  for (const char c : bytes) {
    state = Step(state, static_cast<uint8_t>(c));
    if (state < 0) return false;
  }
  history_.push_back(current_);
  if (history_.size() > kMaxRollback) history_.pop_front();
  current_ = state;
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token_id) {
  if (terminated_ || !status_.ok() || token_id < 0 || token_id >= vocab_->size()) return false;
  if (vocab_->is_eos(token_id)) {
    if (!CanTerminate()) return false;
    history_.push_back(current_);
    if (history_.size() > kMaxRollback) history_.pop_front();
    terminated_ = true;
    return true;
  }
  const std::string& bytes = vocab_->token_bytes(token_id);
  if (!vocab_->is_text(token_id) || bytes.empty()) return false;
  return AcceptString(bytes);
}

bool GrammarMatcher::Rollback(int n) {
  if (!status_.ok() || n < 0 || static_cast<size_t>(n) > history_.size()) return false;
  for (int i = 0; i < n; ++i) {
    current_ = history_.back();
    history_.pop_back();
    terminated_ = false;
  }
  return true;
}

GrammarMatcher::Stats GrammarMatcher::stats() const {
  Stats stats = stats_;
  stats.dfa_states = static_cast<int64_t>(states_.size());
  return stats;
}

}  // namespace llmserve::worker::structured
