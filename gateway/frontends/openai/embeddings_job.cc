#include "gateway/frontends/openai/embeddings_job.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gateway/frontends/openai/openai_json.h"

namespace llmserve::gateway {

static_assert(
    std::endian::native == std::endian::little,
    "base64 embeddings are sent as the host's float32 bytes, which must be little-endian");

std::string EmbeddingsResponseJson(const std::string& model,
                                   const std::vector<std::vector<float>>& embeddings,
                                   int64_t prompt_tokens, bool base64) {
  std::string out = R"({"object":"list","data":[)";
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<float>& values = embeddings[i];
    absl::StrAppend(&out, i == 0 ? "" : ",", R"({"object":"embedding","index":)", i,
                    R"(,"embedding":)");
    if (base64) {
      std::string bytes(values.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), values.data(), bytes.size());
      absl::StrAppend(&out, "\"", absl::Base64Escape(bytes), "\"}");
      continue;
    }
    out += '[';
    char number[32];
    for (size_t j = 0; j < values.size(); ++j) {
      if (j > 0) out += ',';
      // Shortest text that reads back as the same float32.
      const std::to_chars_result written =
          std::to_chars(number, number + sizeof(number), values[j]);
      out.append(number, written.ptr);
    }
    out += "]}";
  }
  absl::StrAppend(&out, R"(],"model":)", openai_json::Json(model).dump(), R"(,"usage":{)",
                  R"("prompt_tokens":)", prompt_tokens, R"(,"total_tokens":)", prompt_tokens, "}}");
  return out;
}

EmbeddingsJob::EmbeddingsJob(std::shared_ptr<http::ResponseWriter> writer)
    : writer_(std::move(writer)) {}

void EmbeddingsJob::SetBase64(bool base64) {
  absl::MutexLock lock(&mutex_);
  base64_ = base64;
}

void EmbeddingsJob::OnRefused(const absl::Status& status, absl::Duration retry_after) {
  http::SendError(*writer_, status, retry_after);
}

void EmbeddingsJob::OnStarted(const PreparedRun& run) {
  absl::MutexLock lock(&mutex_);
  model_ = run.model->name();
  embeddings_.resize(run.choices.size());
}

void EmbeddingsJob::OnChoiceEnd(int choice, const GenerationResult* result,
                                const absl::Status& error) {
  absl::MutexLock lock(&mutex_);
  if (result == nullptr) {
    if (error_.ok()) error_ = error;
    return;
  }
  if (result->embedding.empty()) {
    if (error_.ok()) {
      error_ = absl::UnavailableError(absl::StrCat("input ", choice, ": worker ", result->worker,
                                                   " ended the request without an embedding"));
    }
    return;
  }
  for (float value : result->embedding) {
    if (!std::isfinite(value)) {
      if (error_.ok()) {
        error_ = absl::InternalError(absl::StrCat(
            "input ", choice, ": the model's embedding holds a value that is not finite"));
      }
      return;
    }
  }
  prompt_tokens_ += result->usage.prompt_tokens();
  embeddings_[choice] = result->embedding;
}

void EmbeddingsJob::OnCompleted(const absl::Status&) {
  absl::MutexLock lock(&mutex_);
  if (!error_.ok()) return http::SendError(*writer_, error_);
  writer_->Send(200, {{"content-type", "application/json"}},
                EmbeddingsResponseJson(model_, embeddings_, prompt_tokens_, base64_));
}

}  // namespace llmserve::gateway
