#include "worker/engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/base/cgroup_limits.h"
#include "common/base/cpu_isa_cap.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"
#include "worker/engine/cpu/kernels.h"
#include "worker/engine/cpu/lora_kernels.h"
#include "worker/model/rope.h"

namespace llmserve::worker {
namespace {

// An optional bias or norm weight as a pointer: null when the model has none.
const float* BiasOrNull(const Tensor& tensor) {
  return tensor.empty() ? nullptr : tensor.data_as<float>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    std::unique_ptr<ModelWeights> weights, const CpuBackendOptions& options) {
  LLMSERVE_RETURN_IF_ERROR(common::CheckCpuIsaCap());
  const ModelConfig& c = weights->config;
  if (options.block_size < 1 || options.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size ", options.block_size, " is outside [1, 1024]"));
  }
  if (options.max_loras < 0 || options.max_loras > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_loras ", options.max_loras, " is outside [0, 1024]"));
  }
  if (options.max_lora_rank < 1 || options.max_lora_rank > kMaxLoraRank) {
    return absl::InvalidArgumentError(absl::StrCat("max_lora_rank ", options.max_lora_rank,
                                                   " is outside [1, ", kMaxLoraRank, "]"));
  }
  if (options.num_threads < 0 || options.num_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads ", options.num_threads, " is outside [0, 1024]"));
  }
  const int64_t bytes_per_block = KvBytesPerBlock(c, options.block_size);
  const int64_t num_blocks = options.kv_cache_bytes / bytes_per_block;
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache budget of ", options.kv_cache_bytes,
                                                   " bytes holds no block of ", bytes_per_block,
                                                   " bytes"));
  }
  if (num_blocks > INT32_MAX / 2) {
    return absl::InvalidArgumentError("KV cache budget is too large");
  }
  CpuBackendOptions resolved = options;
  LLMSERVE_ASSIGN_OR_RETURN(resolved.quantization,
                            ResolveQuantization(options.quantization, c.quantization));
  const bool quantized = resolved.quantization != Quantization::kNone || c.quantization.quantized();
  if (options.quantize_lm_head.value_or(false) && !quantized) {
    return absl::InvalidArgumentError(
        "quantize_lm_head needs a quantized model (int8, an AWQ or GPTQ checkpoint, or a GGUF file "
        "with Q4 projections)");
  }
  if (options.quantized_activations && !quantized) {
    return absl::InvalidArgumentError(
        "quantized_activations needs a quantized model (int8, an AWQ or GPTQ checkpoint, or a GGUF "
        "file with Q4 projections): it changes how int8 and 4-bit weights are multiplied");
  }
  if (resolved.quantization == Quantization::kInt8) {
    // Projections already in 4 bits (a GGUF file's Q4 ones) stay as they are.
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = weights->layers[i];
      for (const auto& [dense, int4, name] :
           {std::tuple<const Tensor*, const Int4Matrix*, const char*>{&l.qkv_weight, &l.qkv_int4,
                                                                      "qkv"},
            {&l.o_weight, &l.o_int4, "o_proj"},
            {&l.up_weight, &l.up_int4, "gate/up"},
            {&l.down_weight, &l.down_int4, "down_proj"}}) {
        if (!int4->empty()) continue;
        LLMSERVE_RETURN_IF_ERROR(CheckQuantizable(*dense, absl::StrCat("layer ", i, " ", name)));
      }
    }
  }
  if (options.quantize_lm_head.value_or(false)) {
    LLMSERVE_RETURN_IF_ERROR(CheckQuantizable(weights->LmHead(), "lm_head"));
  }
  resolved.quantize_lm_head = options.quantize_lm_head.value_or(
      quantized && CheckQuantizable(weights->LmHead(), "lm_head").ok());
  if (c.quantization.quantized()) {
    const int64_t h = c.hidden_size, inter = c.intermediate_size, q = c.num_heads * c.head_dim;
    const int64_t qkv = q + 2 * c.num_kv_heads * c.head_dim;
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = weights->layers[i];
      for (const auto& [w, rows, cols, name] :
           {std::tuple<const Int4Matrix*, int64_t, int64_t, const char*>{&l.qkv_int4, qkv, h,
                                                                         "qkv"},
            {&l.o_int4, h, q, "o_proj"},
            {&l.up_int4, 2 * inter, h, "gate/up"},
            {&l.down_int4, h, inter, "down_proj"}}) {
        // A GGUF file keeps only some projections in 4 bits; AWQ and GPTQ all of them.
        if (w->empty() && c.quantization.method == CheckpointQuantization::Method::kGguf) {
          continue;
        }
        if (w->rows != rows || w->cols != cols || w->group_size < 1 ||
            w->cols % w->group_size != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "layer ", i, " ", name, ": the 4-bit projection is [", w->rows, ", ", w->cols,
              "] in groups of ", w->group_size, ", expected [", rows, ", ", cols, "]"));
        }
      }
    }
  }
  // By default one thread per CPU this process may use: its affinity, capped by a container's
  // CPU quota (threads beyond the quota are throttled, and the spinning pool suffers most).
  const int threads = options.thread_pool != nullptr ? options.thread_pool->num_threads()
                      : options.num_threads > 0      ? options.num_threads
                                                     : common::UsableCpusOfThisProcess();
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(std::move(weights), resolved, static_cast<int32_t>(num_blocks), threads));
}

