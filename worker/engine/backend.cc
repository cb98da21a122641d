#include "worker/engine/backend.h"

#include "absl/strings/str_cat.h"

namespace llmserve::worker {

void ForwardBatch::Clear() {
  token_ids.clear();
  query_start.assign(1, 0);
  num_computed.clear();
  block_table_start.assign(1, 0);
  block_ids.clear();
  all_logits.clear();
  hidden_states.clear();
  lora_slots.clear();
}

void ForwardBatch::AddSequence(const std::vector<int32_t>& tokens, int32_t computed,
                               const std::vector<int32_t>& blocks, bool want_all_logits,
                               bool want_hidden_states, int32_t lora_slot) {
  if (query_start.empty()) query_start.push_back(0);
  if (block_table_start.empty()) block_table_start.push_back(0);
  token_ids.insert(token_ids.end(), tokens.begin(), tokens.end());
  query_start.push_back(static_cast<int32_t>(token_ids.size()));
  num_computed.push_back(computed);
  block_ids.insert(block_ids.end(), blocks.begin(), blocks.end());
  block_table_start.push_back(static_cast<int32_t>(block_ids.size()));
  all_logits.push_back(want_all_logits ? 1 : 0);
  hidden_states.push_back(want_hidden_states ? 1 : 0);
  lora_slots.push_back(lora_slot);
}

absl::Status Backend::CheckLoraAdapter(int32_t slot, const LoraAdapter* adapter) const {
  if (slot < 0 || slot >= max_loras()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA slot ", slot, " is outside [0, ", max_loras(), ")"));
  }
  if (adapter == nullptr) return absl::OkStatus();
  if (adapter->rank > max_lora_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("the adapter's rank ", adapter->rank,
                                                   " is above max_lora_rank ", max_lora_rank()));
  }
  if (static_cast<int64_t>(adapter->layers.size()) != config().num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("the adapter has ", adapter->layers.size(),
                                                   " layers; the model ", config().num_layers));
  }
  return absl::OkStatus();
}

absl::Status Backend::CheckLoraSlots(const ForwardBatch& batch,
                                     absl::FunctionRef<bool(int32_t slot)> holds_adapter) const {
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t slot = batch.lora_slot(s);
    if (slot < 0) continue;
    if (slot >= max_loras() || !holds_adapter(slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward batch: sequence ", s, " names LoRA slot ", slot,
                       ", which holds no adapter (", max_loras(), " slots)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::SetLoraAdapter(int32_t, std::shared_ptr<const LoraAdapter>) {
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " backend does not serve LoRA adapters"));
}

absl::Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config,
                                  int32_t block_size, int32_t num_kv_blocks) {
  const int32_t num_seqs = batch.num_seqs();
  if (num_seqs == 0) return absl::InvalidArgumentError("forward batch has no sequences");
  if (batch.query_start.size() != static_cast<size_t>(num_seqs) + 1 || batch.query_start[0] != 0 ||
      batch.query_start.back() != batch.num_tokens()) {
    return absl::InvalidArgumentError("forward batch: query_start does not match the tokens");
  }
  if (batch.block_table_start.size() != static_cast<size_t>(num_seqs) + 1 ||
      batch.block_table_start[0] != 0 ||
      batch.block_table_start.back() != static_cast<int32_t>(batch.block_ids.size())) {
    return absl::InvalidArgumentError("forward batch: block_table_start does not match block_ids");
  }
  if (!batch.all_logits.empty() && batch.all_logits.size() != static_cast<size_t>(num_seqs)) {
    return absl::InvalidArgumentError("forward batch: all_logits needs one entry per sequence");
  }
  if (!batch.hidden_states.empty() && batch.hidden_states.size() != static_cast<size_t>(num_seqs)) {
    return absl::InvalidArgumentError("forward batch: hidden_states needs one entry per sequence");
  }
  if (!batch.lora_slots.empty() && batch.lora_slots.size() != static_cast<size_t>(num_seqs)) {
    return absl::InvalidArgumentError("forward batch: lora_slots needs one entry per sequence");
  }
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t new_tokens = batch.query_start[s + 1] - batch.query_start[s];
    if (new_tokens <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward batch: sequence ", s, " has no tokens"));
    }
    const int64_t end = static_cast<int64_t>(batch.num_computed[s]) + new_tokens;
    if (batch.num_computed[s] < 0 || end > config.max_model_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward batch: sequence ", s, " reaches position ", end,
                       " beyond max_model_len ", config.max_model_len));
    }
    const int32_t blocks = batch.block_table_start[s + 1] - batch.block_table_start[s];
    if (static_cast<int64_t>(blocks) * block_size < end) {
      return absl::InvalidArgumentError(absl::StrCat("forward batch: sequence ", s, " has ", blocks,
                                                     " blocks for ", end, " tokens"));
    }
  }
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward batch: token id ", id, " is outside the vocabulary"));
    }
  }
  for (int32_t id : batch.block_ids) {
    if (id < 0 || id >= num_kv_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward batch: block id ", id, " is outside [0, ", num_kv_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker
