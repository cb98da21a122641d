// llmserve-perplexity: what a dtype or quantization mode costs in quality, measured the way
// llama.cpp's llama-perplexity measures it, so that the two are comparable on the same tokens.
//
//   llmserve-perplexity --model M --tokens ids.txt --ctx 128 --save_base base.bin     (f32 run)
//   llmserve-perplexity --model M --quantization int8 --tokens ids.txt --ctx 128 --kl_base base.bin
//
// --tokens holds token ids separated by white space (llmserve-tokenize writes them). They are cut
// into chunks of --ctx tokens (a partial last chunk is dropped); the first token of each chunk is
// replaced by the model's BOS when it has one, and each chunk runs as one prompt with the logits
// of every position (in passes of --step_tokens tokens through the KV cache when set). Positions
// ctx/2 .. ctx-2 of each chunk are scored: their logits predict the next token (llama-perplexity's
// protocol: every scored token has at least ctx/2 tokens of context). Printed as one JSON line:
//   ppl             exp(mean negative log-likelihood of the scored tokens)
//   mean_kld        with --kl_base: mean KL(base || this) over the scored positions, in nats
//   top1_agreement  with --kl_base: the fraction of positions whose argmax is the base's
//   ppl_base        with --kl_base: the base run's ppl on the same tokens
// --save_base writes the scored positions' log-probabilities (f32) with the tokens and ctx, for
// a later --kl_base run, which refuses a file of other tokens, ctx or vocabulary size.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/flag_names.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/model/auto_dtype.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

ABSL_FLAG(std::string, model, "", "a model directory, a GGUF file or a llama2.c checkpoint");
ABSL_FLAG(std::string, dtype, "f32", "runtime weight dtype: f32, bf16, f16 or auto");
ABSL_FLAG(std::string, quantization, "none", "none or int8 (AWQ/GPTQ/GGUF 4-bit load as they are)");
ABSL_FLAG(bool, quantize_lm_head, false, "the LM head in int8 too");
ABSL_FLAG(bool, quantized_activations, false, "integer dot products at small batches");
ABSL_FLAG(int, threads, 0, "CPU kernel threads (0: one per usable CPU)");
ABSL_FLAG(std::string, tokens, "", "file of white-space-separated token ids");
ABSL_FLAG(int64_t, ctx, 128, "tokens per chunk (at least 4, at most the model's context)");
ABSL_FLAG(int64_t, step_tokens, 0,
          "feed each chunk in forward passes of this many tokens (0: the whole chunk in one); "
          "--quantized_activations applies to passes of at most 16 tokens, as in decode");
ABSL_FLAG(std::string, save_base, "", "write the scored log-probabilities here");
ABSL_FLAG(std::string, kl_base, "", "compare with the log-probabilities a --save_base run wrote");

namespace {

constexpr char kMagic[8] = {'l', 'l', 'm', 's', 'k', 'l', 'd', '1'};
constexpr int32_t kBlockSize = 16;

int Fail(const std::string& message) {
  std::fprintf(stderr, "llmserve-perplexity: %s\n", message.c_str());
  return 1;
}

absl::StatusOr<std::vector<int32_t>> ReadTokens(const std::string& path, int64_t vocab) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --tokens file '", path, "'"));
  std::vector<int32_t> tokens;
  std::string word;
  while (in >> word) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(word, &id) || id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("--tokens: word ", tokens.size() + 1, " '",
                                                     word, "' is not a token id in [0, ", vocab,
                                                     ")"));
    }
    tokens.push_back(id);
  }
  return tokens;
}

