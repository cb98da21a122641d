// Micro-benchmarks of the sampler on a Llama-3-sized vocabulary (128256 tokens).
//
//   ninja -C build-sampling sampler_benchmark && build-sampling/bin/sampler_benchmark
//
// "Peaked" logits look like a language model's: a normal bulk with a few clear favourites, so
// the top-p nucleus is small. "Flat" logits (a plain normal, no favourites) are the worst case
// for top-p: the nucleus holds most of the vocabulary.

#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/sampling/sampler.h"

namespace llmserve::worker {
namespace {

constexpr int64_t kVocab = 128256;

std::vector<float> MakeLogits(bool peaked, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& logit : logits) logit = normal(engine);
  if (peaked) {
    std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
    for (int i = 0; i < 8; ++i) logits[token(engine)] = 18.0f - i;
  }
  return logits;
}

SamplingState MakeState(SamplingParams params, std::vector<int32_t> prompt = {}) {
  params.seed = 7;
  return *SamplingState::Create(params, prompt, kVocab);
}

// Without penalties Sample leaves sanitized logits as they were, so one buffer serves every
// iteration and no copy is timed.
void RunSample(benchmark::State& bench, const SamplingParams& params, bool peaked) {
  std::vector<float> logits = MakeLogits(peaked, 1);
  SamplingState state = MakeState(params);
  const Sampler sampler;
  for (auto _ : bench) {
    SampleResult result = sampler.Sample(absl::MakeSpan(logits), state);
    benchmark::DoNotOptimize(result);
    state.Append(result.token_id);
  }
}

void BM_Greedy(benchmark::State& bench) {
  SamplingParams params;
  params.temperature = 0.0f;
  RunSample(bench, params, true);
}
BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);

void BM_Plain(benchmark::State& bench) { RunSample(bench, SamplingParams(), true); }
BENCHMARK(BM_Plain)->Unit(benchmark::kMicrosecond);

void BM_TopP09(benchmark::State& bench) {
  SamplingParams params;
  params.top_p = 0.9f;
  RunSample(bench, params, bench.range(0) != 0);
}
BENCHMARK(BM_TopP09)->ArgName("peaked")->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

void BM_TopK50TopP09(benchmark::State& bench) {
  SamplingParams params;
  params.top_k = 50;
  params.top_p = 0.9f;
  RunSample(bench, params, true);
}
BENCHMARK(BM_TopK50TopP09)->Unit(benchmark::kMicrosecond);

void BM_MinP005(benchmark::State& bench) {
  SamplingParams params;
  params.min_p = 0.05f;
  RunSample(bench, params, true);
}
BENCHMARK(BM_MinP005)->Unit(benchmark::kMicrosecond);

void BM_TopP09Logprobs5(benchmark::State& bench) {
  SamplingParams params;
  params.top_p = 0.9f;
  params.top_logprobs = 5;
  RunSample(bench, params, true);
}
BENCHMARK(BM_TopP09Logprobs5)->Unit(benchmark::kMicrosecond);

// Penalties change the logits, so each iteration restores them; the copy (~0.5 MB) is timed too.
// The history is fixed (no Append in the loop): growing penalties would flatten the logits over
// the iterations and time a different distribution.
void BM_TopP09Penalties(benchmark::State& bench) {
  SamplingParams params;
  params.top_p = 0.9f;
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.3f;
  std::vector<int32_t> prompt(2000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 37 % kVocab);
  SamplingState state = MakeState(params, prompt);
  for (int32_t i = 0; i < 500; ++i) state.Append(i * 101 % kVocab);
  const std::vector<float> original = MakeLogits(true, 1);
  std::vector<float> logits;
  const Sampler sampler;
  for (auto _ : bench) {
    logits = original;
    benchmark::DoNotOptimize(sampler.Sample(absl::MakeSpan(logits), state));
  }
}
BENCHMARK(BM_TopP09Penalties)->Unit(benchmark::kMicrosecond);

// One engine step: 64 requests with top_p 0.9, one thread.
void BM_Batch64TopP09(benchmark::State& bench) {
  constexpr int kBatch = 64;
  std::vector<float> logits;
  std::vector<SamplingState> states;
  SamplingParams params;
  params.top_p = 0.9f;
  for (int i = 0; i < kBatch; ++i) {
    const std::vector<float> row = MakeLogits(true, i);
    logits.insert(logits.end(), row.begin(), row.end());
    states.push_back(MakeState(params));
  }
  std::vector<const SamplingState*> batch;
  for (const SamplingState& state : states) batch.push_back(&state);
  const Sampler sampler;
  for (auto _ : bench) {
    benchmark::DoNotOptimize(sampler.SampleBatch(absl::MakeSpan(logits), batch));
  }
  bench.SetItemsProcessed(bench.iterations() * kBatch);
}
BENCHMARK(BM_Batch64TopP09)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace llmserve::worker

BENCHMARK_MAIN();
