#include "gateway/request_log/request_record.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/utf8/utf8.h"
#include "nlohmann/json.hpp"

namespace llmserve::gateway {
namespace {

void SanitizeText(std::string& text) {
  if (!common::utf8::IsValid(text)) text = common::utf8::SanitizeLossy(text);
  if (text.find('\0') != std::string::npos) {
    text = absl::StrReplaceAll(text, {{absl::string_view("\0", 1), "\xEF\xBF\xBD"}});
  }
}

}  // namespace

void SanitizeRecordText(RequestRecord& record) {
  for (std::string* text :
       {&record.record_id, &record.request_id, &record.principal, &record.principal_kind,
        &record.model, &record.api, &record.endpoint, &record.status, &record.error,
        &record.finish_reasons, &record.worker, &record.gateway}) {
    SanitizeText(*text);
  }
  record.error.resize(common::utf8::TruncateAtCharBoundary(record.error, kMaxErrorBytes).size());
  if (record.prompt.has_value()) SanitizeText(*record.prompt);
  if (record.output.has_value()) SanitizeText(*record.output);
}

std::string FormatRecordTime(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time, absl::UTCTimeZone());
}

std::string RequestRecordJson(const RequestRecord& record) {
  nlohmann::ordered_json json;
  json["time"] = FormatRecordTime(record.time);
  json["record_id"] = record.record_id;
  json["request_id"] = record.request_id;
  json["principal"] = record.principal;
  json["principal_kind"] = record.principal_kind;
  json["model"] = record.model;
  json["api"] = record.api;
  json["endpoint"] = record.endpoint;
  json["status"] = record.status;
  json["error"] = record.error;
  json["finish_reasons"] = record.finish_reasons;
  json["choices"] = record.choices;
  json["prompt_tokens"] = record.prompt_tokens;
  json["cached_prompt_tokens"] = record.cached_prompt_tokens;
  json["completion_tokens"] = record.completion_tokens;
  json["reasoning_tokens"] = record.reasoning_tokens;
  json["time_to_first_token_s"] = record.time_to_first_token_s.has_value()
                                      ? nlohmann::ordered_json(*record.time_to_first_token_s)
                                      : nlohmann::ordered_json(nullptr);
  json["duration_s"] = record.duration_s;
  json["worker"] = record.worker;
  json["gateway"] = record.gateway;
  if (record.prompt.has_value()) json["prompt"] = *record.prompt;
  if (record.output.has_value()) json["output"] = *record.output;
  // Replace, not throw: a record that skipped SanitizeRecordText still becomes a line.
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace llmserve::gateway