int64_t CpuBackend::KvBytesPerBlock(const ModelConfig& c, int32_t block_size) {
  return 2 * c.num_layers * c.num_kv_heads * block_size * c.head_dim *
         static_cast<int64_t>(sizeof(float));
}

CpuBackend::CpuBackend(std::unique_ptr<ModelWeights> weights, const CpuBackendOptions& options,
                       int32_t num_blocks, int num_threads)
    : weights_(std::move(weights)),
      quantization_(options.quantization),
      quantized_activations_(options.quantized_activations),
      layout_{weights_->config.num_kv_heads, weights_->config.head_dim, options.block_size},
      num_blocks_(num_blocks),
      pool_owner_(options.thread_pool != nullptr
                      ? options.thread_pool
                      : std::make_shared<cpu::ParallelForPool>(num_threads)),
      pool_(*pool_owner_),
      matmul_(&pool_, options.quantized_activations),
      lora_slots_(options.max_loras),
      max_lora_rank_(options.max_lora_rank),
      scores_(num_threads) {
  const ModelConfig& c = weights_->config;
  const bool int8 = options.quantization == Quantization::kInt8;
  const auto Prepare = [this](Tensor w, bool quantize) {
    if (quantize) return cpu::ProjectionWeight::QuantizedInt8(w, &pool_);  // frees w on return
    return cpu::ProjectionWeight(std::move(w), cpu::WeightLayout::kBest, &pool_);
  };
  // The projections move into the layout MatMul runs (packing frees the dense copies). A tied LM
  // head is also the embedding table: the lookup then reads its rows from the packed matrix,
  // unless the head is quantized, since embeddings stay unquantized.
  // A projection in 4 bits (AWQ/GPTQ: all of them; GGUF: its Q4 ones) keeps them; the others are
  // dense, or int8 when asked.
  const auto PrepareProjection = [this, &Prepare, int8](Tensor& dense, Int4Matrix& int4) {
    if (int4.empty()) return Prepare(std::move(dense), int8);
    cpu::ProjectionWeight packed = cpu::ProjectionWeight::Int4(int4, &pool_);
    int4 = Int4Matrix();
    return packed;
  };
  for (LayerWeights& layer : weights_->layers) {
    projections_.push_back({PrepareProjection(layer.qkv_weight, layer.qkv_int4),
                            PrepareProjection(layer.o_weight, layer.o_int4),
                            PrepareProjection(layer.up_weight, layer.up_int4),
                            PrepareProjection(layer.down_weight, layer.down_int4)});
  }
  const bool quantize_head = options.quantize_lm_head.value_or(false);
  if (weights_->lm_head.empty() && quantize_head) {
    lm_head_ = cpu::ProjectionWeight::QuantizedInt8(weights_->token_embedding, &pool_);
  } else {
    embedding_is_lm_head_ = weights_->lm_head.empty();
    lm_head_ =
        Prepare(std::move(embedding_is_lm_head_ ? weights_->token_embedding : weights_->lm_head),
                quantize_head);
  }
  weight_bytes_ = static_cast<int64_t>(weights_->SizeBytes()) + lm_head_.SizeBytes();
  for (const LayerProjections& p : projections_) {
    weight_bytes_ += p.qkv.SizeBytes() + p.o.SizeBytes() + p.up.SizeBytes() + p.down.SizeBytes();
  }
  if (c.position == PositionKind::kRope) rope_inv_freq_ = RopeInverseFrequencies(c);
  const int64_t layer_floats = layout_.Offset(num_blocks_, 0, 0);
  const size_t kv_bytes = static_cast<size_t>(c.num_layers * layer_floats) * sizeof(float);
  k_cache_.reset(static_cast<float*>(AllocateHugePageMemory(kv_bytes)));
  v_cache_.reset(static_cast<float*>(AllocateHugePageMemory(kv_bytes)));
  LLMSERVE_CHECK(k_cache_ != nullptr && v_cache_ != nullptr)
      << "out of memory allocating the KV cache: 2 x " << kv_bytes << " bytes";
  // Zeroed already; written now so that the cache's memory is taken at start, not as it fills.
  std::memset(k_cache_.get(), 0, kv_bytes);
  std::memset(v_cache_.get(), 0, kv_bytes);
  for (auto& scores : scores_) scores.resize(c.max_model_len);
}

