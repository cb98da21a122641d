#include "worker/speculative/draft_model_proposer.h"

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
    active.push_back({.id = query.id,
                      .query = q,
                      .state = &state,
                      .wanted = wanted,
                      .feed = std::vector<int32_t>(query.tokens.begin() + common,
                                                   query.tokens.begin() + common + feed)});
  }
  // One pass per draft, all requests together: the first also catches up; a request stops at EOS
  // or its length.
  std::vector<Active*> pass;
  for (Active& request : active) pass.push_back(&request);
  while (!pass.empty()) {
    if (absl::Status run = Run(pass); !run.ok()) {
      DropAll();
      return run;
    }
    std::vector<Active*> next;
    for (size_t i = 0; i < pass.size(); ++i) {
      Active& request = *pass[i];
      std::vector<int32_t>& own = drafts[request.query];
      if (static_cast<int32_t>(own.size()) >= request.wanted) continue;
      own.push_back(Argmax(static_cast<int32_t>(i)));
      if (static_cast<int32_t>(own.size()) == request.wanted ||
          std::find(eos_token_ids_.begin(), eos_token_ids_.end(), own.back()) !=
              eos_token_ids_.end()) {
        continue;
      }
      request.feed.assign(1, own.back());
      next.push_back(&request);
    }
    pass = std::move(next);
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

absl::Status DraftModelProposer::Run(absl::Span<Active* const> requests) {
  batch_.Clear();
  for (const Active* request : requests) {
    batch_.AddSequence(request->feed, static_cast<int32_t>(request->state->cached.size()),
                       kv_.BlockTable(request->id));
  }
  if (absl::Status forward = draft_->Forward(batch_, &output_); !forward.ok()) return forward;
  for (const Active* request : requests) {
    std::vector<int32_t>& cached = request->state->cached;
    cached.insert(cached.end(), request->feed.begin(), request->feed.end());
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
