#include "gateway/frontends/openai/lora_admin_api.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "gateway/frontends/openai/lora_admin_request.h"

namespace llmserve::gateway {
namespace {

void SendChange(http::ResponseWriter& writer, LoraAdminAction action, const std::string& name,
                const LoraAdapterChangeResult& result) {
  const bool load = action == LoraAdminAction::kLoad;
  nlohmann::json body = {{"object", "lora_adapter"},
                         {"lora_name", name},
                         {"workers", result.changed},
                         {"failed", result.failed},
                         {"message", absl::StrCat("Success: LoRA adapter '", name, "' ",
                                                  load ? "added" : "removed", " successfully.")}};
  if (load) body["base_model_name"] = result.base_model;
  writer.Send(200, {{"content-type", "application/json"}},
              body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

void HandleLoraAdmin(LoraAdminAction action, const RequestRunner& runner,
                     const http::HttpRequest& request,
                     std::shared_ptr<http::ResponseWriter> writer) {
  if (absl::Status accepting = runner.tracker().CheckAccepting(); !accepting.ok()) {
    return http::SendError(*writer, accepting);
  }
  absl::StatusOr<Principal> principal =
      runner.tracker().admission().Authenticate(request.Header("authorization"));
  if (!principal.ok()) return http::SendError(*writer, principal.status());
  if (!principal->admin) {
    return http::SendError(*writer,
                           absl::PermissionDeniedError(absl::StrCat(
                               "\"", principal->name,
                               "\" may not load or unload LoRA adapters (an admin API key may)")));
  }
  LoraAdapterManager* manager = runner.options().lora_adapters;
  if (manager == nullptr) {
    return http::SendError(*writer,
                           absl::UnimplementedError("this gateway does not manage LoRA adapters"));
  }
  if (action == LoraAdminAction::kLoad) {
    absl::StatusOr<LoraAdapterSource> source = ParseLoadLoraAdapterRequest(request.body);
    if (!source.ok()) return http::SendError(*writer, source.status());
    const std::string name = source->name;
    const std::string admin = principal->name;
    return manager->Load(
        *std::move(source), [writer, name, admin](absl::StatusOr<LoraAdapterChangeResult> result) {
          if (!result.ok()) return http::SendError(*writer, result.status());
          LLMSERVE_LOG(INFO) << admin << " loaded LoRA adapter " << name << " of "
                             << result->base_model << " on " << result->changed.size()
                             << " workers (" << result->failed.size() << " failed)";
          SendChange(*writer, LoraAdminAction::kLoad, name, *result);
        });
  }
  absl::StatusOr<std::string> name = ParseUnloadLoraAdapterRequest(request.body);
  if (!name.ok()) return http::SendError(*writer, name.status());
  const std::string admin = principal->name;
  manager->Unload(*name,
                  [writer, name = *name, admin](absl::StatusOr<LoraAdapterChangeResult> result) {
                    if (!result.ok()) return http::SendError(*writer, result.status());
                    LLMSERVE_LOG(INFO) << admin << " unloaded LoRA adapter " << name << " from "
                                       << result->changed.size() << " workers";
                    SendChange(*writer, LoraAdminAction::kUnload, name, *result);
                  });
}

}  // namespace llmserve::gateway