absl::Status CpuBackend::Forward(const ForwardBatch& batch, ForwardOutput* output) {
  LLMSERVE_RETURN_IF_ERROR(ValidateForwardBatch(batch, config(), block_size(), num_kv_blocks()));
  const int64_t forward_start = profiling_ ? cpu::SteadyClockNanos() : 0;
  const int64_t loops_before = pool_.loops_measured();
  const int64_t wait_before = pool_.wait_nanos_measured();
  mark_nanos_ = forward_start;
  mark_wait_nanos_ = pool_.wait_nanos_measured();
  const ModelConfig& c = config();
  const int64_t tokens = batch.num_tokens();
  const int64_t qkv_width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  token_seq_.resize(tokens);
  token_pos_.resize(tokens);
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      token_seq_[t] = s;
      token_pos_[t] = batch.num_computed[s] + (t - batch.query_start[s]);
    }
  }
  LLMSERVE_RETURN_IF_ERROR(
      CheckLoraSlots(batch, [&](int32_t slot) { return lora_slots_[slot] != nullptr; }));
  for (LoraGroup& group : lora_groups_) group.tokens.clear();
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t slot = batch.lora_slot(s);
    if (slot < 0) continue;
    auto group = std::find_if(lora_groups_.begin(), lora_groups_.end(),
                              [slot](const LoraGroup& g) { return g.slot == slot; });
    if (group == lora_groups_.end()) {
      lora_groups_.push_back({.slot = slot});
      group = lora_groups_.end() - 1;
    }
    for (int64_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      group->tokens.push_back(t);
    }
  }
  // Kept (with their capacity) for later steps; a step uses those with tokens.
  std::stable_partition(lora_groups_.begin(), lora_groups_.end(),
                        [](const LoraGroup& g) { return !g.tokens.empty(); });
  hidden_.resize(tokens * c.hidden_size);
  normed_.resize(tokens * c.hidden_size);
  qkv_.resize(tokens * qkv_width);
  attn_out_.resize(tokens * c.num_heads * c.head_dim);
  proj_.resize(tokens * c.hidden_size);
  mlp_up_.resize(tokens * c.intermediate_size * (c.gated_mlp ? 2 : 1));
  mlp_act_.resize(tokens * c.intermediate_size);

  Embed(batch);
  Mark(cpu::ForwardPhase::kEmbed);
  for (int layer = 0; layer < c.num_layers; ++layer) RunLayer(layer, batch);
  ComputeLogits(batch, output);
  if (profiling_) {
    ++profile_.forwards;
    profile_.forward_nanos += cpu::SteadyClockNanos() - forward_start;
    profile_.pool_loops += pool_.loops_measured() - loops_before;
    profile_.pool_wait_nanos += pool_.wait_nanos_measured() - wait_before;
  }
  return absl::OkStatus();
}

void CpuBackend::EnableProfile(bool on) {
  profiling_ = on;
  pool_.set_measure_waits(on);
}

