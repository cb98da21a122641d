// The OTLP encoding read back by protobuf's own wire-format parser (UnknownFieldSet), field by
// field against the numbers of opentelemetry-proto; and the exporter's configuration parsing.

#include "common/tracing/otlp_encoding.h"

#include <zlib.h>

#include <cstring>
#include <string>

#include "common/tracing/otlp_http_exporter.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"

namespace llmserve::common::tracing {
namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// The fields numbered `number` of `set`.
std::vector<const UnknownField*> Fields(const UnknownFieldSet& set, int number) {
  std::vector<const UnknownField*> fields;
  for (int i = 0; i < set.field_count(); ++i) {
    if (set.field(i).number() == number) fields.push_back(&set.field(i));
  }
  return fields;
}

// UnknownFieldSet cannot be copied: messages are held by pointer.
using Set = std::shared_ptr<UnknownFieldSet>;

Set Message(const UnknownField* field) {
  auto set = std::make_shared<UnknownFieldSet>();
  EXPECT_TRUE(set->ParseFromString(field->length_delimited()));
  return set;
}

// {key: AnyValue message} of a repeated KeyValue field.
std::map<std::string, Set> Attributes(const UnknownFieldSet& set, int number) {
  std::map<std::string, Set> attributes;
  for (const UnknownField* field : Fields(set, number)) {
    Set key_value = Message(field);
    attributes[Fields(*key_value, 1)[0]->length_delimited()] = Message(Fields(*key_value, 2)[0]);
  }
  return attributes;
}

TEST(OtlpEncodingTest, EverySpanFieldIsWhereOpenTelemetryProtoPutsIt) {
  SpanData span;
  span.context =
      *ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v");
  span.parent_span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  span.name = "chat tiny";
  span.kind = SpanKind::kServer;
  span.start = absl::FromUnixNanos(1000000000123);
  span.end = absl::FromUnixNanos(1000000000456);
  span.attributes = {{"s", std::string("text")},
                     {"i", int64_t{-7}},
                     {"d", 0.5},
                     {"b", true},
                     {"a", std::vector<std::string>{"stop", "length"}}};
  span.events = {{absl::FromUnixNanos(1000000000200), "first_token", {{"n", int64_t{1}}}}};
  span.error = true;
  span.status_message = "boom";
  const std::string encoded = EncodeExportTraceServiceRequest(
      {{"service.name", std::string("llmserve-gateway")}}, {"llmserve", "1.2"}, {span});

  UnknownFieldSet request;
  ASSERT_TRUE(request.ParseFromString(encoded));
  Set resource_spans = Message(Fields(request, 1)[0]);
  Set resource = Message(Fields(*resource_spans, 1)[0]);
  EXPECT_EQ(Fields(*Attributes(*resource, 1)["service.name"], 1)[0]->length_delimited(),
            "llmserve-gateway");
  Set scope_spans = Message(Fields(*resource_spans, 2)[0]);
  Set scope = Message(Fields(*scope_spans, 1)[0]);
  EXPECT_EQ(Fields(*scope, 1)[0]->length_delimited(), "llmserve");
  EXPECT_EQ(Fields(*scope, 2)[0]->length_delimited(), "1.2");
  ASSERT_EQ(Fields(*scope_spans, 2).size(), 1u);
  Set s = Message(Fields(*scope_spans, 2)[0]);
  EXPECT_EQ(Fields(*s, 1)[0]->length_delimited(),
            std::string("\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36", 16));
  EXPECT_EQ(Fields(*s, 2)[0]->length_delimited(),
            std::string("\x00\xf0\x67\xaa\x0b\xa9\x02\xb7", 8));
  EXPECT_EQ(Fields(*s, 3)[0]->length_delimited(), "k=v");
  EXPECT_EQ(Fields(*s, 4)[0]->length_delimited(), std::string("\1\2\3\4\5\6\7\10", 8));
  EXPECT_EQ(Fields(*s, 5)[0]->length_delimited(), "chat tiny");
  EXPECT_EQ(Fields(*s, 6)[0]->varint(), 2u);  // SPAN_KIND_SERVER
  EXPECT_EQ(Fields(*s, 7)[0]->type(), UnknownField::TYPE_FIXED64);
  EXPECT_EQ(Fields(*s, 7)[0]->fixed64(), 1000000000123u);
  EXPECT_EQ(Fields(*s, 8)[0]->fixed64(), 1000000000456u);
  EXPECT_EQ(Fields(*s, 16)[0]->type(), UnknownField::TYPE_FIXED32);
  EXPECT_EQ(Fields(*s, 16)[0]->fixed32(), 1u);
  std::map<std::string, Set> attributes = Attributes(*s, 9);
  EXPECT_EQ(Fields(*attributes["s"], 1)[0]->length_delimited(), "text");
  EXPECT_EQ(static_cast<int64_t>(Fields(*attributes["i"], 3)[0]->varint()), -7);
  double d = 0;
  const uint64_t bits = Fields(*attributes["d"], 4)[0]->fixed64();
  std::memcpy(&d, &bits, sizeof(d));
  EXPECT_EQ(d, 0.5);
  EXPECT_EQ(Fields(*attributes["b"], 2)[0]->varint(), 1u);
  Set array = Message(Fields(*attributes["a"], 5)[0]);
  ASSERT_EQ(Fields(*array, 1).size(), 2u);
  EXPECT_EQ(Fields(*Message(Fields(*array, 1)[1]), 1)[0]->length_delimited(), "length");
  Set event = Message(Fields(*s, 11)[0]);
  EXPECT_EQ(Fields(*event, 1)[0]->fixed64(), 1000000000200u);
  EXPECT_EQ(Fields(*event, 2)[0]->length_delimited(), "first_token");
  EXPECT_EQ(Fields(*Attributes(*event, 3)["n"], 3)[0]->varint(), 1u);
  Set status = Message(Fields(*s, 15)[0]);
  EXPECT_EQ(Fields(*status, 2)[0]->length_delimited(), "boom");
  EXPECT_EQ(Fields(*status, 3)[0]->varint(), 2u);  // STATUS_CODE_ERROR
}

TEST(OtlpEncodingTest, ARootSpanHasNoParentAndAnOkSpanNoStatus) {
  SpanData span;
  span.context.trace_id = NewTraceId();
  span.context.span_id = NewSpanId();
  span.name = "root";
  UnknownFieldSet request;
  ASSERT_TRUE(request.ParseFromString(EncodeExportTraceServiceRequest({}, {"x", ""}, {span})));
  Set scope_spans = Message(Fields(*Message(Fields(request, 1)[0]), 2)[0]);
  Set s = Message(Fields(*scope_spans, 2)[0]);
  EXPECT_TRUE(Fields(*s, 4).empty());
  EXPECT_TRUE(Fields(*s, 15).empty());
}

TEST(OtlpEndpointTest, ParsesUrlsAndRefusesWhatIsNotOne) {
  OtlpEndpoint plain = *ParseOtlpEndpoint("http://collector:4318");
  EXPECT_FALSE(plain.tls);
  EXPECT_EQ(plain.host, "collector");
  EXPECT_EQ(plain.port, "4318");
  EXPECT_EQ(plain.target, "/v1/traces");
  OtlpEndpoint langfuse =
      *ParseOtlpEndpoint("https://cloud.langfuse.com/api/public/otel/v1/traces");
  EXPECT_TRUE(langfuse.tls);
  EXPECT_EQ(langfuse.port, "443");
  EXPECT_EQ(langfuse.target, "/api/public/otel/v1/traces");
  OtlpEndpoint v6 = *ParseOtlpEndpoint("http://[::1]:4318/v1/traces");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, "4318");
  for (const char* bad : {"collector:4318", "grpc://c:4317", "http://:4318", "http://c:0",
                          "http://c:99999", "http://user:pw@c:4318", "http://[::1:4318"}) {
    EXPECT_FALSE(ParseOtlpEndpoint(bad).ok()) << bad;
  }
}

