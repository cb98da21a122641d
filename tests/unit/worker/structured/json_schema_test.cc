// The JSON Schema and JSON-mode frontends: the layout, accepted and rejected documents,
// errors naming the JSON path, and random walks over a real vocabulary whose outputs parse and
// satisfy the schema (checked by hand).
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/sanitizers.h"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::Accepts;
using testing::ByteVocabulary;
using ::testing::HasSubstr;
using testing::Make;

std::shared_ptr<const CompiledGrammar> Schema(const std::string& schema,
                                              std::shared_ptr<const TokenVocabulary> vocab) {
  return testing::CompileOk(Constraint::Kind::kJsonSchema, schema, std::move(vocab));
}

std::string SchemaError(const std::string& schema) {
  return testing::CompileError(Constraint::Kind::kJsonSchema, schema);
}

TEST(JsonSchemaTest, ObjectLayoutOrderAndOptionalProperties) {
  auto g = Schema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
      "required": ["name", "ok"]})",
                  ByteVocabulary());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"({"name": "Al", "age": 3, "ok": true})"));
  EXPECT_TRUE(Accepts(g, R"({"name": "", "ok": false})"));
  EXPECT_FALSE(Accepts(g, R"({"name": "Al", "age": 3})"));              // ok is required
  EXPECT_FALSE(Accepts(g, R"({"age": 3, "name": "Al", "ok": true})"));  // schema order
  EXPECT_FALSE(Accepts(g, R"({"name":"Al", "ok": true})"));             // layout
  EXPECT_FALSE(Accepts(g, R"({"name": "Al", "ok": true, "x": 1})"));    // no extras
  EXPECT_FALSE(Accepts(g, R"( {"name": "Al", "ok": true})"));
}

TEST(JsonSchemaTest, Strings) {
  auto g = Schema(R"({"type": "string", "minLength": 2, "maxLength": 3})", ByteVocabulary());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"("ab")"));
  EXPECT_TRUE(Accepts(g, R"("a\nb")"));
  EXPECT_TRUE(Accepts(g, "\"\xC3\xA9\xE2\x82\xAC\""));  // code points, not bytes
  EXPECT_FALSE(Accepts(g, R"("a")"));
  EXPECT_FALSE(Accepts(g, R"("abcd")"));
  EXPECT_FALSE(Accepts(g, "\"a\nb\""));      // raw control characters must be escaped
  EXPECT_FALSE(Accepts(g, "\"a\xC3\""));     // invalid UTF-8
  EXPECT_FALSE(Accepts(g, R"("a\ud800")"));  // lone surrogate escape
  auto any = Schema(R"({"type": "string"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(any, R"("q\"\\\/\b\f\r\t\u00e9")"));
  EXPECT_FALSE(Accepts(any, R"("\x")"));
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  struct Range {
    std::string schema;
    int lo;
    int hi;
  };
  const std::vector<Range> ranges = {
      {R"({"type": "integer", "minimum": -37, "maximum": 142})", -37, 142},
      {R"({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 100})", 6, 99},
      {R"({"type": "integer", "minimum": 0, "maximum": 0})", 0, 0},
      {R"({"type": "integer", "minimum": -250, "maximum": -7})", -250, -7},
      {R"({"type": "integer", "minimum": 1.5, "maximum": 19.9})", 2, 19},
  };
  for (const Range& r : ranges) {
    auto g = Schema(r.schema, ByteVocabulary());
    ASSERT_NE(g, nullptr);
    for (int v = -400; v <= 400; ++v) {
      EXPECT_EQ(Accepts(g, std::to_string(v)), v >= r.lo && v <= r.hi) << r.schema << " " << v;
    }
    EXPECT_FALSE(Accepts(g, "-0"));
    EXPECT_FALSE(Accepts(g, "007"));
  }
  auto open = Schema(R"({"type": "integer", "minimum": 95})", ByteVocabulary());
  EXPECT_TRUE(Accepts(open, "95"));
  EXPECT_TRUE(Accepts(open, "123456789"));
  EXPECT_FALSE(Accepts(open, "94"));
  EXPECT_FALSE(Accepts(open, "-100"));
}