void CpuBackend::Embed(const ForwardBatch& batch) {
  const ModelConfig& c = config();
  const int64_t h = c.hidden_size;
  const Tensor& table = weights_->token_embedding;
  const size_t row_bytes = h * DTypeSize(table.dtype());
  pool_.ParallelFor(batch.num_tokens(), [&](int, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (embedding_is_lm_head_) {
        lm_head_.CopyRow(batch.token_ids[t], hidden_.data() + t * h);
      } else {
        const auto* row =
            static_cast<const unsigned char*>(table.data()) + batch.token_ids[t] * row_bytes;
        ConvertElements(row, table.dtype(), hidden_.data() + t * h, DType::kF32, h);
      }
      if (c.position == PositionKind::kLearned) {
        cpu::Add(hidden_.data() + t * h,
                 weights_->position_embedding.data_as<float>() + token_pos_[t] * h, h);
      }
    }
  });
}

void CpuBackend::RunLayer(int layer, const ForwardBatch& batch) {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_->layers[layer];
  const int64_t tokens = batch.num_tokens(), h = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps);
  pool_.ParallelFor(tokens, [&](int, int64_t begin, int64_t end) {
    cpu::Norm(c.norm, hidden_.data() + begin * h, w.attn_norm_weight.data_as<float>(),
              BiasOrNull(w.attn_norm_bias), eps, end - begin, h, normed_.data() + begin * h);
  });
  Mark(cpu::ForwardPhase::kNorm);
  const LayerProjections& projections = projections_[layer];
  matmul_.Run(normed_.data(), tokens, projections.qkv, qkv_.data());
  Mark(cpu::ForwardPhase::kQkv, projections.qkv.SizeBytes());
  const int64_t qkv_width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  ApplyLora(layer, LoraTarget::kQkv, normed_.data(), h, qkv_.data(), qkv_width);
  Mark(cpu::ForwardPhase::kLora);
  Attention(layer, batch);
  Mark(cpu::ForwardPhase::kAttention);
  matmul_.Run(attn_out_.data(), tokens, projections.o, proj_.data());
  Mark(cpu::ForwardPhase::kO, projections.o.SizeBytes());
  ApplyLora(layer, LoraTarget::kO, attn_out_.data(), c.num_heads * c.head_dim, proj_.data(), h);
  Mark(cpu::ForwardPhase::kLora);
  pool_.ParallelFor(tokens, [&](int, int64_t begin, int64_t end) {
    if (!w.o_bias.empty())
      cpu::AddBias(proj_.data() + begin * h, BiasOrNull(w.o_bias), end - begin, h);
    cpu::Add(hidden_.data() + begin * h, proj_.data() + begin * h, (end - begin) * h);
    cpu::Norm(c.norm, hidden_.data() + begin * h, w.mlp_norm_weight.data_as<float>(),
              BiasOrNull(w.mlp_norm_bias), eps, end - begin, h, normed_.data() + begin * h);
  });
  Mark(cpu::ForwardPhase::kNorm);
  Mlp(layer, w, projections, tokens);
}

void CpuBackend::Attention(int layer, const ForwardBatch& batch) {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_->layers[layer];
  const int64_t tokens = batch.num_tokens(), d = c.head_dim;
  const int64_t q_width = c.num_heads * d, kv_width = c.num_kv_heads * d;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int64_t layer_floats = layout_.Offset(num_blocks_, 0, 0);
  float* k_cache = k_cache_.get() + layer * layer_floats;
  float* v_cache = v_cache_.get() + layer * layer_floats;
  const int32_t* block_ids = batch.block_ids.data();

  // Biases and rotary embeddings, then every new token's K/V into its cache slot: all of them
  // before any attention, since a token attends to the new tokens before it.
  pool_.ParallelFor(tokens, [&](int, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = qkv_.data() + t * qkv_width;
      if (!w.qkv_bias.empty()) cpu::AddBias(row, w.qkv_bias.data_as<float>(), 1, qkv_width);
      if (c.position == PositionKind::kRope) {
        cpu::ApplyRope(rope_inv_freq_, token_pos_[t], c.num_heads + c.num_kv_heads, d, row);
      }
      const int32_t* blocks = block_ids + batch.block_table_start[token_seq_[t]];
      cpu::WriteKv(layout_, blocks, token_pos_[t], row + q_width, row + q_width + kv_width, k_cache,
                   v_cache);
    }
  });
  const int64_t group = c.num_heads / c.num_kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  pool_.ParallelFor(tokens * c.num_heads, [&](int thread, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / c.num_heads, head = item % c.num_heads;
      const int32_t* blocks = block_ids + batch.block_table_start[token_seq_[t]];
      cpu::AttendOneHead(layout_, blocks, token_pos_[t], head / group,
                         qkv_.data() + t * qkv_width + head * d, scale, k_cache, v_cache,
                         scores_[thread].data(), attn_out_.data() + t * q_width + head * d);
    }
  });
}

