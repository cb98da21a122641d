#include "worker/model/llama2c_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

constexpr int64_t kLlama2cHeaderBytes = 7 * 4;
// The bounds the GGUF loader applies (gguf_model_config.cc); they keep every size below in int64.
constexpr int64_t kLlama2cMaxDim = 1 << 20;
constexpr int64_t kLlama2cMaxVocab = 1 << 24;
constexpr int64_t kLlama2cMaxLayers = 1024;
constexpr int64_t kLlama2cMaxHeads = 1024;
// llama2.c's newer exports (export.py version 1 and 2) start with this magic ("ak42").
constexpr uint32_t kLlama2cMagic = 0x616b3432;
// f32 values read at a time (16 MiB).
constexpr int64_t kLlama2cChunkFloats = int64_t{1} << 22;

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

absl::Status Llama2cHeaderError(const std::string& path, const char* field, int64_t value,
                                const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": llama2.c header ", field, " = ", value, " ", what));
}

absl::Status Llama2cCheckRange(const std::string& path, const char* field, int64_t value,
                               int64_t max) {
  if (value >= 1 && value <= max) return absl::OkStatus();
  return Llama2cHeaderError(path, field, value, absl::StrCat("is outside [1, ", max, "]"));
}

// Floats of the weights before the RoPE tables, and of the tables.
struct Llama2cSizes {
  int64_t before_tables;
  int64_t tables;
  int64_t classifier;
};

Llama2cSizes Llama2cSizesOf(const ModelConfig& c) {
  const int64_t dim = c.hidden_size, layers = c.num_layers, hidden = c.intermediate_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t per_layer = 2 * dim + q * dim + 2 * kv * dim + dim * q + 3 * hidden * dim;
  return {.before_tables = c.vocab_size * dim + layers * per_layer + dim,
          .tables = c.max_position_embeddings * c.head_dim,
          .classifier = c.tied_embeddings ? 0 : c.vocab_size * dim};
}

// Reads the f32 arrays of the file in order, checking that the bytes are there.
class Llama2cReader {
 public:
  Llama2cReader(std::ifstream& in, const std::string& path) : in_(in), path_(path) {}