TEST(JsonSchemaTest, NumberRanges) {
  auto g = Schema(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 10})", ByteVocabulary());
  ASSERT_NE(g, nullptr);
  for (const char* yes : {"0.5", "0.001", "1", "9.99", "10", "10.000", "3.25"}) {
    EXPECT_TRUE(Accepts(g, yes)) << yes;
  }
  for (const char* no : {"0", "0.0", "-1", "10.01", "11", "-0.5", "1e3", "01"}) {
    EXPECT_FALSE(Accepts(g, no)) << no;
  }
  auto neg =
      Schema(R"({"type": "number", "minimum": -2, "exclusiveMaximum": -1})", ByteVocabulary());
  ASSERT_NE(neg, nullptr);
  for (const char* yes : {"-2", "-1.5", "-1.001", "-2.0"}) EXPECT_TRUE(Accepts(neg, yes)) << yes;
  for (const char* no : {"-1", "-2.5", "0", "-1.0"}) EXPECT_FALSE(Accepts(neg, no)) << no;
  auto any = Schema(R"({"type": "number"})", ByteVocabulary());
  for (const char* yes : {"0", "-1.5e+10", "3E2", "0.25"}) EXPECT_TRUE(Accepts(any, yes)) << yes;
  for (const char* no : {"+1", "1.", ".5", "01", "1e"}) EXPECT_FALSE(Accepts(any, no)) << no;
}

TEST(JsonSchemaTest, EnumConstUnionsNullableAndFormats) {
  auto e = Schema(R"({"enum": ["red", 7, null, {"a": [1, true]}]})", ByteVocabulary());
  EXPECT_TRUE(Accepts(e, R"("red")"));
  EXPECT_TRUE(Accepts(e, "7"));
  EXPECT_TRUE(Accepts(e, "null"));
  EXPECT_TRUE(Accepts(e, R"({"a": [1, true]})"));
  EXPECT_FALSE(Accepts(e, R"("blue")"));
  auto c = Schema(R"({"const": "x\"y"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(c, R"("x\"y")"));
  auto u = Schema(R"({"type": ["integer", "null"]})", ByteVocabulary());
  EXPECT_TRUE(Accepts(u, "12"));
  EXPECT_TRUE(Accepts(u, "null"));
  EXPECT_FALSE(Accepts(u, "true"));
  auto n = Schema(R"({"type": "string", "nullable": true})", ByteVocabulary());
  EXPECT_TRUE(Accepts(n, "null"));
  auto a =
      Schema(R"({"anyOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "integer"}}]})",
             ByteVocabulary());
  EXPECT_TRUE(Accepts(a, "true"));
  EXPECT_TRUE(Accepts(a, "[1, 2]"));
  EXPECT_FALSE(Accepts(a, "[true]"));
  auto d = Schema(R"({"type": "string", "format": "date-time"})", ByteVocabulary());
  EXPECT_FALSE(Accepts(d, R"("2024-02-29T23:59:60Z")"));
  EXPECT_TRUE(Accepts(d, R"("2024-02-29T23:59:59.123+05:30")"));
  EXPECT_FALSE(Accepts(d, R"("2024-13-01T00:00:00Z")"));
  auto ip = Schema(R"({"type": "string", "format": "ipv4"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(ip, R"("192.168.0.255")"));
  EXPECT_FALSE(Accepts(ip, R"("256.1.1.1")"));
  auto uuid = Schema(R"({"type": "string", "format": "uuid"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  auto email = Schema(R"({"type": "string", "format": "email"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(email, R"("a.b@c-d.org")"));
  EXPECT_FALSE(Accepts(email, R"("a@b")"));
  auto p = Schema(R"({"type": "string", "pattern": "^[a-z]+\"\\d$"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(p, R"("ab\"1")"));
  EXPECT_FALSE(Accepts(p, R"("ab"1")"));
  auto search = Schema(R"({"type": "string", "pattern": "\\d"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(search, R"("ab1cd")"));
  EXPECT_FALSE(Accepts(search, R"("abcd")"));
}

TEST(JsonSchemaTest, ArraysAndTuples) {
  auto g =
      Schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
             ByteVocabulary());
  EXPECT_TRUE(Accepts(g, "[1, 2]"));
  EXPECT_TRUE(Accepts(g, "[1, 2, 3]"));
  EXPECT_FALSE(Accepts(g, "[1]"));
  EXPECT_FALSE(Accepts(g, "[1, 2, 3, 4]"));
  EXPECT_FALSE(Accepts(g, "[1,2]"));
  auto t = Schema(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}],
                      "items": false})",
                  ByteVocabulary());
  EXPECT_TRUE(Accepts(t, "[]"));
  EXPECT_TRUE(Accepts(t, R"(["a"])"));
  EXPECT_TRUE(Accepts(t, R"(["a", null])"));
  EXPECT_FALSE(Accepts(t, R"(["a", null, 1])"));
  EXPECT_FALSE(Accepts(t, "[null]"));
  auto any = Schema(R"({"type": "array"})", ByteVocabulary());
  EXPECT_TRUE(Accepts(any, R"([1, "a", {"b": []}])"));
}

