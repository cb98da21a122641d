#include "gateway/reasoning/reasoning_parser.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "common/utf8/utf8.h"

namespace llmserve::gateway::reasoning {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

absl::string_view StripTrailingSpace(absl::string_view text) {
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`: it may become the tag.
size_t PartialTagSuffix(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (absl::EndsWith(text, tag.substr(0, n))) return n;
  }
  return 0;
}

}  // namespace

ReasoningStart StartFor(ReasoningFormat format, absl::string_view prompt_tail) {
  const absl::string_view tail = StripTrailingSpace(prompt_tail);
  if (absl::EndsWith(tail, kThinkOpen)) return ReasoningStart::kReasoning;
  if (absl::EndsWith(tail, kThinkClose)) return ReasoningStart::kContent;
  return format == ReasoningFormat::kQwen3 ? ReasoningStart::kUndecided
                                           : ReasoningStart::kReasoning;
}

StreamingReasoningParser::StreamingReasoningParser(ReasoningStart start) {
  switch (start) {
    case ReasoningStart::kReasoning:
      // The model may still write the <think> its prompt opened; it is no text of its reasoning.
      state_ = State::kOpening;
      opening_falls_back_to_reasoning_ = true;
      reasoned_ = true;
      break;
    case ReasoningStart::kUndecided:
      state_ = State::kOpening;
      break;
    case ReasoningStart::kContent:
      state_ = State::kContent;
      break;
  }
}

ReasoningDelta StreamingReasoningParser::Feed(absl::string_view text) {
  held_.append(text.data(), text.size());
  ReasoningDelta out;
  Drain(&out);
  return out;
}

void StreamingReasoningParser::Drain(ReasoningDelta* out) {
  if (state_ == State::kOpening) {
    const size_t first = std::find_if_not(held_.begin(), held_.end(), IsSpace) - held_.begin();
    const absl::string_view rest = absl::string_view(held_).substr(first);
    if (rest.size() < kThinkOpen.size() && absl::StartsWith(kThinkOpen, rest)) return;
    if (absl::StartsWith(rest, kThinkOpen)) {
      held_.erase(0, first + kThinkOpen.size());
      state_ = State::kReasoning;
      reasoned_ = true;
    } else {
      state_ = opening_falls_back_to_reasoning_ ? State::kReasoning : State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = held_.find(kThinkClose.data(), 0, kThinkClose.size());
    if (close == std::string::npos) {
      const size_t keep = std::max(PartialTagSuffix(held_, kThinkClose),
                                   common::utf8::IncompleteSuffixLength(held_));
      out->reasoning.append(held_, 0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return;
    }
    out->reasoning.append(held_, 0, close);
    held_.erase(0, close + kThinkClose.size());
    state_ = State::kContent;
  }
  const size_t keep = common::utf8::IncompleteSuffixLength(held_);
  out->content.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

ReasoningDelta StreamingReasoningParser::Finish() {
  ReasoningDelta out;
  const bool reasoning = state_ == State::kReasoning ||
                         (state_ == State::kOpening && opening_falls_back_to_reasoning_);
  (reasoning ? out.reasoning : out.content) = std::move(held_);
  held_.clear();
  if (state_ == State::kOpening) state_ = reasoning ? State::kReasoning : State::kContent;
  return out;
}

ReasoningDelta SplitReasoning(ReasoningStart start, absl::string_view output) {
  StreamingReasoningParser parser(start);
  ReasoningDelta all = parser.Feed(output);
  ReasoningDelta rest = parser.Finish();
  all.reasoning += rest.reasoning;
  all.content += rest.content;
  return all;
}

}  // namespace llmserve::gateway::reasoning
