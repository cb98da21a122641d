// The LoRA admin endpoints on the HTTP API (bodies: lora_admin_request.h):
//   POST /v1/load_lora_adapter    loads an adapter on every ready worker of its base model that
//                                 loads adapters at run time, and lets the gateway load it on
//                                 demand later (gateway/pipeline/lora_adapter_manager.h)
//   POST /v1/unload_lora_adapter  unloads it from every worker that has it
// Only for admin principals (an API key marked `admin`, or anyone on a gateway without auth):
// others get 403. The answer is JSON: {"object": "lora_adapter", "lora_name", "base_model_name",
// "workers": [the workers that changed], "failed": ["address: why", ...], "message"}; errors use
// the API's error shape.
//
// Thread-safe: called on the HTTP server's I/O threads, never blocks (the answer goes out from
// the worker calls' threads).

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_LORA_ADMIN_API_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_LORA_ADMIN_API_H_

#include <memory>

#include "gateway/http/http_request.h"
#include "gateway/http/response_writer.h"
#include "gateway/pipeline/request_runner.h"

namespace llmserve::gateway {

enum class LoraAdminAction { kLoad, kUnload };

void HandleLoraAdmin(LoraAdminAction action, const RequestRunner& runner,
                     const http::HttpRequest& request,
                     std::shared_ptr<http::ResponseWriter> writer);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_LORA_ADMIN_API_H_
