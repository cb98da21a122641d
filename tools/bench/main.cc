// llmserve-bench: a serving benchmark. It sends a synthetic load (random token prompts of set
// lengths, optionally sharing a prefix) or a JSONL dataset to a server over one of four APIs —
// an OpenAI-compatible HTTP server's completions or chat completions (llmserve's gateway, vLLM,
// llama-server), a gateway's llmserve.v1.Inference, or a worker's llmserve.worker.v1.Worker — as
// open-loop Poisson arrivals at one or a sweep of rates, and reports throughput, goodput and
// latency percentiles per rate as JSON lines or a table, with an optional gnuplot chart.

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/base/flag_names.h"
#include "common/base/worker_api_limits.h"
#include "common/tokenizer/tokenizer.h"
#include "tools/bench/bench_report.h"
#include "tools/bench/dataset.h"
#include "tools/bench/grpc_clients.h"
#include "tools/bench/load_runner.h"
#include "tools/bench/openai_client.h"
#include "tools/bench/plot.h"
#include "tools/bench_load/bench_load.h"

ABSL_FLAG(std::string, api, "openai",
          "openai (POST /v1/completions), openai-chat (POST /v1/chat/completions), inference (a "
          "gateway's llmserve.v1.Inference gRPC API) or worker (llmserve.worker.v1.Worker)");
ABSL_FLAG(std::string, target, "",
          "host:port of the server (http://host:port also works for the openai APIs)");
ABSL_FLAG(std::string, endpoint, "", "openai APIs: the path to POST to, if not the usual one");
ABSL_FLAG(std::string, model, "",
          "the model to ask for (default: the first the server lists; worker: unused)");
ABSL_FLAG(std::string, api_key, "", "sent as a bearer token (openai and inference APIs)");
ABSL_FLAG(std::string, extra_body, "",
          "openai APIs: a JSON object merged into every request body (e.g. '{\"top_p\": 0.9}')");
ABSL_FLAG(int, requests, 200, "requests per rate");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "stop sending after this long at each rate (0: send every request)");
ABSL_FLAG(std::string, request_rate, "inf",
          "requests per second, Poisson arrivals; a comma-separated list runs a sweep "
          "(e.g. 1,2,4,inf); inf: all at once");
ABSL_FLAG(int, max_concurrency, 0, "most requests in flight (0: no limit)");
ABSL_FLAG(int, warmup, 1, "requests sent (at most 16 tokens each) and not counted before the run");
ABSL_FLAG(int, prompt_len, 128, "synthetic load: prompt tokens per request (random ids)");
ABSL_FLAG(int, output_len, 128,
          "tokens generated per request (EOS ignored); a dataset's default output length");
ABSL_FLAG(double, range_ratio, 0.0,
          "synthetic load: prompt and output lengths uniform in [len*(1-r), len*(1+r)], r in "
          "[0, 1)");
ABSL_FLAG(double, shared_prefix, 0.0,
          "synthetic load: fraction of the prompt every request shares");
ABSL_FLAG(std::string, dataset, "",
          "a JSONL file of requests ({\"prompt\"|\"prompt_ids\"|\"messages\": ..., "
          "\"output_len\": N} per line) instead of the synthetic load");
ABSL_FLAG(std::string, tokenizer, "",
          "a model directory with tokenizer.json: turns token ids into text for openai-chat and "
          "text into ids for worker, and gives the vocabulary size");
ABSL_FLAG(int, vocab_size, 0,
          "synthetic load on an openai API without --tokenizer: ids are drawn from [0, N)");
ABSL_FLAG(absl::Duration, slo_ttft, absl::ZeroDuration(),
          "goodput counts requests whose time to first token is at most this (0: no TTFT SLO)");
ABSL_FLAG(absl::Duration, slo_tpot, absl::ZeroDuration(),
          "goodput counts requests whose time per output token is at most this (0: no TPOT SLO)");
