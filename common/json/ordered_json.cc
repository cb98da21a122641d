#include "common/json/ordered_json.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace llmserve::common {
namespace {

using Json = nlohmann::ordered_json;

// nlohmann's SAX interface, building the document.
class BoundedBuilder {
 public:
  explicit BoundedBuilder(const OrderedJsonLimits& limits) : limits_(limits) {}

  bool null() { return AddValue(Json(nullptr)); }
  bool boolean(bool value) { return AddValue(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return AddValue(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return AddValue(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) {
    return AddValue(Json(value));
  }
  bool string(Json::string_t& value) { return AddValue(Json(std::move(value))); }
  bool binary(Json::binary_t& value) { return AddValue(Json::binary(std::move(value))); }
  bool start_object(std::size_t /*size*/) { return Open(Json::value_t::object); }
  bool end_object() { return Close(); }
  bool start_array(std::size_t /*size*/) { return Open(Json::value_t::array); }
  bool end_array() { return Close(); }
  bool key(Json::string_t& key) {
    if (open_.back() == nullptr) return true;  // inside a skipped value
    skip_next_ = open_.size() == 1 && limits_.keep_top_level_key != nullptr &&
                 !limits_.keep_top_level_key(key);
    key_ = std::move(key);
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const Json::exception& error) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat(limits_.what, " is not valid JSON: ", error.what()));
    return false;
  }

  absl::StatusOr<Json> Take(bool parsed) && {
    if (!status_.ok()) return status_;
    if (!parsed)
      return absl::InvalidArgumentError(absl::StrCat(limits_.what, " is not valid JSON"));
    return std::move(root_);
  }

 private:
  bool Count() {
    if (++values_ <= limits_.max_values) return true;
    status_ = absl::InvalidArgumentError(
        absl::StrCat(limits_.what, " holds more than ", limits_.max_values, " JSON values"));
    return false;
  }
  // Where the next value goes: null when it is skipped.
  Json* NextSlot() {
    if (open_.empty()) return &root_;
    Json* parent = open_.back();
    if (parent == nullptr) return nullptr;
    if (parent->is_array()) {
      parent->push_back(Json());
      return &parent->back();
    }
    if (skip_next_) {
      skip_next_ = false;
      return nullptr;
    }
    // ordered_map is a vector of members; its operator[] takes keys, so members are reached
    // through the vector, by the index this object keeps.
    auto& members =
        static_cast<std::vector<Json::object_t::value_type>&>(parent->get_ref<Json::object_t&>());
    const auto [it, added] = key_index_.back().try_emplace(key_, members.size());
    if (added) {
      members.emplace_back(key_, Json());
      return &members.back().second;
    }
    Json& slot = members[it->second].second;
    slot = Json();
    return &slot;
  }
  bool AddValue(Json value) {
    if (!Count()) return false;
    if (Json* slot = NextSlot()) *slot = std::move(value);
    return true;
  }
  bool Open(Json::value_t type) {
    if (!Count()) return false;
    if (open_.size() >= static_cast<size_t>(limits_.max_depth)) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat(limits_.what, " is nested more than ", limits_.max_depth, " levels deep"));
      return false;
    }
    Json* slot = NextSlot();
    if (slot != nullptr) *slot = Json(type);
    // Containers are only appended to while they are the innermost open one, so these pointers
    // into parents stay valid.
    open_.push_back(slot);
    key_index_.emplace_back();
    return true;
  }
  bool Close() {
    open_.pop_back();
    key_index_.pop_back();
    return true;
  }

  const OrderedJsonLimits& limits_;
  Json root_;
  // The open containers, outermost first; null for a skipped one.
  std::vector<Json*> open_;
  // Per open container (unused for arrays): key -> position among its members.
  std::vector<absl::flat_hash_map<std::string, size_t>> key_index_;
  std::string key_;
  bool skip_next_ = false;
  int64_t values_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text,
                                                        const OrderedJsonLimits& limits) {
  try {
    BoundedBuilder builder(limits);
    const bool parsed = Json::sax_parse(text.begin(), text.end(), &builder);
    return std::move(builder).Take(parsed);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(limits.what, " is not valid JSON: ", e.what()));
  }
}

}  // namespace llmserve::common
