// llmserve-cli: streams a completion (or a chat reply) from a gateway to the terminal over the
// public gRPC API.
//
//   llmserve-cli --target=127.0.0.1:50050 --prompt="Once upon a time" --max_tokens=64
//   llmserve-cli --chat --prompt="Tell me a joke" --api_key=$KEY
//   echo "text" | llmserve-cli            (the prompt from standard input)

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/flag_names.h"
#include "llmserve/v1/inference.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50050", "gateway host:port (gRPC)");
ABSL_FLAG(std::string, api_key, "", "API key or JWT (sent as 'authorization: Bearer ...')");
ABSL_FLAG(std::string, model, "", "model name (empty: the gateway's only model)");
ABSL_FLAG(std::string, prompt, "", "the prompt (empty: read standard input)");
ABSL_FLAG(bool, chat, false, "send the prompt as a user message through the chat template");
ABSL_FLAG(std::string, system, "", "with --chat: a system message first");
ABSL_FLAG(int, max_tokens, 128, "tokens to generate at most");
ABSL_FLAG(double, temperature, 1.0, "sampling temperature (0: greedy)");
ABSL_FLAG(double, top_p, 1.0, "nucleus sampling (1: off)");
ABSL_FLAG(int, top_k, 0, "top-k (0: off)");
ABSL_FLAG(int64_t, seed, -1, "sampling seed (-1: random)");
ABSL_FLAG(std::vector<std::string>, stop, {}, "stop strings, comma-separated");
ABSL_FLAG(double, timeout_s, 600, "deadline of the call in seconds");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Streams a completion from an llmserve gateway.\n"
      "  llmserve-cli [--target=127.0.0.1:50050] [--chat] --prompt=TEXT [--max_tokens=128]");
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (prompt.empty()) {
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  if (prompt.empty()) {
    std::fprintf(stderr, "llmserve-cli: give --prompt or text on standard input\n");
    return 2;
  }
  llmserve::v1::GenerateRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  if (absl::GetFlag(FLAGS_chat)) {
    if (!absl::GetFlag(FLAGS_system).empty()) {
      auto* system = request.mutable_chat()->add_messages();
      system->set_role("system");
      system->set_content(absl::GetFlag(FLAGS_system));
    }
    auto* user = request.mutable_chat()->add_messages();
    user->set_role("user");
    user->set_content(prompt);
  } else {
    request.set_text(prompt);
  }
  request.mutable_sampling()->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  request.mutable_sampling()->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  request.mutable_sampling()->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_seed) >= 0) {
    request.mutable_sampling()->set_seed(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)));
  }
  request.mutable_stopping()->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) {
    request.mutable_stopping()->add_stop(stop);
  }

  auto stub = llmserve::v1::Inference::NewStub(
      grpc::CreateChannel(absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  if (!absl::GetFlag(FLAGS_api_key).empty()) {
    context.AddMetadata("authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
  }
  auto reader = stub->GenerateStream(&context, request);
  llmserve::v1::GenerateStreamResponse message, last;
  std::string model;
  while (reader->Read(&message)) {
    if (!message.model().empty()) model = message.model();
    std::fwrite(message.text().data(), 1, message.text().size(), stdout);
    std::fflush(stdout);
    last = message;
  }
  const grpc::Status status = reader->Finish();
  std::printf("\n");
  if (!status.ok()) {
    std::fprintf(stderr, "llmserve-cli: %s (gRPC code %d)\n", status.error_message().c_str(),
                 static_cast<int>(status.error_code()));
    return 1;
  }
  std::fprintf(stderr,
               "[%s: %s, %u prompt + %u completion tokens, first token %.0f ms, total %.0f ms]\n",
               model.c_str(), llmserve::v1::FinishReason_Name(last.finish_reason()).c_str(),
               last.usage().prompt_tokens(), last.usage().completion_tokens(),
               last.timing().time_to_first_token_s() * 1000, last.timing().total_s() * 1000);
  return 0;
}