// log-softmax of `row` in double.
void LogSoftmax(const float* row, int64_t n, std::vector<double>* out) {
  out->resize(n);
  double max = row[0];
  for (int64_t i = 1; i < n; ++i) max = std::max<double>(max, row[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double{row[i]} - max);
  const double log_sum = max + std::log(sum);
  for (int64_t i = 0; i < n; ++i) (*out)[i] = double{row[i]} - log_sum;
}

struct BaseHeader {
  int64_t ctx = 0, vocab = 0, chunks = 0;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "perplexity and KL divergence from a base run: --model M --tokens FILE --ctx N "
      "[--save_base FILE | --kl_base FILE] [--dtype --quantization ...]");
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string model = absl::GetFlag(FLAGS_model);
  const std::string save_base = absl::GetFlag(FLAGS_save_base);
  const std::string kl_base = absl::GetFlag(FLAGS_kl_base);
  if (model.empty()) return Fail("--model is required");
  if (absl::GetFlag(FLAGS_tokens).empty()) return Fail("--tokens FILE is required");
  if (!save_base.empty() && !kl_base.empty()) {
    return Fail("--save_base and --kl_base are exclusive: save with one run, compare in another");
  }
  const auto dtype = llmserve::worker::ResolveDTypeFlag(absl::GetFlag(FLAGS_dtype), model, "cpu");
  if (!dtype.ok()) return Fail("--dtype: " + std::string(dtype.status().message()));
  const auto quantization = llmserve::worker::ParseQuantization(absl::GetFlag(FLAGS_quantization));
  if (!quantization.ok()) {
    return Fail("--quantization: " + std::string(quantization.status().message()));
  }
  const int64_t ctx = absl::GetFlag(FLAGS_ctx);
  auto config = llmserve::worker::LoadModelConfig(model, 0);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  if (ctx < 4 || ctx > config->max_model_len) {
    return Fail(absl::StrCat("--ctx ", ctx, " is outside [4, ", config->max_model_len,
                             "] (the model's context length)"));
  }
  const auto resolved = llmserve::worker::ResolveQuantization(*quantization, config->quantization);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  const int64_t vocab = config->vocab_size;
  auto tokens = ReadTokens(absl::GetFlag(FLAGS_tokens), vocab);
  if (!tokens.ok()) return Fail(std::string(tokens.status().message()));
  const int64_t chunks = static_cast<int64_t>(tokens->size()) / ctx;
  if (chunks < 1) {
    return Fail(
        absl::StrCat("--tokens has ", tokens->size(), " tokens, fewer than one chunk of ", ctx));
  }
  const int64_t first = ctx / 2;
  const int64_t step_tokens = absl::GetFlag(FLAGS_step_tokens);
  if (step_tokens < 0 || step_tokens > ctx) {
    return Fail(absl::StrCat("--step_tokens ", step_tokens, " is outside [0, --ctx ", ctx, "]"));
  }
  const int64_t step = step_tokens == 0 ? ctx : step_tokens;

  std::ifstream base_in;
  if (!kl_base.empty()) {
    base_in.open(kl_base, std::ios::binary);
    if (!base_in) return Fail("cannot open --kl_base file '" + kl_base + "'");
    char magic[8];
    BaseHeader header;
    base_in.read(magic, 8);
    base_in.read(reinterpret_cast<char*>(&header), sizeof(header));
    if (!base_in || std::memcmp(magic, kMagic, 8) != 0 || header.chunks < 1 ||
        header.chunks > (int64_t{1} << 20) || header.ctx < 4 || header.ctx > (int64_t{1} << 20)) {
      return Fail("--kl_base file '" + kl_base + "' is not a llmserve-perplexity base file");
    }
    // Compared before anything is allocated from the file's numbers.
    if (header.ctx != ctx || header.vocab != vocab || header.chunks != chunks) {
      return Fail(absl::StrCat("--kl_base file '", kl_base, "' was made with ctx ", header.ctx,
                               ", vocabulary ", header.vocab, " and ", header.chunks,
                               " chunks; this run has ctx ", ctx, ", vocabulary ", vocab, " and ",
                               chunks, " chunks"));
    }
    std::vector<int32_t> base_tokens(static_cast<size_t>(chunks * ctx));
    base_in.read(reinterpret_cast<char*>(base_tokens.data()),
                 static_cast<std::streamsize>(base_tokens.size() * sizeof(int32_t)));
    if (!base_in || !std::equal(base_tokens.begin(), base_tokens.end(), tokens->begin())) {
      return Fail("--kl_base file '" + kl_base + "' was made from other tokens than --tokens");
    }
  }
  std::ofstream base_out;
  if (!save_base.empty()) {
    base_out.open(save_base, std::ios::binary | std::ios::trunc);
    if (!base_out) return Fail("cannot write --save_base file '" + save_base + "'");
    const BaseHeader header{ctx, vocab, chunks};
    base_out.write(kMagic, 8);
    base_out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    base_out.write(reinterpret_cast<const char*>(tokens->data()),
                   static_cast<std::streamsize>(chunks * ctx * sizeof(int32_t)));
  }

  auto weights = llmserve::worker::LoadModel(model, 0, *dtype);
  if (!weights.ok()) return Fail(std::string(weights.status().message()));
  const int32_t blocks = static_cast<int32_t>((ctx + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> block_table;
  for (int32_t b = 0; b < blocks; ++b) block_table.push_back(b);
  auto backend = llmserve::worker::CpuBackend::Create(
      *std::move(weights),
      {.kv_cache_bytes =
           blocks * llmserve::worker::CpuBackend::KvBytesPerBlock(*config, kBlockSize),
       .block_size = kBlockSize,
       .num_threads = absl::GetFlag(FLAGS_threads),
       .quantization = *quantization,
       .quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head),
       .quantized_activations = absl::GetFlag(FLAGS_quantized_activations)});
  if (!backend.ok()) return Fail(backend.status().ToString());

  llmserve::worker::ForwardBatch batch;
  llmserve::worker::ForwardOutput output;
  std::vector<double> log_probs;
  std::vector<float> chunk_logits(static_cast<size_t>(ctx * vocab));
  std::vector<float> saved(static_cast<size_t>(vocab)), base(static_cast<size_t>(vocab));
  double nll = 0, base_nll = 0, kld = 0;
  int64_t scored = 0, agree = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens->begin() + c * ctx, tokens->begin() + (c + 1) * ctx);
    if (config->bos_token_id >= 0) chunk[0] = static_cast<int32_t>(config->bos_token_id);
    // The chunk's logits, [ctx, vocab], from passes of `step` tokens through the KV cache.
    for (int64_t start = 0; start < ctx; start += step) {
      const int64_t n = std::min(step, ctx - start);
      batch.Clear();
      batch.AddSequence(std::vector<int32_t>(chunk.begin() + start, chunk.begin() + start + n),
                        static_cast<int32_t>(start), block_table, /*want_all_logits=*/true);
      if (absl::Status status = (*backend)->Forward(batch, &output); !status.ok()) {
        return Fail(absl::StrCat("chunk ", c, ": ", status.ToString()));
      }
      std::copy(output.logits.begin(), output.logits.begin() + n * vocab,
                chunk_logits.begin() + start * vocab);
    }
    for (int64_t j = first; j < ctx - 1; ++j) {
      const float* row = chunk_logits.data() + j * vocab;
      LogSoftmax(row, vocab, &log_probs);
      const int32_t next = chunk[j + 1];
      nll -= log_probs[next];
      const int64_t top = std::max_element(log_probs.begin(), log_probs.end()) - log_probs.begin();
      if (base_out.is_open()) {
        for (int64_t i = 0; i < vocab; ++i) saved[i] = static_cast<float>(log_probs[i]);
        base_out.write(reinterpret_cast<const char*>(saved.data()),
                       static_cast<std::streamsize>(vocab * sizeof(float)));
      }
      if (base_in.is_open()) {
        base_in.read(reinterpret_cast<char*>(base.data()),
                     static_cast<std::streamsize>(vocab * sizeof(float)));
        if (!base_in) return Fail("--kl_base file '" + kl_base + "' ends early");
        double sum = 0;
        for (int64_t i = 0; i < vocab; ++i) {
          sum += std::exp(double{base[i]}) * (double{base[i]} - log_probs[i]);
        }
        kld += sum;
        base_nll -= base[next];
        agree += std::max_element(base.begin(), base.end()) - base.begin() == top;
      }
      ++scored;
    }
  }
  if (base_out.is_open()) {
    base_out.close();
    if (!base_out) return Fail("writing --save_base failed");
  }
  std::printf(
      "{\"model\": \"%s\", \"dtype\": \"%s\", \"quantization\": \"%s\", \"quantize_lm_head\": %s, "
      "\"quantized_activations\": %s, \"ctx\": %lld, \"step_tokens\": %lld, \"chunks\": %lld, "
      "\"scored\": %lld, \"ppl\": %.6f",
      model.c_str(), std::string(llmserve::worker::DTypeName(*dtype)).c_str(),
      llmserve::worker::RunningQuantizationName(*resolved, config->quantization).c_str(),
      absl::GetFlag(FLAGS_quantize_lm_head) ? "true" : "false",
      absl::GetFlag(FLAGS_quantized_activations) ? "true" : "false", static_cast<long long>(ctx),
      static_cast<long long>(step), static_cast<long long>(chunks), static_cast<long long>(scored),
      std::exp(nll / scored));
  if (base_in.is_open()) {
    std::printf(", \"ppl_base\": %.6f, \"mean_kld\": %.8f, \"top1_agreement\": %.6f",
                std::exp(base_nll / scored), kld / scored, static_cast<double>(agree) / scored);
  }
  std::printf("}\n");
  return 0;
}