ABSL_FLAG(absl::Duration, timeout, absl::Minutes(10), "a request not ended by then fails");
ABSL_FLAG(std::string, format, "json",
          "json (one JSON line per rate on stdout) or table (a table on stdout at the end)");
ABSL_FLAG(std::string, result_file, "", "also write every rate's report to this JSON file");
ABSL_FLAG(std::string, plot, "", "draw latency against throughput over the rates to this PNG");
ABSL_FLAG(std::string, progress, "auto",
          "a progress line on stderr: auto (when stderr is a terminal), on or off");
ABSL_FLAG(uint64_t, seed, 1, "seed of the prompts, lengths and arrivals");

namespace llmserve::tools {
namespace {

using Json = nlohmann::json;
using common::tokenizer::Tokenizer;

constexpr absl::Duration kSetupTimeout = absl::Seconds(30);

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<std::vector<double>> ParseRates(const std::string& text) {
  std::vector<double> rates;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    double rate = 0;
    if (absl::AsciiStrToLower(part) == "inf") {
      rate = INFINITY;
    } else if (!absl::SimpleAtod(part, &rate) || !(rate > 0) || !std::isfinite(rate)) {
      return Invalid(absl::StrCat("--request_rate: '", part,
                                  "' is not a positive number of requests per second or inf"));
    }
    rates.push_back(rate);
  }
  return rates;
}

struct Setup {
  std::string api;
  std::string target;
  std::string model;
  int64_t vocab_size = 0;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<worker::v1::Worker::Stub> worker_stub;
  std::unique_ptr<::llmserve::v1::Inference::Stub> inference_stub;
  std::unique_ptr<BenchClient> client;
};

absl::Status ValidateFlags() {
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api != "openai" && api != "openai-chat" && api != "inference" && api != "worker") {
    return Invalid(
        absl::StrCat("--api=", api, " is not one of openai, openai-chat, inference, worker"));
  }
  if (absl::GetFlag(FLAGS_target).empty()) {
    return Invalid("--target is required (host:port of the server)");
  }
  if (absl::GetFlag(FLAGS_requests) < 1) return Invalid("--requests must be at least 1");
  if (absl::GetFlag(FLAGS_duration) < absl::ZeroDuration()) {
    return Invalid("--duration must not be negative");
  }
  if (absl::GetFlag(FLAGS_max_concurrency) < 0) {
    return Invalid("--max_concurrency must not be negative");
  }
  if (absl::GetFlag(FLAGS_warmup) < 0) return Invalid("--warmup must not be negative");
  if (absl::GetFlag(FLAGS_prompt_len) < 1 || absl::GetFlag(FLAGS_output_len) < 1) {
    return Invalid("--prompt_len and --output_len must be at least 1");
  }
  const double range = absl::GetFlag(FLAGS_range_ratio);
  if (!(range >= 0 && range < 1)) return Invalid("--range_ratio must be in [0, 1)");
  const double shared = absl::GetFlag(FLAGS_shared_prefix);
  if (!(shared >= 0 && shared < 1)) return Invalid("--shared_prefix must be in [0, 1)");
  if (absl::GetFlag(FLAGS_vocab_size) < 0) return Invalid("--vocab_size must not be negative");
  if (absl::GetFlag(FLAGS_slo_ttft) < absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_slo_tpot) < absl::ZeroDuration()) {
    return Invalid("--slo_ttft and --slo_tpot must not be negative");
  }
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    return Invalid("--timeout must be positive");
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "json" && format != "table") {
    return Invalid(absl::StrCat("--format=", format, " is not json or table"));
  }
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress != "auto" && progress != "on" && progress != "off") {
    return Invalid(absl::StrCat("--progress=", progress, " is not auto, on or off"));
  }
  const std::string endpoint = absl::GetFlag(FLAGS_endpoint);
  if (!endpoint.empty() &&
      (endpoint[0] != '/' || std::any_of(endpoint.begin(), endpoint.end(),
                                         [](char c) { return c <= ' ' || c == 0x7f; }))) {
    return Invalid(
        absl::StrCat("--endpoint='", endpoint,
                     "' is not a path starting with / (no spaces or control characters)"));
  }
  const std::string api_key = absl::GetFlag(FLAGS_api_key);
  if (std::any_of(api_key.begin(), api_key.end(), [](char c) { return c < ' ' || c == 0x7f; })) {
    return Invalid("--api_key holds a control character");
  }
  if (!absl::GetFlag(FLAGS_extra_body).empty() && api != "openai" && api != "openai-chat") {
    return Invalid("--extra_body applies to the openai APIs only");
  }
  return absl::OkStatus();
}

