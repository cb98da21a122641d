// The seam between the engine loop and the hardware: one forward pass over a packed batch.
//
// A batch packs, without padding, any mix of sequences, each contributing a chunk of new tokens:
// a whole prompt, a prefill chunk, or one decode token. Sequence i's new tokens are
// token_ids[query_start[i] .. query_start[i+1]) at positions num_computed[i] + 0, 1, ...; the
// backend writes their K/V into the paged KV cache slots its block table names, and attention
// reads every earlier token of the sequence through the same table (blocks written by earlier
// steps or by other requests sharing a cached prefix included).
//
// Block tables are CSR: sequence i's blocks are block_ids[block_table_start[i] ..
// block_table_start[i+1]); token at position p lives in block (p / block_size), slot
// (p % block_size).
//
// Backends are not thread-safe: the engine thread owns one.

#ifndef LLMSERVE_WORKER_ENGINE_BACKEND_H_
#define LLMSERVE_WORKER_ENGINE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/model/lora_adapter.h"
#include "worker/model/model_config.h"

namespace llmserve::worker {

struct ForwardBatch {
  std::vector<int32_t> token_ids;          // [num_tokens]
  std::vector<int32_t> query_start;        // [num_seqs + 1], starts at 0, non-decreasing
  std::vector<int32_t> num_computed;       // [num_seqs] tokens already in the KV cache
  std::vector<int32_t> block_table_start;  // [num_seqs + 1]
  std::vector<int32_t> block_ids;          // [block_table_start.back()]
  // Per sequence: 1 to get logits for every new token (prompt logprobs), 0 for the last token
  // only. Empty: last token only for all.
  std::vector<uint8_t> all_logits;
  // Per sequence: 1 for an embedding request's chunk, which wants the hidden state (after the
  // final norm) of every new token and no logits. Empty: none.
  std::vector<uint8_t> hidden_states;
  // Per sequence: the LoRA adapter slot whose delta its projections add (Backend::SetLoraAdapter),
  // or -1 for the base model. Empty: the base model for all.
  std::vector<int32_t> lora_slots;

  int32_t num_seqs() const { return static_cast<int32_t>(num_computed.size()); }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  void Clear();
  // Appends one sequence's chunk: `tokens` at positions num_computed.., with its block table.
  void AddSequence(const std::vector<int32_t>& tokens, int32_t computed,
                   const std::vector<int32_t>& blocks, bool want_all_logits = false,
                   bool want_hidden_states = false, int32_t lora_slot = -1);
  bool wants_hidden_states(int32_t seq) const {
    return !hidden_states.empty() && hidden_states[seq] != 0;
  }
  int32_t lora_slot(int32_t seq) const { return lora_slots.empty() ? -1 : lora_slots[seq]; }
};

struct ForwardOutput {
  // [num_rows, vocab_size] row-major.
  std::vector<float> logits;
  // [num_seqs + 1]: sequence i's logit rows are [row_start[i], row_start[i+1]); one row (its
  // last token) unless all_logits asked for every new token, none when it wants hidden states.
  std::vector<int32_t> row_start;
  int64_t vocab_size = 0;
  // [num_hidden_rows, hidden_size] row-major: the final-norm hidden states of every new token of
  // the sequences that asked for them (ForwardBatch::hidden_states); sequence i's are rows
  // [hidden_row_start[i], hidden_row_start[i+1]).
  std::vector<float> hidden;
  std::vector<int32_t> hidden_row_start;
  int64_t hidden_size = 0;

  const float* Row(int32_t row) const { return logits.data() + row * vocab_size; }
  // The logits of sequence i's last new token.
  const float* LastRow(int32_t seq) const { return Row(row_start[seq + 1] - 1); }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const ModelConfig& config() const = 0;
  // Tokens per KV block.
  virtual int32_t block_size() const = 0;
  // Blocks in the KV cache (valid block ids are [0, num_kv_blocks)).
  virtual int32_t num_kv_blocks() const = 0;
  // "cpu" or "cuda".
  virtual absl::string_view name() const = 0;
  // Whether the LM head runs in int8 (what GetModelInfo and the metrics report).
  virtual bool lm_head_quantized() const { return false; }
  // Whether Forward returns hidden states (ForwardBatch::hidden_states): embedding requests need
  // it.
  virtual bool supports_hidden_states() const { return false; }
  // LoRA adapter slots (0: the backend serves none) and the largest rank they take.
  virtual int32_t max_loras() const { return 0; }
  virtual int64_t max_lora_rank() const { return 0; }
  // Puts `adapter` in slot [0, max_loras()) (null empties it), for sequences that name the slot
  // from the next Forward on. INVALID_ARGUMENT for a slot out of range or a rank above
  // max_lora_rank(); UNIMPLEMENTED on backends without LoRA.
  virtual absl::Status SetLoraAdapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter);

  // Runs the batch. INVALID_ARGUMENT when it is malformed (see ValidateForwardBatch): the engine
  // never sends one, but a bad index would corrupt memory, so every backend checks.
  virtual absl::Status Forward(const ForwardBatch& batch, ForwardOutput* output) = 0;

 protected:
  // SetLoraAdapter's checks, the same on every backend: INVALID_ARGUMENT for a slot outside
  // [0, max_loras()), or an adapter (null passes) whose rank is above max_lora_rank() or whose
  // layer count is not the model's.
  absl::Status CheckLoraAdapter(int32_t slot, const LoraAdapter* adapter) const;
  // Forward's: INVALID_ARGUMENT naming the first sequence whose slot is outside [0, max_loras())
  // or holds no adapter (`holds_adapter(slot)` false).
  absl::Status CheckLoraSlots(const ForwardBatch& batch,
                              absl::FunctionRef<bool(int32_t slot)> holds_adapter) const;
};

// Checks the batch's shape against the model and cache: sizes consistent, at least one token per
// sequence, token ids in the vocabulary, positions within max_model_len, block tables long enough
// for every position and block ids in range.
absl::Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config,
                                  int32_t block_size, int32_t num_kv_blocks);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_BACKEND_H_
