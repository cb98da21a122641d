#include "worker/engine/draft_model_proposer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker {

absl::StatusOr<std::unique_ptr<DraftModelProposer>> DraftModelProposer::Create(
    std::unique_ptr<Backend> draft, const ModelConfig& target, int32_t max_catch_up_tokens) {
  if (draft == nullptr) return absl::InvalidArgumentError("no draft model backend");
  if (draft->config().vocab_size > target.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the draft model's vocabulary (", draft->config().vocab_size,
                     " tokens) is larger than the target's (", target.vocab_size,
                     "): a draft model must share the target's tokenizer"));
  }
  if (draft->num_kv_blocks() < 2) {
    return absl::InvalidArgumentError("the draft model's KV cache needs at least 2 blocks");
  }
  if (max_catch_up_tokens < 1) {
    return absl::InvalidArgumentError("the draft model's catch-up budget must be >= 1 token");
  }
  return std::unique_ptr<DraftModelProposer>(
      new DraftModelProposer(std::move(draft), target, max_catch_up_tokens));
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<Backend> draft, const ModelConfig& target,
                                       int32_t max_catch_up_tokens)
    : draft_(std::move(draft)),
      eos_token_ids_(target.eos_token_ids),
      max_catch_up_tokens_(max_catch_up_tokens),
      max_model_len_(static_cast<int32_t>(draft_->config().max_model_len)),
      kv_(draft_->num_kv_blocks(), draft_->block_size(), /*enable_prefix_caching=*/false) {}

absl::StatusOr<std::vector<std::vector<int32_t>>> DraftModelProposer::Propose(
    absl::Span<const DraftQuery> queries) {
  ++calls_;
  std::vector<std::vector<int32_t>> drafts(queries.size());
  // Mark every request of this call first, so that making room for one never evicts another.
  for (const DraftQuery& query : queries) states_[query.id].last_seen = calls_;

  std::vector<Active> active;
  std::vector<RequestId> ids;
  std::vector<std::vector<int32_t>> feeds;
  std::vector<State*> states;
  int32_t budget = max_catch_up_tokens_;
  for (size_t q = 0; q < queries.size(); ++q) {
    const DraftQuery& query = queries[q];
    const int32_t length = static_cast<int32_t>(query.tokens.size());
    if (length == 0 || length > max_model_len_ || query.max_drafts < 1) {
      Release(query.id);
      continue;
    }
    State& state = states_.at(query.id);
    // Keep what the target accepted: the longest common prefix, but at least the last token is
    // fed, since its logits give the first draft.
    const int32_t cached = static_cast<int32_t>(state.cached.size());
    const int32_t common = std::min<int32_t>(
        length - 1, static_cast<int32_t>(std::mismatch(state.cached.begin(), state.cached.end(),
                                                       query.tokens.begin(), query.tokens.end())
                                             .first -
                                         state.cached.begin()));
    if (common < cached) state.cached.resize(common);
    // Also returns slots reserved for drafts a previous call did not decode.
    kv_.RollbackSlots(query.id, common);
    const int32_t need = length - common;
    const int32_t feed = std::min(need, budget);
    if (feed == 0) continue;
    // Positions fed stay below the draft's context: the last draft is decoded, not fed.
    const int32_t wanted =
        feed < need ? 0 : std::min(query.max_drafts, max_model_len_ - length + 1);
    if (!Allocate(query.id, feed + std::max(0, wanted - 1))) continue;
    budget -= feed;
    active.push_back({.query = q, .state = &state, .wanted = wanted});
    ids.push_back(query.id);
    feeds.emplace_back(query.tokens.begin() + common, query.tokens.begin() + common + feed);
    states.push_back(&state);
  }
  if (active.empty()) return drafts;
  if (absl::Status run = Run(ids, feeds, states); !run.ok()) {
    DropAll();
    return run;
  }
  std::vector<size_t> decoding;  // indices into `active` still drafting
  for (size_t a = 0; a < active.size(); ++a) {
    if (active[a].wanted == 0) continue;
    const int32_t token = Argmax(static_cast<int32_t>(a));
    drafts[active[a].query].push_back(token);
    decoding.push_back(a);
  }
  // One pass per further draft, all requests together; a request stops at EOS or its length.
  while (true) {
    ids.clear();
    feeds.clear();
    states.clear();
    std::vector<size_t> next;
    for (size_t a : decoding) {
      const std::vector<int32_t>& own = drafts[active[a].query];
      if (static_cast<int32_t>(own.size()) >= active[a].wanted ||
          std::find(eos_token_ids_.begin(), eos_token_ids_.end(), own.back()) !=
              eos_token_ids_.end()) {
        continue;
      }
      next.push_back(a);
      ids.push_back(queries[active[a].query].id);
      feeds.push_back({own.back()});
      states.push_back(active[a].state);
    }
    if (next.empty()) break;
    if (absl::Status run = Run(ids, feeds, states); !run.ok()) {
      DropAll();
      return run;
    }
    for (size_t i = 0; i < next.size(); ++i) {
      drafts[active[next[i]].query].push_back(Argmax(static_cast<int32_t>(i)));
    }
    decoding = std::move(next);
  }
  return drafts;
}

bool DraftModelProposer::Allocate(RequestId id, int32_t tokens) {
  while (!kv_.AllocateSlots(id, tokens).has_value()) {
    // Evict the request seen least recently, if it is not part of this call.
    auto victim = states_.end();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if (it->second.last_seen < calls_ &&
          (victim == states_.end() || it->second.last_seen < victim->second.last_seen)) {
        victim = it;
      }
    }
    if (victim == states_.end()) return false;
    kv_.Free(victim->first);
    states_.erase(victim);
  }
  return true;
}

absl::Status DraftModelProposer::Run(absl::Span<const RequestId> ids,
                                     absl::Span<const std::vector<int32_t>> feeds,
                                     absl::Span<State* const> states) {
  batch_.Clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    batch_.AddSequence(feeds[i], static_cast<int32_t>(states[i]->cached.size()),
                       kv_.BlockTable(ids[i]));
  }
  if (absl::Status forward = draft_->Forward(batch_, &output_); !forward.ok()) return forward;
  for (size_t i = 0; i < ids.size(); ++i) {
    states[i]->cached.insert(states[i]->cached.end(), feeds[i].begin(), feeds[i].end());
  }
  return absl::OkStatus();
}

int32_t DraftModelProposer::Argmax(int32_t seq) const {
  const float* row = output_.LastRow(seq);
  return static_cast<int32_t>(std::max_element(row, row + output_.vocab_size) - row);
}

void DraftModelProposer::Release(RequestId id) {
  kv_.Free(id);
  states_.erase(id);
}

void DraftModelProposer::DropAll() {
  for (const auto& [id, state] : states_) kv_.Free(id);
  states_.clear();
}

}  // namespace llmserve::worker