TEST(JsonSchemaTest, RefsDefsAndRecursion) {
  auto g = Schema(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"},
      {"type": "null"}]}}, "required": ["v", "next"]}}})",
                  ByteVocabulary());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"({"v": 1, "next": null})"));
  EXPECT_TRUE(Accepts(g, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(Accepts(g, R"({"v": 1})"));
  auto map = Schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})",
                    ByteVocabulary());
  EXPECT_TRUE(Accepts(map, R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(Accepts(map, "{}"));
  EXPECT_FALSE(Accepts(map, R"({"a": "x"})"));
  auto any = Schema("{}", ByteVocabulary());
  EXPECT_TRUE(Accepts(any, R"([{"a": null}, 1.5, "s"])"));
}

TEST(JsonSchemaTest, JsonModeIsAnyObject) {
  GrammarCompiler compiler(ByteVocabulary());
  auto g = compiler.Compile(Make(Constraint::Kind::kJsonObject, ""));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Accepts(*g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(Accepts(*g, "{}"));
  EXPECT_FALSE(Accepts(*g, "[]"));
  EXPECT_FALSE(Accepts(*g, "{ }"));
}

TEST(JsonSchemaTest, ErrorsNameThePath) {
  EXPECT_THAT(SchemaError(R"({"type": "object", "properties": {"age": {"type": "int"}}})"),
              HasSubstr("json_schema: properties.age.type: unknown type \"int\""));
  EXPECT_THAT(SchemaError(R"({"properties": {"age": {"type": "integer", "minimum": "x"}}})"),
              HasSubstr("properties.age.minimum: must be a number"));
  EXPECT_THAT(SchemaError(R"({"type": "array", "items": {"not": {}}})"),
              HasSubstr("items.not: keyword is not supported"));
  // Keywords the grammar cannot enforce, each with a value that constrains.
  for (const auto& [kw, value] : std::vector<std::pair<std::string, std::string>>{
           {"if", R"({"required": ["a"]}, "then": {"minProperties": 1})"},
           {"patternProperties", R"({"^a": {"type": "integer"}})"},
           {"uniqueItems", "true"},
           {"multipleOf", "2"},
           {"dependentRequired", R"({"a": ["b"]})"},
           {"minProperties", "1"},
           {"maxProperties", "3"},
           {"propertyNames", R"({"pattern": "^a"})"},
           {"unevaluatedProperties", "false"},
           {"not", R"({"type": "object"})"}}) {
    EXPECT_THAT(SchemaError(absl::StrCat(R"({"type": "object", ")", kw, R"(": )", value, "}")),
                HasSubstr(absl::StrCat(kw, ": keyword is not supported")))
        << kw;
  }
  EXPECT_THAT(SchemaError("{not json"), HasSubstr("not valid JSON"));
  EXPECT_THAT(SchemaError(R"({"$ref": "#/$defs/missing"})"), HasSubstr("not found"));
  EXPECT_THAT(SchemaError(R"({"$ref": "http://x/y"})"), HasSubstr("only local references"));
  EXPECT_THAT(SchemaError(R"({"$ref": "#/$defs/a", "$defs": {"a": {"type": "object",
      "properties": {"b": {"$ref": "#/$defs/a"}}, "required": ["b"]}}})"),
              HasSubstr("language is empty"));
  EXPECT_THAT(SchemaError(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
              HasSubstr("no integer"));
  EXPECT_THAT(SchemaError(R"({"type": "object", "required": ["x"]})"),
              HasSubstr("required: \"x\" is not in properties"));
  EXPECT_THAT(SchemaError(R"J({"type": "string", "pattern": "(?=a)"})J"),
              HasSubstr("pattern: regex: position"));
  EXPECT_THAT(SchemaError(R"({"allOf": [{}, {}]})"), HasSubstr("allOf"));
  EXPECT_THAT(SchemaError("false"), HasSubstr("can never be satisfied"));
}

// Keywords the grammar cannot enforce are accepted where their value leaves every instance valid
// (Pydantic writes "uniqueItems": false, for one): the grammar is then the one without them.
TEST(JsonSchemaTest, KeywordsThatConstrainNothingAreAccepted) {
  const std::string array = R"("type": "array", "items": {"type": "integer"})";
  const std::string object =
      R"("type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}})";
  for (const std::string& extra :
       {std::string(R"("uniqueItems": false)"), std::string(R"("minContains": 2)"),
        std::string(R"("maxContains": 0, "unevaluatedItems": true, "additionalItems": {})")}) {
    SCOPED_TRACE(extra);
    auto g = Schema(absl::StrCat("{", array, ", ", extra, "}"), ByteVocabulary());
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(Accepts(g, "[1, 1, 2]"));  // duplicates: uniqueItems is false
    EXPECT_TRUE(Accepts(g, "[]"));
    EXPECT_FALSE(Accepts(g, R"(["x"])"));  // the items schema still holds
  }
  for (const std::string& extra : {
           std::string(R"("minProperties": 0)"),
           std::string(R"("if": {"required": ["a"]})"),
           std::string(R"("then": {"required": ["b"]}, "else": false)"),
           std::string(R"("if": {"required": ["a"]}, "then": {"title": "t"}, "else": true)"),
           std::string(R"("not": false)"),
           std::string(R"("dependentRequired": {}, "dependentSchemas": {}, "dependencies": {})"),
           std::string(R"("patternProperties": {}, "propertyNames": true)"),
           std::string(R"("unevaluatedProperties": {"description": "d"})"),
           std::string(R"("contentSchema": {"type": "integer"})"),
       }) {
    SCOPED_TRACE(extra);
    auto g = Schema(absl::StrCat("{", object, ", ", extra, "}"), ByteVocabulary());
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(Accepts(g, "{}"));
    EXPECT_TRUE(Accepts(g, R"({"a": 1})"));
    EXPECT_TRUE(Accepts(g, R"({"b": "x"})"));
    EXPECT_FALSE(Accepts(g, R"({"a": "x"})"));  // the properties still hold
    EXPECT_FALSE(Accepts(g, R"({"c": 1})"));    // and additionalProperties' default, false
  }
  // Nested, and beside $ref, which admits no other validation keyword.
  auto g = Schema(R"({"$defs": {"n": {"type": "integer"}}, "type": "object",
      "properties": {"xs": {"type": "array", "items": {"$ref": "#/$defs/n", "uniqueItems": false},
                            "uniqueItems": false}}, "required": ["xs"]})",
                  ByteVocabulary());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"({"xs": [3, 3]})"));
  EXPECT_FALSE(Accepts(g, R"({"xs": [true]})"));
}

