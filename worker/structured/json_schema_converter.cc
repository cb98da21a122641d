#include "worker/structured/json_schema_converter.h"

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/json/ordered_json.h"
#include "nlohmann/json.hpp"
#include "worker/structured/grammar.h"
#include "worker/structured/number_range.h"
#include "worker/structured/regex_converter.h"

namespace llmserve::worker::structured {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kPrimitives[] = R"(
json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object ::= "{" ( json-string ": " json-value ( ", " json-string ": " json-value )* )? "}"
json-array ::= "[" ( json-value ( ", " json-value )* )? "]"
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" json-u )
json-u ::= [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}
json-int ::= "-"? ( "0" | [1-9] [0-9]* )
json-number ::= json-int ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
json-date ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )
json-time ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
json-uuid ::= [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}
json-email-atom ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+
json-email-label ::= [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?
json-email ::= json-email-atom ( "." json-email-atom )* "@" json-email-label ( "." json-email-label )+
json-octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]
json-ipv4 ::= json-octet "." json-octet "." json-octet "." json-octet
)";

constexpr const char* kUnsupported[] = {"not",
                                        "if",
                                        "then",
                                        "else",
                                        "patternProperties",
                                        "uniqueItems",
                                        "multipleOf",
                                        "dependentRequired",
                                        "dependentSchemas",
                                        "dependencies",
                                        "propertyNames",
                                        "minProperties",
                                        "maxProperties",
                                        "contains",
                                        "minContains",
                                        "maxContains",
                                        "unevaluatedProperties",
                                        "unevaluatedItems",
                                        "$dynamicRef",
                                        "$recursiveRef",
                                        "additionalItems"};

// Keywords that only describe: they never change which instances are valid.
constexpr const char* kAnnotations[] = {"title",        "description",      "examples",
                                        "default",      "$schema",          "$id",
                                        "$comment",     "$anchor",          "$defs",
                                        "definitions",  "deprecated",       "readOnly",
                                        "writeOnly",    "contentMediaType", "contentEncoding",
                                        "$vocabulary",  "$dynamicAnchor",   "$recursiveAnchor",
                                        "contentSchema"};

bool IsAnnotation(const std::string& key) {
  for (const char* a : kAnnotations) {
    if (key == a) return true;
  }
  return false;
}

// A schema that every instance satisfies: true, or an object of annotations only ({}).
bool AlwaysValid(const Json& schema) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (!schema.is_object()) return false;
  for (const auto& [key, value] : schema.items()) {
    if (!IsAnnotation(key)) return false;
  }
  return true;
}

// Whether `keyword`, one of kUnsupported, has a value in `schema` that leaves every instance valid
// (JSON Schema 2020-12), such as Pydantic's "uniqueItems": false: it is then accepted as if it
// were absent. A keyword that does constrain is refused by name: the grammar cannot enforce it.
bool ConstrainsNothing(const std::string& keyword, const Json& schema) {
  const Json& value = schema.at(keyword);
  if (keyword == "uniqueItems") return value.is_boolean() && !value.get<bool>();
  if (keyword == "minProperties") return value.is_number() && value.get<double>() == 0;
  // Without "contains" they are ignored.
  if (keyword == "minContains" || keyword == "maxContains") return !schema.contains("contains");
  // "if" only selects "then" or "else"; without "if" those are ignored.
  if (keyword == "if") {
    return (!schema.contains("then") || AlwaysValid(schema.at("then"))) &&
           (!schema.contains("else") || AlwaysValid(schema.at("else")));
  }
  if (keyword == "then" || keyword == "else") return !schema.contains("if") || AlwaysValid(value);
  if (keyword == "not") return value.is_boolean() && !value.get<bool>();
  if (keyword == "dependentRequired" || keyword == "dependentSchemas" ||
      keyword == "dependencies" || keyword == "patternProperties") {
    return value.is_object() && value.empty();
  }
  if (keyword == "propertyNames" || keyword == "unevaluatedProperties" ||
      keyword == "unevaluatedItems" || keyword == "additionalItems") {
    return AlwaysValid(value);
  }
  return false;
}

