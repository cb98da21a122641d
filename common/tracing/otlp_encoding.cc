#include "common/tracing/otlp_encoding.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/time/time.h"

namespace llmserve::common::tracing {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(uint64_t value, std::string& out) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void PutTag(uint32_t field, WireType type, std::string& out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | type, out);
}

void PutVarintField(uint32_t field, uint64_t value, std::string& out) {
  PutTag(field, kVarint, out);
  PutVarint(value, out);
}

void PutFixed64Field(uint32_t field, uint64_t value, std::string& out) {
  PutTag(field, kFixed64, out);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void PutFixed32Field(uint32_t field, uint32_t value, std::string& out) {
  PutTag(field, kFixed32, out);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void PutBytesField(uint32_t field, absl::string_view bytes, std::string& out) {
  PutTag(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out.append(bytes.data(), bytes.size());
}

template <size_t N>
absl::string_view Bytes(const std::array<uint8_t, N>& id) {
  return absl::string_view(reinterpret_cast<const char*>(id.data()), N);
}

uint64_t UnixNanos(absl::Time time) { return static_cast<uint64_t>(absl::ToUnixNanos(time)); }

// common.proto AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4,
// array_value 5 (ArrayValue: repeated AnyValue values = 1).
std::string EncodeAnyValue(const AttributeValue& value) {
  std::string out;
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          PutBytesField(1, v, out);
        } else if constexpr (std::is_same_v<T, bool>) {
          PutVarintField(2, v ? 1 : 0, out);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          PutVarintField(3, static_cast<uint64_t>(v), out);
        } else if constexpr (std::is_same_v<T, double>) {
          uint64_t bits = 0;
          std::memcpy(&bits, &v, sizeof(bits));
          PutFixed64Field(4, bits, out);
        } else {
          std::string array;
          for (const std::string& item : v) {
            std::string element;
            PutBytesField(1, item, element);
            PutBytesField(1, element, array);
          }
          PutBytesField(5, array, out);
        }
      },
      value);
  return out;
}

// common.proto KeyValue: key 1, value 2.
void PutAttributes(uint32_t field, const std::vector<Attribute>& attributes, std::string& out) {
  for (const Attribute& attribute : attributes) {
    std::string key_value;
    PutBytesField(1, attribute.key, key_value);
    PutBytesField(2, EncodeAnyValue(attribute.value), key_value);
    PutBytesField(field, key_value, out);
  }
}

// trace.proto Span: trace_id 1, span_id 2, trace_state 3, parent_span_id 4, name 5, kind 6,
// start_time_unix_nano 7, end_time_unix_nano 8, attributes 9, events 11 (Event: time_unix_nano
// 1, name 2, attributes 3), status 15 (Status: message 2, code 3), flags 16.
std::string EncodeSpan(const SpanData& span) {
  std::string out;
  PutBytesField(1, Bytes(span.context.trace_id), out);
  PutBytesField(2, Bytes(span.context.span_id), out);
  if (!span.context.trace_state.empty()) PutBytesField(3, span.context.trace_state, out);
  const bool root = std::all_of(span.parent_span_id.begin(), span.parent_span_id.end(),
                                [](uint8_t b) { return b == 0; });
  if (!root) PutBytesField(4, Bytes(span.parent_span_id), out);
  PutBytesField(5, span.name, out);
  PutVarintField(6, static_cast<uint64_t>(span.kind), out);
  PutFixed64Field(7, UnixNanos(span.start), out);
  PutFixed64Field(8, UnixNanos(span.end), out);
  PutAttributes(9, span.attributes, out);
  for (const SpanEvent& event : span.events) {
    std::string encoded;
    PutFixed64Field(1, UnixNanos(event.time), encoded);
    PutBytesField(2, event.name, encoded);
    PutAttributes(3, event.attributes, encoded);
    PutBytesField(11, encoded, out);
  }
  if (span.error) {
    std::string status;
    if (!span.status_message.empty()) PutBytesField(2, span.status_message, status);
    PutVarintField(3, 2, status);  // STATUS_CODE_ERROR
    PutBytesField(15, status, out);
  }
  // The W3C trace flags in the low 8 bits.
  PutFixed32Field(16, span.context.flags, out);
  return out;
}

}  // namespace

// ExportTraceServiceRequest: resource_spans 1. ResourceSpans: resource 1 (Resource: attributes
// 1), scope_spans 2. ScopeSpans: scope 1 (InstrumentationScope: name 1, version 2), spans 2.
std::string EncodeExportTraceServiceRequest(const std::vector<Attribute>& resource,
                                            const InstrumentationScope& scope,
                                            absl::Span<const SpanData> spans) {
  std::string resource_message;
  PutAttributes(1, resource, resource_message);
  std::string scope_message;
  PutBytesField(1, scope.name, scope_message);
  if (!scope.version.empty()) PutBytesField(2, scope.version, scope_message);
  std::string scope_spans;
  PutBytesField(1, scope_message, scope_spans);
  for (const SpanData& span : spans) PutBytesField(2, EncodeSpan(span), scope_spans);
  std::string resource_spans;
  PutBytesField(1, resource_message, resource_spans);
  PutBytesField(2, scope_spans, resource_spans);
  std::string request;
  PutBytesField(1, resource_spans, request);
  return request;
}

}  // namespace llmserve::common::tracing
