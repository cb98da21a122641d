// llmserve-make-model: writes a deterministic random-weight Hugging Face model directory
// (config.json, generation_config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json) for tests, demos and benchmarks.
//
//   llmserve-make-model --preset tiny --out models/tiny
//   llmserve-make-model --preset small --dtype bf16 --out models/small-bf16
//   llmserve-make-model --preset small --dtype f16 --quantize awq --out models/small-awq
//
// Or converts a llama2.c checkpoint (and its SentencePiece .model) into such a directory, real
// weights in f32 (docs/llama2c.md):
//   llmserve-make-model --from-llama2c stories260K.bin --tokenizer tok512.model --out DIR

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/flag_names.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "tools/make_model/bpe_builder.h"
#include "tools/make_model/presets.h"
#include "worker/model/dtype.h"
#include "worker/model/hf_export.h"
#include "worker/model/llama2c_checkpoint.h"
#include "worker/model/model_writer.h"

ABSL_FLAG(std::string, from_llama2c, "",
          "convert this llama2.c checkpoint (legacy version 0) instead of writing random weights");
ABSL_FLAG(std::string, tokenizer, "",
          "with --from_llama2c: its SentencePiece .model (default: the one beside the checkpoint)");
ABSL_FLAG(std::string, preset, "tiny", "model shape: tiny, tiny-gpt2, small, gpt2 or llama3-8b");
ABSL_FLAG(std::string, out, "", "output directory (created; files in it are replaced)");
ABSL_FLAG(std::string, dtype, "f32", "on-disk weight dtype: f32, bf16 or f16");
ABSL_FLAG(uint64_t, seed, 1, "seed of the random weights");
ABSL_FLAG(int, merges, 1000, "BPE merges of the generated tokenizer, in [0, 20000]");
ABSL_FLAG(int64_t, shard_bytes, 0, "split weights into shards of at most this size (0: one file)");
ABSL_FLAG(int64_t, max_position_embeddings, 0, "override the preset's context length (0: keep)");
ABSL_FLAG(int64_t, num_layers, 0,
          "override the preset's layer count (0: keep); with the same --seed, the layers and "
          "embeddings equal the full model's first ones (a draft model for speculative decoding)");
ABSL_FLAG(int64_t, damp_layers_from, -1,
          "scale the residual outputs (o_proj, down_proj) of the layers from this index on by "
          "--layer_damping, so that the model nearly computes what its first layers do: with "
          "--num_layers, the same seed then writes a draft model that often agrees with it (-1: "
          "none)");
ABSL_FLAG(double, layer_damping, 0.1, "with --damp_layers_from: the scale, in [0, 1]");
ABSL_FLAG(std::string, quantize, "none",
          "write the projections 4-bit: awq (AutoAWQ GEMM, zero points) or gptq (AutoGPTQ, "
          "desc_act false); none writes them in --dtype");
ABSL_FLAG(int64_t, group_size, 0,
          "with --quantize: input columns per scale; 0 picks the largest of 128, 64 and 32 that "
          "divides every projection, -1 (gptq) one group per row");
ABSL_FLAG(bool, sym, true, "with --quantize=gptq: symmetric (zero point 8) rather than asymmetric");

namespace {

// The largest usual group size that cuts every projection's inputs into whole groups.
int64_t DefaultGroupSize(const llmserve::worker::ModelConfig& c) {
  for (int64_t group : {128, 64, 32}) {
    if (c.hidden_size % group == 0 && c.intermediate_size % group == 0 &&
        (c.num_heads * c.head_dim) % group == 0) {
      return group;
    }
  }
  return 8;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "llmserve-make-model: %s\n", message.c_str());
  return 1;
}