void CpuBackend::Mlp(int layer, const LayerWeights& w, const LayerProjections& projections,
                     int64_t tokens) {
  const ModelConfig& c = config();
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const int64_t up_width = c.gated_mlp ? 2 * inter : inter;
  matmul_.Run(normed_.data(), tokens, projections.up, mlp_up_.data());
  Mark(cpu::ForwardPhase::kMlpUp, projections.up.SizeBytes());
  ApplyLora(layer, LoraTarget::kUp, normed_.data(), h, mlp_up_.data(), up_width);
  Mark(cpu::ForwardPhase::kLora);
  pool_.ParallelFor(tokens, [&](int, int64_t begin, int64_t end) {
    float* up = mlp_up_.data() + begin * up_width;
    if (!w.up_bias.empty()) cpu::AddBias(up, w.up_bias.data_as<float>(), end - begin, up_width);
    if (c.gated_mlp) {
      cpu::GatedActivate(c.activation, up, end - begin, inter, mlp_act_.data() + begin * inter);
    } else {
      cpu::Activate(c.activation, up, (end - begin) * inter);
      std::memcpy(mlp_act_.data() + begin * inter, up, (end - begin) * inter * sizeof(float));
    }
  });
  Mark(cpu::ForwardPhase::kActivation);
  matmul_.Run(mlp_act_.data(), tokens, projections.down, proj_.data());
  Mark(cpu::ForwardPhase::kMlpDown, projections.down.SizeBytes());
  ApplyLora(layer, LoraTarget::kDown, mlp_act_.data(), inter, proj_.data(), h);
  Mark(cpu::ForwardPhase::kLora);
  pool_.ParallelFor(tokens, [&](int, int64_t begin, int64_t end) {
    if (!w.down_bias.empty()) {
      cpu::AddBias(proj_.data() + begin * h, w.down_bias.data_as<float>(), end - begin, h);
    }
    cpu::Add(hidden_.data() + begin * h, proj_.data() + begin * h, (end - begin) * h);
  });
  Mark(cpu::ForwardPhase::kNorm);
}

absl::Status CpuBackend::SetLoraAdapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) {
  LLMSERVE_RETURN_IF_ERROR(CheckLoraAdapter(slot, adapter.get()));
  lora_slots_[slot] = std::move(adapter);
  return absl::OkStatus();
}