absl::Status Connect(Setup* setup) {
  setup->api = absl::GetFlag(FLAGS_api);
  setup->target = absl::GetFlag(FLAGS_target);
  setup->model = absl::GetFlag(FLAGS_model);
  if (const std::string dir = absl::GetFlag(FLAGS_tokenizer); !dir.empty()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromDirectory(dir);
    if (!tokenizer.ok()) {
      return Invalid(absl::StrCat("--tokenizer=", dir, ": ", tokenizer.status().message()));
    }
    setup->tokenizer = *std::move(tokenizer);
    setup->vocab_size = setup->tokenizer->vocab_size();
  }
  if (setup->api == "openai" || setup->api == "openai-chat") {
    absl::StatusOr<HttpTarget> target = ParseHttpTarget(setup->target);
    if (!target.ok()) return Invalid(absl::StrCat("--target: ", target.status().message()));
    const std::string api_key = absl::GetFlag(FLAGS_api_key);
    if (setup->model.empty()) {
      absl::StatusOr<std::string> model = FirstServedModel(*target, api_key, kSetupTimeout);
      if (!model.ok()) return model.status();
      setup->model = *model;
    }
    OpenAiClientOptions options{.target = *target,
                                .endpoint = setup->api == "openai-chat"
                                                ? OpenAiEndpoint::kChat
                                                : OpenAiEndpoint::kCompletions,
                                .path = absl::GetFlag(FLAGS_endpoint),
                                .model = setup->model,
                                .api_key = api_key};
    if (const std::string extra = absl::GetFlag(FLAGS_extra_body); !extra.empty()) {
      options.extra_body = Json::parse(extra, nullptr, /*allow_exceptions=*/false);
      if (!options.extra_body.is_object()) return Invalid("--extra_body is not a JSON object");
    }
    if (setup->vocab_size == 0) setup->vocab_size = absl::GetFlag(FLAGS_vocab_size);
    setup->client = std::make_unique<OpenAiClient>(std::move(options));
    return absl::OkStatus();
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(common::kWorkerApiMaxMessageBytes);
  setup->channel =
      grpc::CreateCustomChannel(setup->target, grpc::InsecureChannelCredentials(), arguments);
  if (setup->api == "worker") {
    setup->worker_stub = worker::v1::Worker::NewStub(setup->channel);
    auto client = std::make_unique<WorkerBenchClient>(setup->worker_stub.get());
    absl::StatusOr<worker::v1::ModelInfo> info = client->ModelInfo(kSetupTimeout);
    if (!info.ok()) return info.status();
    setup->model = info->model_name();
    setup->vocab_size = info->vocab_size();
    setup->client = std::move(client);
    return absl::OkStatus();
  }
  setup->inference_stub = ::llmserve::v1::Inference::NewStub(setup->channel);
  InferenceBenchClient lister(setup->inference_stub.get(), "", absl::GetFlag(FLAGS_api_key));
  absl::StatusOr<::llmserve::v1::ListModelsResponse> models = lister.ListModels(kSetupTimeout);
  if (!models.ok()) return models.status();
  for (const auto& model : models->models()) {
    if (setup->model.empty() || model.id() == setup->model) {
      setup->model = model.id();
      setup->vocab_size = model.vocab_size();
      break;
    }
  }
  if (setup->vocab_size == 0) {
    return absl::NotFoundError(
        setup->model.empty() ? "the gateway lists no model"
                             : absl::StrCat("the gateway does not serve --model=", setup->model));
  }
  setup->client = std::make_unique<InferenceBenchClient>(setup->inference_stub.get(), setup->model,
                                                         absl::GetFlag(FLAGS_api_key));
  return absl::OkStatus();
}

// Puts each request into the form `api` takes, with the tokenizer where a conversion is needed.
absl::Status FitRequests(const Setup& setup, std::vector<BenchRequest>* requests) {
  for (size_t i = 0; i < requests->size(); ++i) {
    BenchRequest& request = (*requests)[i];
    const std::string which = absl::StrCat("request ", i + 1);
    if (setup.api == "worker" && request.prompt_ids.empty()) {
      if (!request.messages.empty()) {
        return Invalid(absl::StrCat(which, ": --api=worker takes token ids, not messages"));
      }
      if (setup.tokenizer == nullptr) {
        return Invalid(absl::StrCat(which, ": --api=worker needs --tokenizer to encode text"));
      }
      absl::StatusOr<std::vector<int32_t>> ids =
          setup.tokenizer->Encode(request.prompt_text, /*add_special_tokens=*/true);
      if (!ids.ok()) return ids.status();
      request.prompt_ids = *std::move(ids);
      request.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
      request.prompt_text.clear();
    }
    if (setup.api == "openai" && !request.messages.empty()) {
      return Invalid(absl::StrCat(which,
                                  ": --api=openai (completions) takes no messages; use "
                                  "--api=openai-chat"));
    }
    if (setup.api == "openai-chat" && request.messages.empty() && request.prompt_text.empty()) {
      if (setup.tokenizer == nullptr) {
        return Invalid(absl::StrCat(
            which,
            ": --api=openai-chat sends text: give --tokenizer DIR to turn token ids into "
            "text"));
      }
      absl::StatusOr<std::string> text =
          setup.tokenizer->Decode(request.prompt_ids, /*skip_special_tokens=*/true);
      if (!text.ok()) return text.status();
      request.prompt_text = *std::move(text);
      request.prompt_ids.clear();
      request.prompt_tokens = 0;  // the chat template adds tokens: the server's usage says
    }
  }
  return absl::OkStatus();
}

struct Load {
  std::vector<BenchRequest> requests;
  std::vector<absl::Duration> arrivals;
};

absl::StatusOr<Load> MakeLoad(const Setup& setup, double rate, int rate_index,
                              const std::vector<BenchRequest>& dataset) {
  Load load;
  const int count = absl::GetFlag(FLAGS_requests);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (!dataset.empty()) {
    for (int i = 0; i < count; ++i) load.requests.push_back(dataset[i % dataset.size()]);
    load.arrivals = PoissonArrivals(count, rate, seed + rate_index);
  } else {
    if (setup.vocab_size < 1) {
      return Invalid(
          "the synthetic load draws random token ids: give --tokenizer DIR or --vocab_size N");
    }
    BenchOptions options{.num_requests = count,
                         .prompt_len = absl::GetFlag(FLAGS_prompt_len),
                         .output_len = absl::GetFlag(FLAGS_output_len),
                         .rate = std::isinf(rate) ? 0 : rate,
                         .shared_prefix = absl::GetFlag(FLAGS_shared_prefix),
                         .range_ratio = absl::GetFlag(FLAGS_range_ratio),
                         .seed = seed + static_cast<uint64_t>(rate_index)};
    absl::StatusOr<BenchLoad> synthetic = MakeBenchLoad(options, setup.vocab_size);
    if (!synthetic.ok()) return synthetic.status();
    for (size_t i = 0; i < synthetic->prompts.size(); ++i) {
      BenchRequest request;
      request.prompt_tokens = static_cast<int64_t>(synthetic->prompts[i].size());
      request.prompt_ids = std::move(synthetic->prompts[i]);
      request.output_len = synthetic->output_lens[i];
      load.requests.push_back(std::move(request));
    }
    load.arrivals = std::move(synthetic->arrivals);
  }
  if (absl::Status fitted = FitRequests(setup, &load.requests); !fitted.ok()) return fitted;
  return load;
}

void PrintProgress(const std::string& label, const LoadProgress& progress) {
  constexpr int kWidth = 30;
  const int done = progress.succeeded + progress.failed;
  const int filled = progress.total > 0 ? kWidth * done / progress.total : 0;
  std::fprintf(stderr, "\r%s [%s%s] %d/%d done, %d in flight, %d failed, %.1f s\033[K",
               label.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done, progress.total,
               progress.sent - done, progress.failed, absl::ToDoubleSeconds(progress.elapsed));
  std::fflush(stderr);
}

int Run() {
  if (absl::Status valid = ValidateFlags(); !valid.ok()) {
    std::fprintf(stderr, "llmserve-bench: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<double>> rates = ParseRates(absl::GetFlag(FLAGS_request_rate));
  if (!rates.ok()) {
    std::fprintf(stderr, "llmserve-bench: %s\n", std::string(rates.status().message()).c_str());
    return 2;
  }
  std::vector<BenchRequest> dataset;
  if (const std::string path = absl::GetFlag(FLAGS_dataset); !path.empty()) {
    absl::StatusOr<std::vector<BenchRequest>> loaded =
        LoadJsonlDataset(path, absl::GetFlag(FLAGS_output_len));
    if (!loaded.ok()) {
      std::fprintf(stderr, "llmserve-bench: --dataset: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    dataset = *std::move(loaded);
  }
  Setup setup;
  if (absl::Status connected = Connect(&setup); !connected.ok()) {
    std::fprintf(stderr, "llmserve-bench: %s\n", connected.ToString().c_str());
    return absl::IsInvalidArgument(connected) ? 2 : 1;
  }

  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (const int warmup = absl::GetFlag(FLAGS_warmup); warmup > 0) {
    absl::StatusOr<Load> load = MakeLoad(setup, INFINITY, /*rate_index=*/-1, dataset);
    if (!load.ok()) {
      std::fprintf(stderr, "llmserve-bench: %s\n", std::string(load.status().message()).c_str());
      return 2;
    }
    load->requests.resize(std::min<size_t>(load->requests.size(), warmup));
    for (BenchRequest& request : load->requests) {
      request.output_len = std::min(request.output_len, 16);
    }
    const LoadResult result = RunLoad(setup.client.get(), load->requests,
                                      {.request_timeout = timeout, .id_prefix = "bench-warmup-"});
    bool any_ok = false;
    for (const RequestOutcome& outcome : result.outcomes) any_ok |= outcome.ok;
    if (!any_ok) {
      const RequestOutcome& first = result.outcomes.front();
      std::fprintf(stderr, "llmserve-bench: every warm-up request failed: %s: %s\n",
                   first.status.c_str(), first.error.c_str());
      return 1;
    }
  }

  const std::string progress_flag = absl::GetFlag(FLAGS_progress);
  const bool show_progress =
      progress_flag == "on" || (progress_flag == "auto" && isatty(STDERR_FILENO));
  const std::string format = absl::GetFlag(FLAGS_format);
  const std::optional<double> slo_ttft =
      absl::GetFlag(FLAGS_slo_ttft) > absl::ZeroDuration()
          ? std::optional<double>(absl::ToDoubleSeconds(absl::GetFlag(FLAGS_slo_ttft)))
          : std::nullopt;
  const std::optional<double> slo_tpot =
      absl::GetFlag(FLAGS_slo_tpot) > absl::ZeroDuration()
          ? std::optional<double>(absl::ToDoubleSeconds(absl::GetFlag(FLAGS_slo_tpot)))
          : std::nullopt;
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const std::string run_id = absl::StrCat(absl::ToUnixMicros(absl::Now()));
  std::vector<Json> reports;
  bool some_rate_failed = false;
  for (size_t r = 0; r < rates->size(); ++r) {
    const double rate = (*rates)[r];
    absl::StatusOr<Load> load = MakeLoad(setup, rate, static_cast<int>(r), dataset);
    if (!load.ok()) {
      std::fprintf(stderr, "llmserve-bench: %s\n", std::string(load.status().message()).c_str());
      return 2;
    }
    const std::string label = std::isinf(rate) ? "rate inf" : absl::StrFormat("rate %g/s", rate);
    LoadOptions options{
        .arrivals = std::move(load->arrivals),
        .max_concurrency = absl::GetFlag(FLAGS_max_concurrency),
        .duration = duration > absl::ZeroDuration() ? duration : absl::InfiniteDuration(),
        .request_timeout = timeout,
        .id_prefix = absl::StrCat("bench-", run_id, "-", r, "-")};
    if (show_progress) {
      options.on_progress = [&label](const LoadProgress& progress) {
        PrintProgress(label, progress);
      };
    }
    const LoadResult result = RunLoad(setup.client.get(), load->requests, options);
    if (show_progress) std::fprintf(stderr, "\n");
    Json report =
        SummarizeLoad({.api = setup.api,
                       .target = setup.target,
                       .model = setup.model,
                       .request_rate = rate,
                       .max_concurrency = absl::GetFlag(FLAGS_max_concurrency),
                       .requests = static_cast<int>(load->requests.size()),
                       .prompt_len = dataset.empty() ? absl::GetFlag(FLAGS_prompt_len) : 0,
                       .output_len = dataset.empty() ? absl::GetFlag(FLAGS_output_len) : 0,
                       .range_ratio = dataset.empty() ? absl::GetFlag(FLAGS_range_ratio) : 0,
                       .shared_prefix = dataset.empty() ? absl::GetFlag(FLAGS_shared_prefix) : 0,
                       .dataset = absl::GetFlag(FLAGS_dataset),
                       .slo_ttft_s = slo_ttft,
                       .slo_tpot_s = slo_tpot},
                      result);
    if (report["completed"].get<int64_t>() == 0) some_rate_failed = true;
    if (format == "json") {
      std::printf("%s\n", report.dump().c_str());
      std::fflush(stdout);
    }
    reports.push_back(std::move(report));
  }
  if (format == "table") {
    std::printf("llmserve-bench: %s %s, model %s\n%s", setup.api.c_str(), setup.target.c_str(),
                setup.model.c_str(), FormatTable(reports).c_str());
  }
  if (const std::string path = absl::GetFlag(FLAGS_result_file); !path.empty()) {
    std::ofstream file(path);
    file << Json({{"runs", reports}}).dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "llmserve-bench: cannot write --result_file=%s\n", path.c_str());
      return 1;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_plot); !path.empty()) {
    const std::string title =
        absl::StrCat("llmserve-bench: ", setup.api, " ", setup.model,
                     dataset.empty() ? absl::StrFormat(", prompt %d, output %d tokens",
                                                       absl::GetFlag(FLAGS_prompt_len),
                                                       absl::GetFlag(FLAGS_output_len))
                                     : absl::StrCat(", ", absl::GetFlag(FLAGS_dataset)));
    if (absl::Status plotted = PlotSweep(reports, title, path); !plotted.ok()) {
      std::fprintf(stderr, "llmserve-bench: %s\n", std::string(plotted.message()).c_str());
      return 1;
    }
  }
  if (some_rate_failed) {
    std::fprintf(stderr, "llmserve-bench: at some rate no request completed (see first_error)\n");
    return 3;
  }
  return 0;
}

}  // namespace
}  // namespace llmserve::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A serving benchmark: llmserve-bench --target=HOST:PORT [--api=openai|openai-chat|"
      "inference|worker] [--request_rate=1,2,4,inf] [--requests=200] [--prompt_len=128 "
      "--output_len=128 | --dataset=FILE.jsonl] [--format=table] [--plot=FILE.png]");
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  signal(SIGPIPE, SIG_IGN);  // a server or gnuplot that goes away is an error, not our death
  return llmserve::tools::Run();
}
