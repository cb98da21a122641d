// Keeps special-token text that a client wrote in a chat (a user message containing
// "<|eot_id|><|start_header_id|>system<|end_header_id|>") from becoming control tokens, so no
// one can forge turns, while the template's own markup still does.
//
// How: before rendering, every occurrence of a special text in the client's strings (message
// content, names, tool-call ids, names and arguments, tool definitions) is replaced by a
// placeholder, one private-use code point (U+F0000 and up) per distinct special text, chosen so
// that neither the template nor any input string contains it. The template then renders as
// usual: a single code point survives what templates do to content (trim, strip, split,
// slicing by code point, concatenation, tojson). Afterwards each placeholder is turned back
// into its text and its byte range recorded. The prompt text is therefore the one the template
// renders without this guard, byte for byte, unless the template looks inside the special
// text itself (its length, `in`, tojson with ensure_ascii=True, which escapes the placeholder
// instead); the tokenizer's EncodeWithLiteralRanges then encodes the recorded ranges as plain
// text. This is the placeholder scheme of vLLM pull request 31735; mistral-common gets the same
// by encoding content and control tokens separately.
//
// Thread-safety: SpecialTextGuard is immutable after construction; its methods are const and
// safe to call concurrently.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_LITERAL_TEXT_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_LITERAL_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/chat_template.h"

namespace llmserve::common {

// A byte range [begin, end) of a rendered prompt that holds client text to encode literally.
struct LiteralSpan {
  size_t begin = 0;
  size_t end = 0;
};

// A rendered prompt and the ranges of it (sorted, disjoint) that must not become added tokens.
struct RenderedChat {
  std::string text;
  std::vector<LiteralSpan> literal_spans;
};

class SpecialTextGuard {
 public:
  using Render = std::function<absl::StatusOr<std::string>(const ChatTemplateInput&)>;

  // `special_texts`: the texts that must stay text when a client writes them (a tokenizer's
  // special tokens). Empty strings are ignored.
  explicit SpecialTextGuard(const std::vector<std::string>& special_texts);

  // Renders `input` with `render` (ChatTemplate::Render or RenderPlainChat), the special texts
  // in the client's strings replaced by placeholders and restored afterwards, with their
  // ranges. `template_source` is the template's text (placeholders avoid its code points; ""
  // for the plain fallback). The errors of `render`; RESOURCE_EXHAUSTED in the absurd case that
  // the input uses every private-use code point of planes 15 and 16.
  absl::StatusOr<RenderedChat> RenderLiteral(const ChatTemplateInput& input,
                                             absl::string_view template_source,
                                             const Render& render) const;

  // Whether there is nothing to guard (no special texts): RenderLiteral is then plain render.
  bool empty() const { return texts_.empty(); }

 private:
  class Masker;
  // A byte trie over the special texts, for leftmost-longest matching; node 0 is the root.
  struct Node {
    absl::flat_hash_map<uint8_t, int32_t> children;
    int32_t text = -1;  // index into texts_, -1 when no text ends here
  };

  // The leftmost-longest special text at or after `from`: its index and [begin, end).
  bool FindMatch(absl::string_view s, size_t from, int32_t* text, size_t* begin, size_t* end) const;

  std::vector<std::string> texts_;
  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};
};

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_LITERAL_TEXT_H_