void CpuBackend::ApplyLora(int layer, LoraTarget target, const float* x, int64_t x_width, float* y,
                           int64_t y_width) {
  lora_jobs_.clear();
  lora_xs_.clear();
  lora_ys_.clear();
  int64_t s_size = 0;
  for (const LoraGroup& group : lora_groups_) {
    if (group.tokens.empty()) break;  // the groups in use come first
    const LoraAdapter& adapter = *lora_slots_[group.slot];
    const int64_t io_offset = static_cast<int64_t>(lora_xs_.size());
    const int64_t n = static_cast<int64_t>(group.tokens.size());
    bool any = false;
    for (const LoraModule& module : adapter.layers[layer]) {
      if (module.target != target) continue;
      any = true;
      lora_jobs_.push_back({.module = &module,
                            .rank = adapter.rank,
                            .num_tokens = n,
                            .s_offset = s_size,
                            .io_offset = io_offset});
      s_size += n * adapter.rank;
    }
    if (!any) continue;
    for (int64_t t : group.tokens) {
      lora_xs_.push_back(x + t * x_width);
      lora_ys_.push_back(y + t * y_width);
    }
  }
  if (lora_jobs_.empty()) return;
  lora_s_.resize(s_size);
  // Work items: each job's rank rows (shrink), then its columns in chunks (expand); a thread's
  // range of items is cut at job boundaries into one kernel call per job.
  constexpr int64_t kColumnChunk = 64;
  std::vector<int64_t> shrink_start(1, 0), expand_start(1, 0);
  for (const LoraJob& job : lora_jobs_) {
    shrink_start.push_back(shrink_start.back() + job.rank);
    expand_start.push_back(expand_start.back() +
                           (job.module->out + kColumnChunk - 1) / kColumnChunk);
  }
  const auto for_each_job = [&](const std::vector<int64_t>& start, int64_t begin, int64_t end,
                                const auto& run) {
    size_t j = std::upper_bound(start.begin(), start.end(), begin) - start.begin() - 1;
    for (int64_t item = begin; item < end; ++j) {
      const int64_t last = std::min(end, start[j + 1]);
      run(lora_jobs_[j], item - start[j], last - start[j]);
      item = last;
    }
  };
  pool_.ParallelFor(shrink_start.back(), [&](int, int64_t begin, int64_t end) {
    for_each_job(shrink_start, begin, end, [&](const LoraJob& job, int64_t r0, int64_t r1) {
      cpu::LoraShrink(*job.module, job.rank, r0, r1, lora_xs_.data() + job.io_offset,
                      job.num_tokens, lora_s_.data() + job.s_offset);
    });
  });
  pool_.ParallelFor(expand_start.back(), [&](int, int64_t begin, int64_t end) {
    for_each_job(expand_start, begin, end, [&](const LoraJob& job, int64_t c0, int64_t c1) {
      cpu::LoraExpand(*job.module, job.rank, lora_s_.data() + job.s_offset, job.num_tokens,
                      lora_ys_.data() + job.io_offset, c0 * kColumnChunk,
                      std::min(c1 * kColumnChunk, job.module->out));
    });
  });
}

void CpuBackend::ComputeLogits(const ForwardBatch& batch, ForwardOutput* output) {
  const ModelConfig& c = config();
  const int64_t h = c.hidden_size;
  // Only the rows that need logits go through the final norm and the LM head; an embedding
  // request's rows go through the norm into output->hidden instead.
  std::vector<int32_t> rows, hidden_rows;
  output->row_start.assign(1, 0);
  output->hidden_row_start.assign(1, 0);
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (batch.wants_hidden_states(s)) {
      for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
        hidden_rows.push_back(t);
      }
    } else {
      const bool all = !batch.all_logits.empty() && batch.all_logits[s];
      for (int32_t t = all ? batch.query_start[s] : batch.query_start[s + 1] - 1;
           t < batch.query_start[s + 1]; ++t) {
        rows.push_back(t);
      }
    }
    output->row_start.push_back(static_cast<int32_t>(rows.size()));
    output->hidden_row_start.push_back(static_cast<int32_t>(hidden_rows.size()));
  }
  const auto final_norm = [&](const std::vector<int32_t>& selected, float* out) {
    pool_.ParallelFor(static_cast<int64_t>(selected.size()), [&](int, int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        cpu::Norm(c.norm, hidden_.data() + selected[r] * h,
                  weights_->final_norm_weight.data_as<float>(),
                  BiasOrNull(weights_->final_norm_bias), static_cast<float>(c.norm_eps), 1, h,
                  out + r * h);
      }
    });
  };
  output->hidden_size = h;
  output->hidden.resize(hidden_rows.size() * h);
  if (!hidden_rows.empty()) final_norm(hidden_rows, output->hidden.data());
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  output->vocab_size = c.vocab_size;
  output->logits.resize(num_rows * c.vocab_size);
  if (num_rows == 0) {
    Mark(cpu::ForwardPhase::kFinalNorm);
    return;
  }
  final_norm(rows, normed_.data());
  Mark(cpu::ForwardPhase::kFinalNorm);
  matmul_.Run(normed_.data(), num_rows, lm_head_, output->logits.data());
  Mark(cpu::ForwardPhase::kLmHead, lm_head_.SizeBytes());
}

}  // namespace llmserve::worker
