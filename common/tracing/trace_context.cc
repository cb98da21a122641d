#include "common/tracing/trace_context.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmserve::common::tracing {
namespace {

constexpr size_t kMaxTraceStateBytes = 512;

bool IsLowerHex(absl::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

template <size_t N>
bool DecodeHex(absl::string_view hex, std::array<uint8_t, N>* out) {
  if (hex.size() != 2 * N || !IsLowerHex(hex)) return false;
  const std::string bytes = absl::HexStringToBytes(hex);
  std::copy(bytes.begin(), bytes.end(), out->begin());
  return std::any_of(out->begin(), out->end(), [](uint8_t b) { return b != 0; });
}

template <size_t N>
std::array<uint8_t, N> RandomNonZero() {
  thread_local absl::BitGen random;
  std::array<uint8_t, N> id{};
  do {
    for (uint8_t& b : id) b = absl::Uniform<uint8_t>(random);
  } while (std::all_of(id.begin(), id.end(), [](uint8_t b) { return b == 0; }));
  return id;
}

bool IsValidTraceState(absl::string_view state) {
  if (state.size() > kMaxTraceStateBytes) return false;
  return std::all_of(state.begin(), state.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

}  // namespace

std::optional<TraceContext> ParseTraceParent(absl::string_view traceparent,
                                             absl::string_view tracestate) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55.
  constexpr size_t kLength = 55;
  if (traceparent.size() < kLength) return std::nullopt;
  const absl::string_view version = traceparent.substr(0, 2);
  if (!IsLowerHex(version) || version == "ff") return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append "-..." fields.
  if (version == "00" ? traceparent.size() != kLength
                      : traceparent.size() > kLength && traceparent[kLength] != '-') {
    return std::nullopt;
  }
  if (traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-') {
    return std::nullopt;
  }
  TraceContext context;
  const absl::string_view flags_hex = traceparent.substr(53, 2);
  if (!DecodeHex(traceparent.substr(3, 32), &context.trace_id) ||
      !DecodeHex(traceparent.substr(36, 16), &context.span_id) || !IsLowerHex(flags_hex)) {
    return std::nullopt;
  }
  auto digit = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  context.flags = static_cast<uint8_t>(digit(flags_hex[0]) * 16 + digit(flags_hex[1]));
  if (IsValidTraceState(tracestate)) context.trace_state = std::string(tracestate);
  return context;
}

std::string FormatTraceParent(const TraceContext& context) {
  return absl::StrFormat("00-%s-%s-%02x", HexId(context.trace_id), HexId(context.span_id),
                         context.flags);
}

TraceId NewTraceId() { return RandomNonZero<16>(); }
SpanId NewSpanId() { return RandomNonZero<8>(); }

std::string HexId(const TraceId& id) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
}
std::string HexId(const SpanId& id) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
}

}  // namespace llmserve::common::tracing
