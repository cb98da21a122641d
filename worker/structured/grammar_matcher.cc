#include "worker/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace llmserve::worker::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : compiled_(std::move(grammar)), g_(&compiled_->grammar()), vocab_(&compiled_->vocab()) {
  trie_states_.resize(vocab_->trie_max_depth() + 1);
  ResetTables();
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
// the accept node). Terminates because left recursion is rejected at compile time.
void GrammarMatcher::Expand(int32_t node, std::vector<int32_t>* out) {
  if (node < 0 || !expand_seen_.insert(node).second) return;
  if (node == 0) {
    out->push_back(0);
    return;
  }
  const Node n = nodes_[node];
  const Element& e = g_->elements[n.pos];
  if (e.kind == ElementKind::kBytes) {
    out->push_back(node);
    return;
  }
  if (e.kind == ElementKind::kEnd) {
    Expand(n.parent, out);
    return;
  }
  // A rule: continue after it (a tail call needs no frame), then enter each alternative.
  int32_t ret = n.parent;
  if (g_->elements[n.pos + 1].kind != ElementKind::kEnd) {
    ret = Intern(n.pos + 1, n.parent);
    if (ret < 0) return;
  }
  for (const int32_t alt : g_->alternatives[e.value]) {
    if (g_->elements[alt].kind == ElementKind::kEnd) {
      Expand(ret, out);
    } else {
      Expand(Intern(alt, ret), out);
    }
  }
}

int32_t GrammarMatcher::InternState(const std::vector<int32_t>& nodes) {
  const auto it = state_ids_.find(nodes);
  if (it != state_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(states_.size());
  states_.emplace_back();
  states_.back().nodes = nodes;
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
    const int32_t id = states_[state].nodes[i];
    if (id == 0) continue;
    const Node n = nodes_[id];
    if (!g_->byte_sets[g_->elements[n.pos].value].Has(byte)) continue;
    if (g_->elements[n.pos + 1].kind == ElementKind::kEnd) {
      Expand(n.parent, &scratch_);
    } else {
      Expand(Intern(n.pos + 1, n.parent), &scratch_);
    }
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

std::shared_ptr<const TokenMask> GrammarMatcher::ComputeMask(int32_t state) {
  auto mask = std::make_shared<TokenMask>((vocab_->size() + 31) / 32, 0);
  uint32_t* bits = mask->data();
  const uint8_t* bytes = vocab_->trie_bytes().data();
  const int32_t* depths = vocab_->trie_depths().data();
  const int32_t* ends = vocab_->trie_subtree_ends().data();
  const int32_t* token_begin = vocab_->trie_token_begins().data();
  const int32_t* tokens = vocab_->trie_tokens().data();
  const int32_t size = vocab_->trie_size();
  trie_states_[0] = state;
  int64_t visited = 0;
  int32_t i = 1;
  while (i < size) {
    ++visited;
    const int32_t next = Step(trie_states_[depths[i] - 1], bytes[i]);
    if (next < 0) {
      i = ends[i];
      continue;
    }
    trie_states_[depths[i]] = next;
    for (int32_t k = token_begin[i]; k < token_begin[i + 1]; ++k) {
      bits[tokens[k] >> 5] |= 1u << (tokens[k] & 31);
    }
    ++i;
  }
  stats_.trie_nodes_visited += visited;
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

void GrammarMatcher::FillNextTokenBitmask(absl::Span<uint32_t> bitmask) {
  std::fill(bitmask.begin(), bitmask.end(), 0);
  if (terminated_) {
    SetEos(bitmask);
    return;
  }
  ++stats_.fills;
  State& s = states_[current_];
  std::shared_ptr<const TokenMask> mask = s.mask;
  if (mask != nullptr) {
    ++stats_.local_hits;
  } else {
    const std::string key = StateKey(current_);
    mask = compiled_->FindMask(key);
    if (mask != nullptr) {
      ++stats_.shared_hits;
    } else {
      ++stats_.computed;
      mask = ComputeMask(current_);
      compiled_->StoreMask(key, mask);
    }
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
  if (terminated_) return false;
  MaybeCompact();
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
  if (terminated_ || token_id < 0 || token_id >= vocab_->size()) return false;
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
  if (n < 0 || static_cast<size_t>(n) > history_.size()) return false;
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