  // `rows` rows of `cols` f32 values into `dst` (converted to its dtype) from row `first_row` on;
  // with `rope_heads` > 0, the rows of each of that many heads go from pair order to halves.
  absl::Status ReadRows(Tensor* dst, int64_t first_row, int64_t rows, int64_t cols,
                        int64_t rope_heads = 0) {
    const int64_t head_rows = rope_heads > 0 ? rows / rope_heads : 1;
    const int64_t per_chunk =
        std::max<int64_t>(1, kLlama2cChunkFloats / (head_rows * cols)) * head_rows;
    const size_t element = DTypeSize(dst->dtype());
    auto* out = static_cast<unsigned char*>(dst->data()) + first_row * cols * element;
    for (int64_t row = 0; row < rows; row += per_chunk) {
      const int64_t n = std::min(per_chunk, rows - row);
      LLMSERVE_RETURN_IF_ERROR(ReadFloats(n * cols));
      if (rope_heads > 0) PairsToHalves(n, head_rows, cols);
      ConvertElements(buffer_.data(), DType::kF32, out + row * cols * element, dst->dtype(),
                      n * cols);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> ReadVector(int64_t size) {
    Tensor tensor(DType::kF32, {size});
    LLMSERVE_RETURN_IF_ERROR(ReadRows(&tensor, 0, 1, size));
    return tensor;
  }

  absl::Status Skip(int64_t floats) {
    in_.seekg(floats * 4, std::ios::cur);
    offset_ += floats * 4;
    if (!in_) return Short();
    return absl::OkStatus();
  }

 private:
  absl::Status ReadFloats(int64_t count) {
    buffer_.resize(count);
    in_.read(reinterpret_cast<char*>(buffer_.data()), count * 4);
    if (in_.gcount() != count * 4) return Short();
    offset_ += count * 4;
    return absl::OkStatus();
  }

  absl::Status Short() const {
    return absl::DataLossError(
        absl::StrCat(path_, ": the llama2.c checkpoint ends before byte ", offset_,
                     " (it was shorter than its header says; did it change while loading?)"));
  }

  // Row h * head_rows + 2i + j moves to h * head_rows + j * head_rows / 2 + i.
  void PairsToHalves(int64_t rows, int64_t head_rows, int64_t cols) {
    permuted_.assign(buffer_.begin(), buffer_.begin() + rows * cols);
    const int64_t half = head_rows / 2;
    for (int64_t head = 0; head < rows / head_rows; ++head) {
      for (int64_t i = 0; i < half; ++i) {
        for (int64_t j = 0; j < 2; ++j) {
          const int64_t from = head * head_rows + 2 * i + j, to = head * head_rows + j * half + i;
          std::copy_n(permuted_.data() + from * cols, cols, buffer_.data() + to * cols);
        }
      }
    }
  }

  std::ifstream& in_;
  const std::string& path_;
  int64_t offset_ = kLlama2cHeaderBytes;
  std::vector<float> buffer_;
  std::vector<float> permuted_;
};

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromLlama2c(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::error_code error;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (error) return absl::InvalidArgumentError(absl::StrCat(path, ": ", error.message()));
  char bytes[kLlama2cHeaderBytes] = {};
  in.read(bytes, kLlama2cHeaderBytes);
  if (in.gcount() != kLlama2cHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file_size, " bytes is shorter than a llama2.c header (7 int32)"));
  }
  // PyTorch's .bin files (a zip archive since 1.6, a pickle before) share the extension.
  if (std::memcmp(bytes, "PK\x03\x04", 4) == 0 ||
      (static_cast<unsigned char>(bytes[0]) == 0x80 && bytes[1] >= 2 && bytes[1] <= 5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a PyTorch checkpoint (", bytes[0] == 'P' ? "zip archive" : "pickle",
        "), not a llama2.c one; PyTorch .bin weights are not loaded: use the model's safetensors "
        "files (a Hugging Face directory) or a GGUF file"));
  }
  uint32_t magic;
  std::memcpy(&magic, bytes, 4);
  if (magic == kLlama2cMagic) {
    int32_t version = 0;
    std::memcpy(&version, bytes + 4, 4);
    return absl::UnimplementedError(absl::StrCat(
        path, ": llama2.c export version ", version,
        " (magic \"ak42\") is not supported; export it with export.py --version 0 (legacy)"));
  }
  Llama2cHeader h;
  std::memcpy(&h, bytes, kLlama2cHeaderBytes);
  LLMSERVE_RETURN_IF_ERROR(Llama2cCheckRange(path, "dim", h.dim, kLlama2cMaxDim));
  LLMSERVE_RETURN_IF_ERROR(Llama2cCheckRange(path, "hidden_dim", h.hidden_dim, 4 * kLlama2cMaxDim));
  LLMSERVE_RETURN_IF_ERROR(Llama2cCheckRange(path, "n_layers", h.n_layers, kLlama2cMaxLayers));
  LLMSERVE_RETURN_IF_ERROR(Llama2cCheckRange(path, "n_heads", h.n_heads, kLlama2cMaxHeads));
  LLMSERVE_RETURN_IF_ERROR(Llama2cCheckRange(path, "n_kv_heads", h.n_kv_heads, h.n_heads));
  LLMSERVE_RETURN_IF_ERROR(Llama2cCheckRange(path, "seq_len", h.seq_len, kLlama2cMaxDim));
  const int64_t vocab = std::abs(int64_t{h.vocab_size});
  if (vocab < 1 || vocab > kLlama2cMaxVocab) {
    return Llama2cHeaderError(path, "vocab_size", h.vocab_size,
                              absl::StrCat("is 0 or its magnitude is more than ", kLlama2cMaxVocab,
                                           " (negative means an unshared classifier)"));
  }
  if (h.n_heads % h.n_kv_heads != 0) {
    return Llama2cHeaderError(path, "n_heads", h.n_heads,
                              absl::StrCat("is not a multiple of n_kv_heads = ", h.n_kv_heads));
  }
  if (h.dim % h.n_heads != 0 || (h.dim / h.n_heads) % 2 != 0) {
    return Llama2cHeaderError(
        path, "dim", h.dim, absl::StrCat("is not n_heads = ", h.n_heads, " heads of an even size"));
  }
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.vocab_size = vocab;
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.max_position_embeddings = c.max_model_len = h.seq_len;
  c.norm = NormKind::kRmsNorm;
  c.norm_eps = 1e-5;
  c.activation = Activation::kSilu;
  c.gated_mlp = true;
  c.position = PositionKind::kRope;
  c.rope_theta = 10000.0;
  c.tied_embeddings = h.vocab_size > 0;
  c.bos_token_id = vocab > 1 ? 1 : -1;
  for (const int32_t id : {2, 1}) {
    if (id < vocab) c.eos_token_ids.push_back(id);
  }
  const Llama2cSizes sizes = Llama2cSizesOf(c);
  const int64_t with_tables =
      kLlama2cHeaderBytes + 4 * (sizes.before_tables + sizes.tables + sizes.classifier);
  const int64_t without_tables = with_tables - 4 * sizes.tables;
  if (file_size != with_tables && file_size != without_tables) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the llama2.c header (dim ", h.dim, ", hidden_dim ", h.hidden_dim, ", n_layers ",
        h.n_layers, ", n_heads ", h.n_heads, ", n_kv_heads ", h.n_kv_heads, ", vocab_size ",
        h.vocab_size, ", seq_len ", h.seq_len, ") describes a file of ", with_tables, " bytes (or ",
        without_tables, " without the RoPE tables), but it has ", file_size,
        ": not a llama2.c (version 0) checkpoint, or a truncated one"));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadLlama2cWeights(const std::string& path,
                                                                 const ModelConfig& config,
                                                                 const FileLoadOptions& options) {
  const DType dtype = options.dtype;
  const Llama2cSizes sizes = Llama2cSizesOf(config);
  const int64_t dim = config.hidden_size, layers = config.num_layers;
  const int64_t hidden = config.intermediate_size, vocab = config.vocab_size;
  const int64_t q = config.num_heads * config.head_dim, kv = config.num_kv_heads * config.head_dim;
  // Matrices in dtype, norms in f32, plus the read buffers.
  const int64_t vectors = (2 * layers + 1) * dim;
  const int64_t needed =
      (sizes.before_tables + sizes.classifier - vectors) * static_cast<int64_t>(DTypeSize(dtype)) +
      vectors * 4 + 2 * 4 * std::min(kLlama2cChunkFloats, std::max(vocab, hidden) * dim);
  LLMSERVE_RETURN_IF_ERROR(
      CheckWeightsFitInMemory(path, needed, dtype, options.memory_limit_bytes, ""));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  in.seekg(kLlama2cHeaderBytes);
  Llama2cReader r(in, path);
  auto weights = std::make_unique<ModelWeights>();
  weights->config = config;
  weights->dtype = dtype;
  weights->token_embedding = Tensor(dtype, {vocab, dim});
  LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&weights->token_embedding, 0, vocab, dim));
  weights->layers.resize(layers);
  std::vector<LayerWeights>& l = weights->layers;
  for (LayerWeights& layer : l) {
    layer.qkv_weight = Tensor(dtype, {q + 2 * kv, dim});
    layer.o_weight = Tensor(dtype, {dim, q});
    layer.up_weight = Tensor(dtype, {2 * hidden, dim});
    layer.down_weight = Tensor(dtype, {dim, hidden});
  }
  // Each array for all layers, in run.c's order.
  for (LayerWeights& layer : l)
    LLMSERVE_ASSIGN_OR_RETURN(layer.attn_norm_weight, r.ReadVector(dim));
  for (LayerWeights& layer : l) {
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.qkv_weight, 0, q, dim, config.num_heads));
  }
  for (LayerWeights& layer : l) {
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.qkv_weight, q, kv, dim, config.num_kv_heads));
  }
  for (LayerWeights& layer : l)
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.qkv_weight, q + kv, kv, dim));
  for (LayerWeights& layer : l) LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.o_weight, 0, dim, q));
  for (LayerWeights& layer : l) LLMSERVE_ASSIGN_OR_RETURN(layer.mlp_norm_weight, r.ReadVector(dim));
  for (LayerWeights& layer : l)
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.up_weight, 0, hidden, dim));
  for (LayerWeights& layer : l)
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.down_weight, 0, dim, hidden));
  for (LayerWeights& layer : l) {
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&layer.up_weight, hidden, hidden, dim));
  }
  LLMSERVE_ASSIGN_OR_RETURN(weights->final_norm_weight, r.ReadVector(dim));
  if (!config.tied_embeddings) {
    // The classifier follows the RoPE tables, which the size check allowed to be absent.
    std::error_code error;
    const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, error));
    const int64_t with_tables =
        kLlama2cHeaderBytes + 4 * (sizes.before_tables + sizes.tables + sizes.classifier);
    if (!error && file_size == with_tables) LLMSERVE_RETURN_IF_ERROR(r.Skip(sizes.tables));
    weights->lm_head = Tensor(dtype, {vocab, dim});
    LLMSERVE_RETURN_IF_ERROR(r.ReadRows(&weights->lm_head, 0, vocab, dim));
  }
  if (options.progress) options.progress(layers, layers);
  return weights;
}

std::string FindLlama2cTokenizer(const std::string& path, std::string* why) {
  const std::filesystem::path checkpoint(path);
  const std::filesystem::path dir =
      checkpoint.parent_path().empty() ? "." : checkpoint.parent_path();
  std::error_code error;
  for (const std::filesystem::path& candidate :
       {dir / (checkpoint.stem().string() + ".model"), dir / "tokenizer.model"}) {
    if (std::filesystem::is_regular_file(candidate, error)) return candidate.string();
  }
  std::vector<std::string> models;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end;
       it.increment(error)) {
    if (it->path().extension() == ".model" && it->is_regular_file(error)) {
      models.push_back(it->path().string());
    }
  }
  if (models.size() == 1) return models[0];
  *why = models.empty()
             ? absl::StrCat(dir.string(), " has no SentencePiece .model file next to ", path)
             : absl::StrCat(dir.string(), " has ", models.size(), " .model files and none is ",
                            checkpoint.stem().string(), ".model or tokenizer.model");
  return "";
}

}  // namespace llmserve::worker
