#include "gateway/frontends/openai/lora_admin_request.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json/ordered_json.h"
#include "gateway/frontends/openai/openai_json.h"
#include "gateway/frontends/openai/openai_request.h"

namespace llmserve::gateway {
namespace {

using AdminJson = openai_json::Json;

// The body as an object whose fields are all among `known`.
absl::StatusOr<AdminJson> AdminBody(absl::string_view body,
                                    std::initializer_list<absl::string_view> known) {
  absl::StatusOr<AdminJson> document = common::ParseOrderedJson(
      std::string_view(body.data(), body.size()),
      {.max_depth = kMaxJsonDepth, .max_values = kMaxJsonValues, .what = "the body"});
  if (!document.ok()) return document.status();
  if (!document->is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  for (const auto& [key, value] : document->items()) {
    bool listed = false;
    for (absl::string_view name : known) listed = listed || key == name;
    if (!listed) return openai_json::Invalid(key, "is not a field of this endpoint");
  }
  return document;
}

// A string field; "" when absent and not `required`.
absl::StatusOr<std::string> StringField(const AdminJson& json, const char* field, bool required) {
  const AdminJson* value = openai_json::Find(json, field);
  if (value == nullptr) {
    if (required) return openai_json::Invalid(field, "is required");
    return std::string();
  }
  if (!value->is_string()) return openai_json::Invalid(field, "must be a string");
  return value->get<std::string>();
}

}  // namespace

absl::StatusOr<LoraAdapterSource> ParseLoadLoraAdapterRequest(absl::string_view body) {
  absl::StatusOr<AdminJson> json =
      AdminBody(body, {"lora_name", "lora_path", "base_model_name", "load_inplace"});
  if (!json.ok()) return json.status();
  LoraAdapterSource source;
  absl::StatusOr<std::string> name = StringField(*json, "lora_name", true);
  if (!name.ok()) return name.status();
  absl::StatusOr<std::string> path = StringField(*json, "lora_path", true);
  if (!path.ok()) return path.status();
  absl::StatusOr<std::string> base = StringField(*json, "base_model_name", false);
  if (!base.ok()) return base.status();
  if (const AdminJson* inplace = openai_json::Find(*json, "load_inplace"); inplace != nullptr) {
    if (!inplace->is_boolean()) return openai_json::Invalid("load_inplace", "must be a boolean");
    if (inplace->get<bool>()) {
      return openai_json::Invalid("load_inplace",
                                  "true is not supported: unload the adapter, then load it");
    }
  }
  source = {.name = *std::move(name), .path = *std::move(path), .base_model = *std::move(base)};
  if (absl::Status valid = ValidateLoraAdapterSource(source); !valid.ok()) return valid;
  return source;
}

absl::StatusOr<std::string> ParseUnloadLoraAdapterRequest(absl::string_view body) {
  absl::StatusOr<AdminJson> json = AdminBody(body, {"lora_name", "lora_int_id"});
  if (!json.ok()) return json.status();
  if (const AdminJson* id = openai_json::Find(*json, "lora_int_id");
      id != nullptr && !id->is_number_integer()) {
    return openai_json::Invalid("lora_int_id", "must be an integer");
  }
  absl::StatusOr<std::string> name = StringField(*json, "lora_name", true);
  if (!name.ok()) return name.status();
  if (name->empty()) return openai_json::Invalid("lora_name", "must not be empty");
  return name;
}

}  // namespace llmserve::gateway
