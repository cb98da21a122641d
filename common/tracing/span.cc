#include "common/tracing/span.h"

#include <utility>

namespace llmserve::common::tracing {

Span Span::Unrecorded(TraceContext context) {
  Span span;
  span.state_ = std::make_shared<State>();
  span.state_->context = std::move(context);
  return span;
}

Span Span::Recorded(SpanData data, Sink sink) {
  Span span;
  span.state_ = std::make_shared<State>();
  span.state_->context = data.context;
  span.state_->sink = std::move(sink);
  absl::MutexLock lock(&span.state_->mutex);
  span.state_->data = std::move(data);
  return span;
}

TraceContext Span::context() const { return state_ != nullptr ? state_->context : TraceContext{}; }

void Span::SetName(std::string name) const {
  if (!recording()) return;
  absl::MutexLock lock(&state_->mutex);
  state_->data.name = std::move(name);
}

void Span::SetAttribute(std::string key, AttributeValue value) const {
  if (!recording()) return;
  absl::MutexLock lock(&state_->mutex);
  if (state_->ended) return;
  // Keys are unique in OTLP: a second value replaces the first.
  for (Attribute& attribute : state_->data.attributes) {
    if (attribute.key == key) {
      attribute.value = std::move(value);
      return;
    }
  }
  state_->data.attributes.push_back({std::move(key), std::move(value)});
}

void Span::AddEvent(std::string name, absl::Time time, std::vector<Attribute> attributes) const {
  if (!recording()) return;
  absl::MutexLock lock(&state_->mutex);
  if (state_->ended) return;
  state_->data.events.push_back({time, std::move(name), std::move(attributes)});
}

void Span::SetError(absl::string_view type, absl::string_view message) const {
  if (!recording()) return;
  SetAttribute("error.type", std::string(type));
  absl::MutexLock lock(&state_->mutex);
  state_->data.error = true;
  state_->data.status_message = std::string(message);
}

void Span::End(absl::Time end) const {
  if (!recording()) return;
  SpanData data;
  {
    absl::MutexLock lock(&state_->mutex);
    if (state_->ended) return;
    state_->ended = true;
    state_->data.end = end;
    data = std::move(state_->data);
  }
  state_->sink(std::move(data));
}

}  // namespace llmserve::common::tracing
