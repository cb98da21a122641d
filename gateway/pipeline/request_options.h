// How the gateway runs every generation request, whichever API it came through.

#ifndef LLMSERVE_GATEWAY_PIPELINE_REQUEST_OPTIONS_H_
#define LLMSERVE_GATEWAY_PIPELINE_REQUEST_OPTIONS_H_

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pipeline/lora_adapter_manager.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gateway/pipeline/query_of_death.h"

namespace llmserve::gateway {

struct RequestOptions {
  PromptLimits limits;
  int max_attempts = 3;
  // Requests without a client deadline end after this.
  absl::Duration request_timeout = absl::Minutes(10);
  // Mix the principal's name into prefix-cache hashes, so tenants never share cached blocks.
  bool isolate_cache_per_principal = false;
  // May be null.
  GatewayMetrics* metrics = nullptr;
  // What the gateway's query-of-death guard is made from (the server makes it).
  QueryOfDeathOptions query_of_death;
  // The gateway's guard, shared by both APIs (set by the server; null: none).
  QueryOfDeathGuard* query_of_death_guard = nullptr;
  // What generations measure their latencies with (null: the real clock).
  const common::Clock* clock = nullptr;
  // Loads LoRA adapters on demand (GenerationOptions::lora_adapters; null: never).
  LoraAdapterManager* lora_adapters = nullptr;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_REQUEST_OPTIONS_H_