std::string Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// Compact layout of a JSON value, as the grammar generates it: ", " and ": " separators.
bool Serialize(const Json& value, std::string* out) {
  try {
    if (value.is_object()) {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out->append(", ");
        first = false;
        out->append(Json(key).dump(-1, ' ', false, Json::error_handler_t::strict));
        out->append(": ");
        if (!Serialize(item, out)) return false;
      }
      out->push_back('}');
    } else if (value.is_array()) {
      out->push_back('[');
      bool first = true;
      for (const Json& item : value) {
        if (!first) out->append(", ");
        first = false;
        if (!Serialize(item, out)) return false;
      }
      out->push_back(']');
    } else {
      out->append(value.dump(-1, ' ', false, Json::error_handler_t::strict));
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool MatchesType(const Json& value, const std::string& type) {
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    return value.is_number_float() && std::floor(value.get<double>()) == value.get<double>();
  }
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  return false;
}

// Keywords that VisitEnum checks on each value.
bool IsValueCheck(const std::string& key) {
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                        "maxLength", "minItems", "maxItems", "required"}) {
    if (key == k) return true;
  }
  return false;
}

// Whether `value` satisfies the keyword (which applies to one instance type and holds for the
// others). INVALID_ARGUMENT when the keyword's own value is malformed.
absl::StatusOr<bool> ValueSatisfies(const Json& value, const std::string& key, const Json& bound) {
  if (key == "required") {
    if (!bound.is_array()) return absl::InvalidArgumentError("must be an array of strings");
    for (const Json& name : bound) {
      if (!name.is_string()) return absl::InvalidArgumentError("must be an array of strings");
      if (value.is_object() && !value.contains(name.get<std::string>())) return false;
    }
    return true;
  }
  if (!bound.is_number() || !std::isfinite(bound.get<double>())) {
    return absl::InvalidArgumentError("must be a finite number");
  }
  const double b = bound.get<double>();
  if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" ||
      key == "exclusiveMaximum") {
    if (!value.is_number()) return true;
    // Compared exactly for integers (doubles lose precision past 2^53).
    if (value.is_number_integer() && bound.is_number_integer()) {
      const bool neg = value.is_number_unsigned() ? false : value.get<int64_t>() < 0;
      const bool bneg = bound.is_number_unsigned() ? false : bound.get<int64_t>() < 0;
      int cmp;
      if (neg != bneg) {
        cmp = neg ? -1 : 1;
      } else if (neg) {
        const int64_t v = value.get<int64_t>(), w = bound.get<int64_t>();
        cmp = v < w ? -1 : (v > w ? 1 : 0);
      } else {
        const uint64_t v = value.get<uint64_t>(), w = bound.get<uint64_t>();
        cmp = v < w ? -1 : (v > w ? 1 : 0);
      }
      if (key == "minimum") return cmp >= 0;
      if (key == "maximum") return cmp <= 0;
      if (key == "exclusiveMinimum") return cmp > 0;
      return cmp < 0;
    }
    const double v = value.get<double>();
    if (key == "minimum") return v >= b;
    if (key == "maximum") return v <= b;
    if (key == "exclusiveMinimum") return v > b;
    return v < b;
  }
  if (b < 0 || std::floor(b) != b)
    return absl::InvalidArgumentError("must be a non-negative integer");
  if (key == "minLength" || key == "maxLength") {
    if (!value.is_string()) return true;
    const std::string text = value.get<std::string>();
    double code_points = 0;
    for (const char c : text) code_points += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return key == "minLength" ? code_points >= b : code_points <= b;
  }
  // minItems / maxItems
  if (!value.is_array()) return true;
  const double n = static_cast<double>(value.size());
  return key == "minItems" ? n >= b : n <= b;
}

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  absl::StatusOr<std::string> Convert() {
    absl::StatusOr<std::string> root = Visit(root_, "", 0);
    if (!root.ok()) return root.status();
    std::string out = absl::StrCat("root ::= ", *root, "\n", kPrimitives);
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

 private:
  absl::Status Error(const std::string& path, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: ", path.empty() ? "(root)" : path, ": ", message));
  }

  std::string NewRule(std::string body) {
    std::string name = absl::StrCat("s", rules_.size());
    rules_.push_back({name, std::move(body)});
    return name;
  }

  absl::StatusOr<std::string> Visit(const Json& schema, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) {
      return Error(path, absl::StrCat("nested deeper than ", kMaxSchemaDepth, " levels"));
    }
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::string("json-value");
      return Error(path, "the schema false can never be satisfied");
    }
    if (!schema.is_object()) return Error(path, "a schema must be an object or a boolean");
    std::optional<Json> without_no_ops;
    for (const char* keyword : kUnsupported) {
      if (!schema.contains(keyword)) continue;
      if (!ConstrainsNothing(keyword, schema)) {
        return Error(Join(path, keyword), "keyword is not supported");
      }
      if (!without_no_ops.has_value()) without_no_ops = schema;
      without_no_ops->erase(keyword);
    }
    if (without_no_ops.has_value()) return Visit(*without_no_ops, path, depth);
    std::vector<std::string> validation;  // keywords other than annotations
    for (const auto& [key, value] : schema.items()) {
      if (!IsAnnotation(key)) validation.push_back(key);
    }
    auto only = [&](std::initializer_list<absl::string_view> allowed) -> absl::Status {
      for (const std::string& key : validation) {
        bool ok = false;
        for (absl::string_view a : allowed) ok = ok || key == a;
        if (!ok) {
          return Error(Join(path, key),
                       absl::StrCat("not supported next to \"", *allowed.begin(), "\""));
        }
      }
      return absl::OkStatus();
    };
    if (schema.contains("$ref")) {
      if (absl::Status s = only({"$ref"}); !s.ok()) return s;
      return VisitRef(schema["$ref"], Join(path, "$ref"), depth);
    }
    for (const char* combinator : {"anyOf", "oneOf"}) {
      if (!schema.contains(combinator)) continue;
      if (absl::Status s = only({combinator}); !s.ok()) return s;
      const Json& branches = schema[combinator];
      const std::string where = Join(path, combinator);
      if (!branches.is_array() || branches.empty()) {
        return Error(where, "must be a non-empty array");
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        if (branches[i].is_boolean() && !branches[i].get<bool>()) continue;
        absl::StatusOr<std::string> alt =
            Visit(branches[i], absl::StrCat(where, ".", i), depth + 1);
        if (!alt.ok()) return alt.status();
        alts.push_back(*alt);
      }
      if (alts.empty()) return Error(where, "no branch can be satisfied");
      return NewRule(absl::StrJoin(alts, " | "));
    }
    if (schema.contains("allOf")) {
      if (absl::Status s = only({"allOf"}); !s.ok()) return s;
      const Json& all = schema["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return Error(Join(path, "allOf"), "only an array of exactly one schema is supported");
      }
      return Visit(all[0], Join(path, "allOf.0"), depth + 1);
    }
    if (schema.contains("const") || schema.contains("enum")) {
      return VisitEnum(schema, path);
    }
    return VisitTyped(schema, path, depth);
  }

  absl::StatusOr<std::string> VisitRef(const Json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Error(path, "must be a string");
    const std::string target = ref.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#') {
      return Error(path, absl::StrCat("only local references (\"#...\") are supported, not \"",
                                      target, "\""));
    }
    const Json* node = &root_;
    std::string pointer_path;
    if (target.size() > 1) {
      if (target[1] != '/') return Error(path, absl::StrCat("bad JSON pointer \"", target, "\""));
      for (const absl::string_view raw : absl::StrSplit(target.substr(2), '/')) {
        const std::string token = absl::StrReplaceAll(raw, {{"~1", "/"}, {"~0", "~"}});
        pointer_path = Join(pointer_path, token);
        if (node->is_object() && node->contains(token)) {
          node = &(*node)[token];
        } else if (node->is_array() && !token.empty() &&
                   token.find_first_not_of("0123456789") == std::string::npos && token.size() < 9 &&
                   std::stoul(token) < node->size()) {
          node = &(*node)[std::stoul(token)];
        } else {
          return Error(path, absl::StrCat("reference \"", target, "\" not found"));
        }
      }
    }
    // Named before it is visited, so that recursive references end here.
    const std::string name = absl::StrCat("s", rules_.size());
    rules_.push_back({name, ""});
    const size_t index = rules_.size() - 1;
    refs_.emplace(target, name);
    absl::StatusOr<std::string> body = Visit(*node, pointer_path, depth + 1);
    if (!body.ok()) return body.status();
    rules_[index].second = *body;
    return name;
  }

  absl::StatusOr<std::string> VisitEnum(const Json& schema, const std::string& path) {
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      if (type.is_string()) types.push_back(type.get<std::string>());
      if (type.is_array()) {
        for (const Json& t : type) {
          if (t.is_string()) types.push_back(t.get<std::string>());
        }
      }
    }
    std::vector<const Json*> values;
    std::string where = Join(path, "const");
    if (schema.contains("const")) {
      values.push_back(&schema["const"]);
    } else {
      where = Join(path, "enum");
      if (!schema["enum"].is_array() || schema["enum"].empty()) {
        return Error(where, "must be a non-empty array");
      }
      for (const Json& v : schema["enum"]) values.push_back(&v);
    }
    // The sibling keywords still apply to each value (JSON Schema: all keywords hold at once).
    // Those that can be checked on a value here filter the list; the rest are refused.
    std::vector<std::pair<std::string, const Json*>> checks;
    for (const auto& [key, value] : schema.items()) {
      if (IsAnnotation(key) || key == "enum" || key == "const" || key == "type" ||
          key == "nullable") {
        continue;
      }
      if (!IsValueCheck(key)) {
        return Error(
            Join(path, key),
            absl::StrCat("not supported next to \"", schema.contains("const") ? "const" : "enum",
                         "\" (supported there: type, minimum, maximum, exclusiveMinimum, "
                         "exclusiveMaximum, minLength, maxLength, minItems, maxItems, "
                         "required)"));
      }
      checks.push_back({key, &value});
    }
    std::vector<std::string> alts;
    for (const Json* value : values) {
      bool typed = types.empty();
      for (const std::string& t : types) typed = typed || MatchesType(*value, t);
      if (!typed) continue;
      bool valid = true;
      for (const auto& [key, bound] : checks) {
        absl::StatusOr<bool> holds = ValueSatisfies(*value, key, *bound);
        if (!holds.ok()) return Error(Join(path, key), holds.status().message());
        valid = valid && *holds;
      }
      if (!valid) continue;
      std::string text;
      if (!Serialize(*value, &text)) return Error(where, "value cannot be serialized");
      alts.push_back(GbnfLiteral(text));
    }
    if (alts.empty()) {
      return Error(where, "no value satisfies the schema's other keywords (type, bounds)");
    }
    return NewRule(absl::StrJoin(alts, " | "));
  }

  absl::StatusOr<std::string> VisitTyped(const Json& schema, const std::string& path, int depth) {
    std::vector<std::string> types;
    const std::string type_path = Join(path, "type");
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      if (type.is_string()) {
        types.push_back(type.get<std::string>());
      } else if (type.is_array() && !type.empty()) {
        for (const Json& t : type) {
          if (!t.is_string()) return Error(type_path, "must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(type_path, "must be a string or a non-empty array of strings");
      }
    } else {
      // No type: the kinds its keywords describe (a subset of what the schema allows).
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) {
          if (schema.contains(k)) return true;
        }
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
        types.push_back("number");
      }
      if (types.empty()) return std::string("json-value");
    }
    if (schema.contains("nullable")) {
      if (!schema["nullable"].is_boolean()) {
        return Error(Join(path, "nullable"), "must be a boolean");
      }
      if (schema["nullable"].get<bool>()) types.push_back("null");
    }
    std::vector<std::string> alts;
    absl::flat_hash_set<std::string> seen;
    for (const std::string& type : types) {
      if (!seen.insert(type).second) continue;
      absl::StatusOr<std::string> alt;
      if (type == "string") {
        alt = VisitString(schema, path);
      } else if (type == "integer") {
        alt = VisitNumber(schema, path, /*integer=*/true);
      } else if (type == "number") {
        alt = VisitNumber(schema, path, /*integer=*/false);
      } else if (type == "boolean") {
        alt = std::string("( \"true\" | \"false\" )");
      } else if (type == "null") {
        alt = std::string("\"null\"");
      } else if (type == "object") {
        alt = VisitObject(schema, path, depth);
      } else if (type == "array") {
        alt = VisitArray(schema, path, depth);
      } else {
        return Error(type_path, absl::StrCat("unknown type \"", type, "\""));
      }
      if (!alt.ok()) return alt.status();
      alts.push_back(*alt);
    }
    return alts.size() == 1 ? alts[0] : NewRule(absl::StrJoin(alts, " | "));
  }

  absl::StatusOr<std::optional<int64_t>> Count(const Json& schema, const std::string& path,
                                               const char* key) {
    if (!schema.contains(key)) return std::optional<int64_t>();
    const Json& v = schema[key];
    const std::string where = Join(path, key);
    if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>()) {
      return Error(where, "must be a non-negative integer");
    }
    if (v.get<double>() > kMaxRepetition) {
      return Error(where, absl::StrCat("above the supported limit of ", kMaxRepetition));
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }

  absl::StatusOr<std::string> VisitString(const Json& schema, const std::string& path) {
    std::optional<int64_t> min_length;
    std::optional<int64_t> max_length;
    {
      auto v = Count(schema, path, "minLength");
      if (!v.ok()) return v.status();
      min_length = *v;
      v = Count(schema, path, "maxLength");
      if (!v.ok()) return v.status();
      max_length = *v;
    }
    if (min_length && max_length && *min_length > *max_length) {
      return Error(Join(path, "maxLength"), "is smaller than minLength");
    }
    const bool lengths = min_length.has_value() || max_length.has_value();
    if (schema.contains("pattern")) {
      const std::string where = Join(path, "pattern");
      if (!schema["pattern"].is_string()) return Error(where, "must be a string");
      if (lengths || schema.contains("format")) {
        return Error(where, "pattern together with minLength/maxLength/format is not supported");
      }
      absl::StatusOr<std::string> regex =
          RegexToGbnf(schema["pattern"].get<std::string>(), {.json_string = true, .search = true});
      if (!regex.ok()) return Error(where, regex.status().message());
      return NewRule(absl::StrCat("\"\\\"\" ", *regex, " \"\\\"\""));
    }
    if (schema.contains("format")) {
      const std::string where = Join(path, "format");
      if (!schema["format"].is_string()) return Error(where, "must be a string");
      const std::string format = schema["format"].get<std::string>();
      std::string rule;
      if (format == "date") rule = "json-date";
      if (format == "time") rule = "json-time";
      if (format == "date-time") rule = "json-date \"T\" json-time";
      if (format == "uuid") rule = "json-uuid";
      if (format == "email") rule = "json-email";
      if (format == "ipv4") rule = "json-ipv4";
      if (!rule.empty()) {
        if (lengths) {
          return Error(where, "format together with minLength/maxLength is not supported");
        }
        return NewRule(absl::StrCat("\"\\\"\" ", rule, " \"\\\"\""));
      }
    }
    if (!lengths) return std::string("json-string");
    return NewRule(absl::StrCat("\"\\\"\" json-char{", min_length.value_or(0), ",",
                                max_length ? absl::StrCat(*max_length) : "", "} \"\\\"\""));
  }

  absl::StatusOr<std::string> VisitNumber(const Json& schema, const std::string& path,
                                          bool integer) {
    constexpr double kLimit = 9007199254740992.0;  // 2^53
    struct Bound {
      double value;
      bool exclusive;
    };
    std::optional<Bound> lo;
    std::optional<Bound> hi;
    auto read = [&](const char* key, bool is_lo, bool exclusive) -> absl::Status {
      if (!schema.contains(key)) return absl::OkStatus();
      const Json& v = schema[key];
      const std::string where = Join(path, key);
      if (v.is_boolean()) {
        if (!exclusive) return Error(where, "must be a number");
        // Draft 4: a flag on minimum / maximum.
        std::optional<Bound>& b = is_lo ? lo : hi;
        if (v.get<bool>() && b.has_value()) b->exclusive = true;
        return absl::OkStatus();
      }
      if (!v.is_number()) return Error(where, "must be a number");
      const double d = v.get<double>();
      if (!std::isfinite(d) || std::fabs(d) > kLimit) {
        return Error(where, "is outside the supported range (magnitude at most 2^53)");
      }
      std::optional<Bound>& b = is_lo ? lo : hi;
      const Bound nb{d, exclusive};
      // The tighter of minimum and exclusiveMinimum wins.
      if (!b.has_value()) {
        b = nb;
      } else if (is_lo ? (d > b->value || (d == b->value && exclusive))
                       : (d < b->value || (d == b->value && exclusive))) {
        b = nb;
      }
      return absl::OkStatus();
    };
    for (auto [key, is_lo, exclusive] :
         {std::tuple{"minimum", true, false}, std::tuple{"maximum", false, false},
          std::tuple{"exclusiveMinimum", true, true},
          std::tuple{"exclusiveMaximum", false, true}}) {
      if (absl::Status s = read(key, is_lo, exclusive); !s.ok()) return s;
    }
    if (!lo && !hi) return std::string(integer ? "json-int" : "json-number");
    const std::string where = Join(path, lo ? (hi ? "maximum" : "minimum") : "maximum");
    if (integer) {
      std::optional<int64_t> ilo;
      std::optional<int64_t> ihi;
      if (lo) {
        ilo =
            static_cast<int64_t>(lo->exclusive ? std::floor(lo->value) + 1 : std::ceil(lo->value));
      }
      if (hi) {
        ihi =
            static_cast<int64_t>(hi->exclusive ? std::ceil(hi->value) - 1 : std::floor(hi->value));
      }
      if (ilo && ihi && *ilo > *ihi) return Error(where, "no integer is within the bounds");
      return NewRule(IntegerRangeGbnf(ilo, ihi));
    }
    // Non-integer bounds are tightened inward to integers (valid, not complete).
    std::optional<RealBound> rlo;
    std::optional<RealBound> rhi;
    if (lo) {
      rlo = std::floor(lo->value) == lo->value
                ? RealBound{static_cast<int64_t>(lo->value), lo->exclusive}
                : RealBound{static_cast<int64_t>(std::ceil(lo->value)), false};
    }
    if (hi) {
      rhi = std::floor(hi->value) == hi->value
                ? RealBound{static_cast<int64_t>(hi->value), hi->exclusive}
                : RealBound{static_cast<int64_t>(std::floor(hi->value)), false};
    }
    std::string range = RealRangeGbnf(rlo, rhi);
    if (range.empty()) return Error(where, "no number is within the bounds");
    return NewRule(range);
  }

  absl::StatusOr<std::string> VisitObject(const Json& schema, const std::string& path, int depth) {
    const Json empty = Json::object();
    const Json& properties = schema.contains("properties") ? schema["properties"] : empty;
    if (!properties.is_object()) return Error(Join(path, "properties"), "must be an object");
    absl::flat_hash_set<std::string> required;
    if (schema.contains("required")) {
      const Json& req = schema["required"];
      if (!req.is_array()) return Error(Join(path, "required"), "must be an array of strings");
      for (const Json& name : req) {
        if (!name.is_string()) return Error(Join(path, "required"), "must be an array of strings");
        if (!properties.contains(name.get<std::string>())) {
          return Error(Join(path, "required"),
                       absl::StrCat("\"", name.get<std::string>(),
                                    "\" is not in properties (additional properties are not "
                                    "generated)"));
        }
        required.insert(name.get<std::string>());
      }
    }
    const Json* additional = nullptr;
    if (schema.contains("additionalProperties")) {
      additional = &schema["additionalProperties"];
      if (!additional->is_boolean() && !additional->is_object()) {
        return Error(Join(path, "additionalProperties"), "must be a boolean or a schema");
      }
    }
    struct Property {
      std::string key;  // GBNF literal of `"name": `
      std::string value;
      bool required;
    };
    std::vector<Property> props;
    for (const auto& [name, sub] : properties.items()) {
      const std::string where = Join(Join(path, "properties"), name);
      const bool is_required = required.contains(name);
      if (sub.is_boolean() && !sub.get<bool>()) {
        if (is_required) return Error(where, "required but its schema is false");
        continue;
      }
      absl::StatusOr<std::string> value = Visit(sub, where, depth + 1);
      if (!value.ok()) return value.status();
      std::string key;
      if (!Serialize(Json(name), &key)) return Error(where, "name cannot be serialized");
      props.push_back({GbnfLiteral(key + ": "), *value, is_required});
    }
    if (props.empty()) {
      if (additional == nullptr || (additional->is_boolean() && !additional->get<bool>())) {
        return std::string("\"{}\"");
      }
      std::string value = "json-value";
      if (additional->is_object()) {
        absl::StatusOr<std::string> v =
            Visit(*additional, Join(path, "additionalProperties"), depth + 1);
        if (!v.ok()) return v.status();
        value = *v;
      }
      return NewRule(absl::StrCat("\"{\" ( json-string \": \" ", value,
                                  " ( \", \" json-string \": \" ", value, " )* )? \"}\""));
    }
    // rest(i, emitted): the properties from i on, each preceded by ", " once one was emitted.
    std::vector<std::string> names[2];
    for (int e = 0; e < 2; ++e) names[e].resize(props.size() + 1);
    names[0][props.size()] = "\"\"";
    names[1][props.size()] = "\"\"";
    for (int i = static_cast<int>(props.size()) - 1; i >= 0; --i) {
      for (int e = 0; e < 2; ++e) {
        const Property& p = props[i];
        std::string present =
            absl::StrCat(e ? "\", \" " : "", p.key, " ", p.value, " ", names[1][i + 1]);
        std::string body = p.required ? present : absl::StrCat(present, " | ", names[e][i + 1]);
        names[e][i] = NewRule(std::move(body));
      }
    }
    return NewRule(absl::StrCat("\"{\" ", names[0][0], " \"}\""));
  }

  absl::StatusOr<std::string> VisitArray(const Json& schema, const std::string& path, int depth) {
    std::vector<std::string> prefix;
    const Json* items = nullptr;
    bool items_false = false;
    auto visit_prefix = [&](const Json& list, const std::string& where) -> absl::Status {
      if (!list.is_array()) return Error(where, "must be an array of schemas");
      for (size_t i = 0; i < list.size(); ++i) {
        absl::StatusOr<std::string> v = Visit(list[i], absl::StrCat(where, ".", i), depth + 1);
        if (!v.ok()) return v.status();
        prefix.push_back(*v);
      }
      return absl::OkStatus();
    };
    if (schema.contains("prefixItems")) {
      if (absl::Status s = visit_prefix(schema["prefixItems"], Join(path, "prefixItems"));
          !s.ok()) {
        return s;
      }
    }
    if (schema.contains("items")) {
      const Json& it = schema["items"];
      if (it.is_array()) {
        if (!prefix.empty()) return Error(Join(path, "items"), "array form next to prefixItems");
        if (absl::Status s = visit_prefix(it, Join(path, "items")); !s.ok()) return s;
      } else if (it.is_boolean() && !it.get<bool>()) {
        items_false = true;
      } else {
        items = &it;
      }
    }
    std::optional<int64_t> min_items;
    std::optional<int64_t> max_items;
    {
      auto v = Count(schema, path, "minItems");
      if (!v.ok()) return v.status();
      min_items = *v;
      v = Count(schema, path, "maxItems");
      if (!v.ok()) return v.status();
      max_items = *v;
    }
    const int64_t min = min_items.value_or(0);
    int64_t max = max_items.value_or(-1);
    if (items_false) {
      max = max < 0 ? static_cast<int64_t>(prefix.size())
                    : std::min<int64_t>(max, static_cast<int64_t>(prefix.size()));
    }
    if (max >= 0 && min > max) {
      return Error(Join(path, "minItems"), "no array length satisfies the bounds");
    }
    std::string item = "json-value";
    if (items != nullptr) {
      absl::StatusOr<std::string> v = Visit(*items, Join(path, "items"), depth + 1);
      if (!v.ok()) return v.status();
      item = *v;
    }
    // Explicit positions, then a repetition of `item`.
    const int64_t explicit_count = std::max<int64_t>(static_cast<int64_t>(prefix.size()), min);
    const int64_t positions = max >= 0 ? std::min(explicit_count, max) : explicit_count;
    std::string tail;
    if (max < 0) {
      tail = positions == 0 ? absl::StrCat("( ", item, " ( \", \" ", item, " )* )?")
                            : absl::StrCat("( \", \" ", item, " )*");
    } else if (max > positions) {
      const int64_t extra = max - positions;
      tail = positions == 0
                 ? absl::StrCat("( ", item, " ( \", \" ", item, " ){0,", extra - 1, "} )?")
                 : absl::StrCat("( \", \" ", item, " ){0,", extra, "}");
    } else {
      tail = "\"\"";
    }
    std::string next = NewRule(tail);
    for (int64_t i = positions - 1; i >= 0; --i) {
      const std::string& element = i < static_cast<int64_t>(prefix.size()) ? prefix[i] : item;
      std::string present = absl::StrCat(i > 0 ? "\", \" " : "", element, " ", next);
      next = NewRule(i < min ? present : absl::StrCat(present, " | \"\""));
    }
    return NewRule(absl::StrCat("\"[\" ", next, " \"]\""));
  }

  const Json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  absl::flat_hash_map<std::string, std::string> refs_;
};

}  // namespace

std::string GbnfLiteral(absl::string_view bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\r') {
      out += "\\r";
      continue;
    }
    if (c == '\t') {
      out += "\\t";
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

absl::StatusOr<std::string> JsonSchemaToGbnf(absl::string_view schema_text) {
  // Linear in the schema's size (nlohmann's own ordered parser is quadratic in an object's keys)
  // and bounded in depth, whatever the client sent.
  absl::StatusOr<Json> schema = common::ParseOrderedJson(
      std::string_view(schema_text.data(), schema_text.size()),
      {.max_depth = 256, .max_values = int64_t{1} << 20, .what = "json_schema: the schema"});
  if (!schema.ok()) return schema.status();
  return Converter(*schema).Convert();
}

std::string JsonObjectGbnf() { return absl::StrCat("root ::= json-object\n", kPrimitives); }

}  // namespace llmserve::worker::structured
