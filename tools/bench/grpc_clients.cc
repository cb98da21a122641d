#include "tools/bench/grpc_clients.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status/grpc_status.h"

namespace llmserve::tools {
namespace {

// Times the token-carrying messages of a server stream and fills the outcome from its status.
template <typename Reader, typename Message, typename TokenCount>
RequestOutcome ReadStream(Reader* reader, Message* message, absl::Time start,
                          TokenCount token_count, RequestOutcome outcome) {
  absl::Time last_token;
  while (reader->Read(message)) {
    const int tokens = token_count(*message);
    if (tokens == 0) continue;
    const absl::Time now = absl::Now();
    if (outcome.output_tokens == 0) {
      outcome.ttft_s = absl::ToDoubleSeconds(now - start);
    } else {
      outcome.itl_s.push_back(absl::ToDoubleSeconds(now - last_token));
    }
    last_token = now;
    outcome.output_tokens += tokens;
  }
  const grpc::Status status = reader->Finish();
  outcome.e2e_s = absl::ToDoubleSeconds(absl::Now() - start);
  outcome.ok = status.ok();
  if (status.ok()) {
    outcome.status = "ok";
  } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    outcome.status = "timeout";
    outcome.error = status.error_message();
  } else {
    outcome.status =
        absl::StrCat("grpc ", absl::StatusCodeToString(common::FromGrpcStatus(status).code()));
    outcome.error = status.error_message();
  }
  return outcome;
}

}  // namespace

absl::StatusOr<worker::v1::ModelInfo> WorkerBenchClient::ModelInfo(absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  worker::v1::ModelInfo info;
  const grpc::Status status =
      stub_->GetModelInfo(&context, worker::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return common::FromGrpcStatus(status);
  return info;
}

RequestOutcome WorkerBenchClient::Send(const std::string& id, const BenchRequest& request,
                                       absl::Time deadline) {
  worker::v1::GenerateRequest message;
  message.set_request_id(id);
  message.mutable_prompt_token_ids()->Add(request.prompt_ids.begin(), request.prompt_ids.end());
  message.mutable_sampling()->set_temperature(0);
  message.set_max_tokens(request.output_len);
  message.set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  RequestOutcome outcome;
  outcome.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
  const absl::Time start = absl::Now();
  std::unique_ptr<grpc::ClientReaderInterface<worker::v1::GenerateResponse>> reader =
      stub_->Generate(&context, message);
  worker::v1::GenerateResponse response;
  return ReadStream(
      reader.get(), &response, start,
      [](const worker::v1::GenerateResponse& r) { return r.tokens_size(); }, std::move(outcome));
}

absl::StatusOr<::llmserve::v1::ListModelsResponse> InferenceBenchClient::ListModels(
    absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!api_key_.empty()) context.AddMetadata("authorization", "Bearer " + api_key_);
  ::llmserve::v1::ListModelsResponse models;
  const grpc::Status status = stub_->ListModels(&context, {}, &models);
  if (!status.ok()) return common::FromGrpcStatus(status);
  return models;
}

RequestOutcome InferenceBenchClient::Send(const std::string& id, const BenchRequest& request,
                                          absl::Time deadline) {
  ::llmserve::v1::GenerateRequest message;
  message.set_model(model_);
  message.set_request_id(id);
  if (!request.prompt_ids.empty()) {
    message.mutable_token_ids()->mutable_ids()->Add(request.prompt_ids.begin(),
                                                    request.prompt_ids.end());
  } else if (!request.messages.empty()) {
    for (const ChatTurn& turn : request.messages) {
      ::llmserve::v1::ChatMessage* added = message.mutable_chat()->add_messages();
      added->set_role(turn.role);
      added->set_content(turn.content);
    }
  } else {
    message.set_text(request.prompt_text);
  }
  message.mutable_sampling()->set_temperature(0);
  message.mutable_stopping()->set_max_tokens(request.output_len);
  message.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  if (!api_key_.empty()) context.AddMetadata("authorization", "Bearer " + api_key_);
  RequestOutcome outcome;
  outcome.prompt_tokens = request.prompt_tokens;
  const absl::Time start = absl::Now();
  std::unique_ptr<grpc::ClientReaderInterface<::llmserve::v1::GenerateStreamResponse>> reader =
      stub_->GenerateStream(&context, message);
  ::llmserve::v1::GenerateStreamResponse response;
  int64_t usage_prompt_tokens = -1;
  outcome = ReadStream(
      reader.get(), &response, start,
      [&usage_prompt_tokens](const ::llmserve::v1::GenerateStreamResponse& r) {
        if (r.has_usage()) usage_prompt_tokens = r.usage().prompt_tokens();
        return r.tokens_size();
      },
      std::move(outcome));
  if (usage_prompt_tokens >= 0) outcome.prompt_tokens = usage_prompt_tokens;
  return outcome;
}

}  // namespace llmserve::tools