TEST(OtlpHeadersTest, ParsesTheEnvironmentVariableFormWithPercentEncoding) {
  auto headers = *ParseOtlpHeaders("Authorization=Basic%20cGs6c2s=, x-tenant = a ");
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers[0].first, "Authorization");
  EXPECT_EQ(headers[0].second, "Basic cGs6c2s=");
  EXPECT_EQ(headers[1].first, "x-tenant");
  EXPECT_EQ(headers[1].second, "a");
  EXPECT_TRUE(ParseOtlpHeaders("").ok());
  EXPECT_FALSE(ParseOtlpHeaders("novalue").ok());
  EXPECT_FALSE(ParseOtlpHeaders("bad name=x").ok());
  EXPECT_FALSE(ParseOtlpHeaders("x=a%0d%0aInjected: 1").ok());
}

TEST(GzipTest, InflatesBackToTheInput) {
  const std::string input(10000, 'x');
  std::string compressed = *Gzip(input);
  EXPECT_LT(compressed.size(), input.size());
  EXPECT_EQ(static_cast<unsigned char>(compressed[0]), 0x1f);  // gzip magic
  z_stream stream{};
  ASSERT_EQ(inflateInit2(&stream, 15 + 16), Z_OK);
  std::string out(input.size() + 16, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  ASSERT_EQ(inflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  inflateEnd(&stream);
  EXPECT_EQ(out, input);
}

}  // namespace
}  // namespace llmserve::common::tracing
