// A random mix of requests for the backends' property tests, played out step by step the way the
// scheduler would: each step takes a random subset of the unfinished sequences, each with its next
// chunk (a random piece of the prompt, or one token after it), and some sequences start by reusing
// the first KV blocks an earlier one wrote for the same prompt prefix. Every sequence's tokens
// (prompt and the "generated" continuation) are fixed up front, so logits can be compared
// against a reference at every position.
//
// Thread-compatible. Header-only: the CPU and CUDA backend tests both use it.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_RANDOM_REQUEST_MIX_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_RANDOM_REQUEST_MIX_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "worker/engine/backend.h"

namespace llmserve::worker::testing {

class RandomRequestMix {
 public:
  struct Options {
    int num_sequences = 1;
    int32_t max_tokens = 1;  // per sequence, prompt included
    int32_t vocab_size = 1;
    int32_t block_size = 1;
    int32_t num_blocks = 1;  // KV blocks the backend has
    int32_t max_chunk = 0;   // largest prompt chunk per step; 0: no limit
  };

  struct Sequence {
    std::vector<int32_t> tokens;
    int32_t prompt_len = 0;
    int32_t computed = 0;
    std::vector<int32_t> blocks;
    int shares_with = -1;  // the sequence whose first shared_blocks blocks it reuses
    int32_t shared_blocks = 0;
  };

  RandomRequestMix(std::mt19937& rng, const Options& options) : rng_(rng), options_(options) {
    const int32_t block_size = options.block_size;
    sequences_.resize(options.num_sequences);
    for (size_t s = 0; s < sequences_.size(); ++s) {
      Sequence& seq = sequences_[s];
      const int32_t total = 1 + static_cast<int32_t>(rng_() % options.max_tokens);
      for (int32_t i = 0; i < total; ++i) seq.tokens.push_back(rng_() % options.vocab_size);
      seq.prompt_len = 1 + static_cast<int32_t>(rng_() % total);
      if (s > 0 && rng_() % 2) {
        const int other = static_cast<int>(rng_() % s);
        const int32_t max_shared =
            std::min(sequences_[other].prompt_len, seq.prompt_len - 1) / block_size;
        if (max_shared > 0) {
          seq.shares_with = other;
          seq.shared_blocks = 1 + static_cast<int32_t>(rng_() % max_shared);
          std::copy_n(sequences_[other].tokens.begin(), seq.shared_blocks * block_size,
                      seq.tokens.begin());
        }
      }
    }
    free_blocks_.resize(options.num_blocks);
    for (int32_t i = 0; i < options.num_blocks; ++i) free_blocks_[i] = i;
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), rng_);
  }

  const std::vector<Sequence>& sequences() const { return sequences_; }

  bool Done() const {
    return std::all_of(sequences_.begin(), sequences_.end(), [](const Sequence& s) {
      return s.computed == static_cast<int32_t>(s.tokens.size());
    });
  }

  // Fills `batch` with the next step and `in_batch` with the sequences it holds, in batch order
  // (possibly none this step). False when the KV blocks ran out.
  bool NextBatch(ForwardBatch* batch, std::vector<int>* in_batch) {
    const int32_t block_size = options_.block_size;
    batch->Clear();
    in_batch->clear();
    for (size_t s = 0; s < sequences_.size(); ++s) {
      Sequence& seq = sequences_[s];
      if (seq.computed == static_cast<int32_t>(seq.tokens.size()) || rng_() % 3 == 0) continue;
      if (seq.computed == 0 && seq.shares_with >= 0) {
        const Sequence& other = sequences_[seq.shares_with];
        if (other.computed < seq.shared_blocks * block_size) continue;  // prefix not cached yet
        seq.blocks.assign(other.blocks.begin(), other.blocks.begin() + seq.shared_blocks);
        seq.computed = seq.shared_blocks * block_size;
      }
      const int32_t remaining_prompt = seq.prompt_len - seq.computed;
      int32_t chunk =
          remaining_prompt > 0 ? 1 + static_cast<int32_t>(rng_() % remaining_prompt) : 1;
      if (options_.max_chunk > 0) chunk = std::min(chunk, options_.max_chunk);
      while (static_cast<int32_t>(seq.blocks.size()) * block_size < seq.computed + chunk) {
        if (free_blocks_.empty()) return false;
        seq.blocks.push_back(free_blocks_.back());
        free_blocks_.pop_back();
      }
      batch->AddSequence(std::vector<int32_t>(seq.tokens.begin() + seq.computed,
                                              seq.tokens.begin() + seq.computed + chunk),
                         seq.computed, seq.blocks, /*want_all_logits=*/rng_() % 4 == 0);
      in_batch->push_back(static_cast<int>(s));
    }
    return true;
  }

  // Marks the chunks of `batch` (from NextBatch) as computed.
  void Advance(const ForwardBatch& batch, const std::vector<int>& in_batch) {
    for (size_t i = 0; i < in_batch.size(); ++i) {
      sequences_[in_batch[i]].computed += batch.query_start[i + 1] - batch.query_start[i];
    }
  }

 private:
  std::mt19937& rng_;
  Options options_;
  std::vector<Sequence> sequences_;
  std::vector<int32_t> free_blocks_;
};

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_RANDOM_REQUEST_MIX_H_