// Random walks over the real vocabulary: outputs parse and satisfy the schema.
TEST(JsonSchemaTest, RandomWalksSatisfyTheSchema) {
  auto vocab = testing::RealVocabulary("deepseek-llm");
  if (vocab == nullptr) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  auto g = Schema(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "color": {"enum": ["red", "green", "blue"]},
      "score": {"type": "number", "minimum": -5, "maximum": 5},
      "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,6}$"},
               "maxItems": 4},
      "zip": {"type": "string", "pattern": "^\\d{5}$"},
      "ok": {"type": "boolean"}},
      "required": ["name", "age", "color", "tags"]})",
                  vocab);
  ASSERT_NE(g, nullptr);
  const std::regex tag_re("[a-z]{1,6}");
  const std::regex zip_re("\\d{5}");
  // Each walk masks a 100,015-token vocabulary at every step: 40 walks took 26 s under ASan, so
  // the sanitizer builds walk a quarter of them.
  const uint32_t walks = ::llmserve::testing::kSanitizerSlowdown > 1 ? 10 : 40;
  for (uint32_t seed = 0; seed < walks; ++seed) {
    std::optional<std::string> out = testing::RandomWalk(g, seed, 600);
    ASSERT_TRUE(out.has_value()) << "seed " << seed;
    const nlohmann::json doc = nlohmann::json::parse(*out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << *out;
    ASSERT_TRUE(doc.is_object()) << *out;
    for (const char* key : {"name", "age", "color", "tags"}) {
      EXPECT_TRUE(doc.contains(key)) << key << " missing in " << *out;
    }
    for (const auto& [key, value] : doc.items()) {
      EXPECT_TRUE(key == "name" || key == "age" || key == "color" || key == "score" ||
                  key == "tags" || key == "zip" || key == "ok")
          << *out;
    }
    ASSERT_TRUE(doc["name"].is_string());
    EXPECT_LE(nlohmann::json(doc["name"]).get<std::string>().size(), 12u * 4);
    ASSERT_TRUE(doc["age"].is_number_integer()) << *out;
    EXPECT_GE(doc["age"].get<int64_t>(), 0);
    EXPECT_LE(doc["age"].get<int64_t>(), 130);
    const std::string color = doc["color"].get<std::string>();
    EXPECT_TRUE(color == "red" || color == "green" || color == "blue");
    if (doc.contains("score")) {
      ASSERT_TRUE(doc["score"].is_number()) << *out;
      EXPECT_GE(doc["score"].get<double>(), -5);
      EXPECT_LE(doc["score"].get<double>(), 5);
    }
    ASSERT_TRUE(doc["tags"].is_array());
    EXPECT_LE(doc["tags"].size(), 4u);
    for (const auto& tag : doc["tags"]) {
      ASSERT_TRUE(tag.is_string());
      EXPECT_TRUE(std::regex_match(tag.get<std::string>(), tag_re)) << *out;
    }
    if (doc.contains("zip")) {
      EXPECT_TRUE(std::regex_match(doc["zip"].get<std::string>(), zip_re)) << *out;
    }
    if (doc.contains("ok")) {
      EXPECT_TRUE(doc["ok"].is_boolean());
    }
  }
}

TEST(JsonSchemaTest, RandomWalksInJsonModeParse) {
  auto vocab = testing::RealVocabulary("llama-spm");
  if (vocab == nullptr) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  GrammarCompiler compiler(vocab);
  auto g = compiler.Compile(Make(Constraint::Kind::kJsonObject, ""));
  ASSERT_TRUE(g.ok());
  // A walk masks a 32,000-token vocabulary at each of up to 3000 steps: 30 walks took 93 s under
  // ASan, the longest test of make test-sanitize, so the sanitizer builds walk a fifth of them.
  const uint32_t walks = ::llmserve::testing::kSanitizerSlowdown > 1 ? 6 : 30;
  int finished = 0;
  for (uint32_t seed = 0; seed < walks; ++seed) {
    std::optional<std::string> out = testing::RandomWalk(*g, seed, 3000);
    if (!out.has_value()) continue;  // unbounded strings: a walk may run long
    ++finished;
    const nlohmann::json doc = nlohmann::json::parse(*out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << *out;
    EXPECT_TRUE(doc.is_object());
  }
  EXPECT_GT(finished, static_cast<int>(walks / 3));
}

}  // namespace
}  // namespace llmserve::worker::structured