// --from_llama2c: the checkpoint's weights, config and tokenizer as a Hugging Face directory.
int ConvertLlama2c(const std::string& bin, const std::string& out) {
  auto config = llmserve::worker::ModelConfigFromLlama2c(bin);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  auto weights = llmserve::worker::LoadLlama2cWeights(bin, *config, {});
  if (!weights.ok()) return Fail(std::string(weights.status().message()));
  std::string tokenizer = absl::GetFlag(FLAGS_tokenizer);
  if (tokenizer.empty()) {
    std::string why;
    tokenizer = llmserve::worker::FindLlama2cTokenizer(bin, &why);
    if (tokenizer.empty()) return Fail(why + "; give --tokenizer MODEL");
  }
  auto spm = llmserve::common::tokenizer::ReadSentencePieceModel(tokenizer);
  if (!spm.ok()) return Fail(std::string(spm.status().message()));
  const llmserve::common::tokenizer::TokenizerFiles files =
      llmserve::common::tokenizer::TokenizerFilesFromSentencePiece(*spm);
  if (absl::Status written = llmserve::worker::WriteHuggingFaceDirectory(**weights, &files, out);
      !written.ok()) {
    return Fail(std::string(written.message()));
  }
  std::printf("wrote %s: %s from %s, %lld parameters, f32, vocab %lld (tokenizer %s)\n",
              out.c_str(), config->architecture.c_str(), bin.c_str(),
              static_cast<long long>(config->NumParameters()),
              static_cast<long long>(config->vocab_size), tokenizer.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes a random-weight model directory: --preset NAME --out DIR, or converts a llama2.c "
      "checkpoint: --from_llama2c MODEL.bin [--tokenizer TOK.model] --out DIR");
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("--out DIR is required");
  if (const std::string bin = absl::GetFlag(FLAGS_from_llama2c); !bin.empty()) {
    return ConvertLlama2c(bin, out);
  }
  const auto dtype = llmserve::worker::ParseDType(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) return Fail(std::string(dtype.status().message()));
  const int merges = absl::GetFlag(FLAGS_merges);
  if (merges < 0 || merges > 20000) return Fail("--merges must be in [0, 20000]");

  const llmserve::tools::BuiltTokenizer tokenizer =
      llmserve::tools::BuildByteLevelTokenizer(merges);
  // <|im_end|> ends a chat turn, so it is an EOS id beside <|end_of_text|>.
  auto config = llmserve::tools::PresetConfig(absl::GetFlag(FLAGS_preset), tokenizer.vocab_size,
                                              tokenizer.bos_token_id,
                                              {tokenizer.eos_token_id, tokenizer.vocab_size - 1});
  if (!config.ok()) return Fail(std::string(config.status().message()));
  if (const int64_t positions = absl::GetFlag(FLAGS_max_position_embeddings); positions != 0) {
    if (positions < 16 || positions > (1 << 20)) {
      return Fail("--max_position_embeddings must be in [16, 1048576]");
    }
    config->max_position_embeddings = config->max_model_len = positions;
  }
  if (const int64_t layers = absl::GetFlag(FLAGS_num_layers); layers != 0) {
    if (layers < 1 || layers > 1024) return Fail("--num_layers must be in [1, 1024]");
    config->num_layers = layers;
  }
  llmserve::worker::RandomWeightsOptions options{
      .dtype = *dtype,
      .seed = absl::GetFlag(FLAGS_seed),
      .max_shard_bytes = absl::GetFlag(FLAGS_shard_bytes),
      .damp_layers_from = absl::GetFlag(FLAGS_damp_layers_from),
      .layer_damping = static_cast<float>(absl::GetFlag(FLAGS_layer_damping))};
  if (options.damp_layers_from < -1 || options.damp_layers_from > 1024) {
    return Fail("--damp_layers_from must be -1 or in [0, 1024]");
  }
  if (!(options.layer_damping >= 0 && options.layer_damping <= 1)) {
    return Fail("--layer_damping must be in [0, 1]");
  }
  using Method = llmserve::worker::CheckpointQuantization::Method;
  const std::string quantize = absl::GetFlag(FLAGS_quantize);
  if (quantize == "awq" || quantize == "gptq") {
    options.quantization.method = quantize == "awq" ? Method::kAwq : Method::kGptq;
    const int64_t group = absl::GetFlag(FLAGS_group_size);
    if (group < -1 || (group == -1 && quantize == "awq")) {
      return Fail(quantize == "awq" ? "--group_size must be positive (or 0 for the default)"
                                    : "--group_size must be positive, 0 or -1");
    }
    options.quantization.group_size = group == 0 ? DefaultGroupSize(*config) : group;
    options.quantization.symmetric = quantize == "gptq" && absl::GetFlag(FLAGS_sym);
  } else if (quantize == "int8") {
    return Fail(
        "--quantize=int8: int8 is applied at load (llmserve-worker --quantization=int8); write "
        "the model unquantized");
  } else if (quantize != "none") {
    return Fail("--quantize must be none, awq or gptq, not '" + quantize + "'");
  }
  if (absl::Status written = llmserve::worker::WriteRandomModel(*config, options, out);
      !written.ok()) {
    return Fail(std::string(written.message()));
  }
  const std::filesystem::path dir(out);
  absl::Status written =
      llmserve::worker::WriteText(dir / "tokenizer.json", tokenizer.tokenizer_json);
  if (written.ok()) {
    written =
        llmserve::worker::WriteText(dir / "tokenizer_config.json", tokenizer.tokenizer_config_json);
  }
  if (!written.ok()) return Fail(std::string(written.message()));
  const std::string weights =
      options.quantization.quantized()
          ? absl::StrCat(quantize, " 4-bit projections (group ", options.quantization.group_size,
                         "), the rest ", llmserve::worker::DTypeName(*dtype))
          : std::string(llmserve::worker::DTypeName(*dtype));
  std::printf("wrote %s: %s, %lld parameters, %s, vocab %lld (tokenizer %d)\n", out.c_str(),
              config->architecture.c_str(), static_cast<long long>(config->NumParameters()),
              weights.c_str(), static_cast<long long>(config->vocab_size), tokenizer.vocab_size);
  return 0;
}
