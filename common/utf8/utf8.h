// UTF-8 helpers shared by the tokenizer, the detokenizer and the API layers.
//
// All functions are pure and thread-safe. "Invalid" follows the Unicode definition of
// well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), the same rule
// as Rust's std::str::from_utf8 and Python's strict codec.
#ifndef LLMSERVE_COMMON_UTF8_UTF8_H_
#define LLMSERVE_COMMON_UTF8_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace llmserve::common::utf8 {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr size_t kValid = std::string_view::npos;

// Decodes the sequence starting at `pos` (pos < text.size()). Returns its length in bytes
// (1-4) and stores the code point in *cp. When the bytes at `pos` are not a complete valid
// sequence, returns the negated length of the maximal valid prefix ("maximal subpart", at
// least 1 byte): the unit that lossy decoding replaces by one U+FFFD.
int DecodeOne(std::string_view text, size_t pos, char32_t* cp);

// Offset of the first byte that does not start a valid sequence, or kValid.
size_t FindFirstInvalid(std::string_view text);
inline bool IsValid(std::string_view text) { return FindFirstInvalid(text) == kValid; }

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value; others become U+FFFD).
void Append(char32_t cp, std::string* out);
std::string Encode(char32_t cp);

// Length (0-3) of the trailing bytes of `text` that form a valid but incomplete prefix of a
// multi-byte sequence, i.e. bytes that may become valid once more bytes arrive. 0 when the
// text ends on a complete sequence or on bytes that can never become valid.
size_t IncompleteSuffixLength(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` that does not cut a character in two (for
// valid UTF-8: the cut moves back to the start of the character it would split).
std::string_view TruncateAtCharBoundary(std::string_view text, size_t max_bytes);

// Replaces each maximal invalid subpart by U+FFFD, like Rust's String::from_utf8_lossy and
// Python's bytes.decode(errors="replace"). Valid input is returned unchanged.
std::string SanitizeLossy(std::string_view text);

}  // namespace llmserve::common::utf8

#endif  // LLMSERVE_COMMON_UTF8_UTF8_H_
