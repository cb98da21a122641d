// Bodies of the LoRA admin endpoints, in vLLM's shape:
//   POST /v1/load_lora_adapter    {"lora_name", "lora_path", "base_model_name"?, "load_inplace"?}
//   POST /v1/unload_lora_adapter  {"lora_name", "lora_int_id"?}
// base_model_name (ours, from vLLM's --lora-modules JSON) picks the base model when workers of
// several models load adapters at run time; load_inplace may only be false (replacing an adapter
// in place is not supported: unload it, then load it); lora_int_id is accepted and ignored (the
// gateway names adapters only by lora_name). Any other field, and every wrong type, is refused
// with INVALID_ARGUMENT naming it.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_LORA_ADMIN_REQUEST_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_LORA_ADMIN_REQUEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gateway/pipeline/lora_adapter_manager.h"

namespace llmserve::gateway {

absl::StatusOr<LoraAdapterSource> ParseLoadLoraAdapterRequest(absl::string_view body);
// The adapter's name.
absl::StatusOr<std::string> ParseUnloadLoraAdapterRequest(absl::string_view body);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_LORA_ADMIN_REQUEST_H_
