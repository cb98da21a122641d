#include "common/tokenizer/json_util.h"

#include "absl/strings/str_cat.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

const Json* Find(const Json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status WrongType(const std::string& key, const char* expected, const std::string& where) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": field \"", key, "\" must be ", expected));
}

}  // namespace

std::string ComponentType(const Json& component) {
  const Json* type = Find(component, "type");
  return type != nullptr && type->is_string() ? type->get<std::string>() : std::string();
}

absl::StatusOr<std::string> GetString(const Json& object, const std::string& key,
                                      const std::string& where) {
  const Json* value = Find(object, key);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing field \"", key, "\""));
  }
  if (!value->is_string()) return WrongType(key, "a string", where);
  return value->get<std::string>();
}

absl::StatusOr<std::string> GetStringOr(const Json& object, const std::string& key,
                                        const std::string& fallback, const std::string& where) {
  if (Find(object, key) == nullptr) return fallback;
  return GetString(object, key, where);
}

absl::StatusOr<bool> GetBoolOr(const Json& object, const std::string& key, bool fallback,
                               const std::string& where) {
  const Json* value = Find(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return WrongType(key, "a boolean", where);
  return value->get<bool>();
}

absl::StatusOr<int64_t> GetIntOr(const Json& object, const std::string& key, int64_t fallback,
                                 const std::string& where) {
  const Json* value = Find(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_number_integer() || value->get<int64_t>() < 0) {
    return WrongType(key, "a non-negative integer", where);
  }
  return value->get<int64_t>();
}

absl::StatusOr<char32_t> GetChar(const Json& object, const std::string& key,
                                 const std::string& where) {
  absl::StatusOr<std::string> text = GetString(object, key, where);
  if (!text.ok()) return text.status();
  char32_t cp = 0;
  if (text->empty() || common::utf8::DecodeOne(*text, 0, &cp) != static_cast<int>(text->size())) {
    return WrongType(key, "a single character", where);
  }
  return cp;
}

}  // namespace llmserve::common::tokenizer
