#include "common/utf8/utf8.h"

#include <cstdint>

namespace llmserve::common::utf8 {
namespace {

// Table 3-7 of the Unicode standard: the valid range of the second byte depends on the lead
// byte (this excludes overlongs, surrogates and code points above U+10FFFF).
struct LeadInfo {
  int length;  // 0: not a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

int DecodeOne(std::string_view text, size_t pos, char32_t* cp) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + pos;
  const size_t avail = text.size() - pos;
  const LeadInfo lead = Lead(p[0]);
  if (lead.length == 1) {
    *cp = p[0];
    return 1;
  }
  if (lead.length == 0) return -1;
  char32_t value = p[0] & (0xFF >> (lead.length + 1));
  for (int i = 1; i < lead.length; ++i) {
    if (static_cast<size_t>(i) >= avail) return -i;
    const uint8_t lo = i == 1 ? lead.second_lo : 0x80;
    const uint8_t hi = i == 1 ? lead.second_hi : 0xBF;
    if (p[i] < lo || p[i] > hi) return -i;
    value = (value << 6) | (p[i] & 0x3F);
  }
  *cp = value;
  return lead.length;
}

size_t FindFirstInvalid(std::string_view text) {
  size_t pos = 0;
  char32_t cp;
  while (pos < text.size()) {
    // ASCII fast path: most text is ASCII and needs no table lookups.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int n = DecodeOne(text, pos, &cp);
    if (n < 0) return pos;
    pos += n;
  }
  return kValid;
}

void Append(char32_t cp, std::string* out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementChar;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Encode(char32_t cp) {
  std::string out;
  Append(cp, &out);
  return out;
}

size_t IncompleteSuffixLength(std::string_view text) {
  // A lead byte can be at most 3 bytes before the end of an incomplete sequence.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const auto b = static_cast<uint8_t>(text[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const LeadInfo lead = Lead(b);
    if (lead.length <= static_cast<int>(back)) return 0;
    char32_t cp;
    // The prefix is "valid so far" when DecodeOne consumed everything up to the end.
    return DecodeOne(text, pos, &cp) == -static_cast<int>(back) ? back : 0;
  }
  return 0;
}

std::string SanitizeLossy(std::string_view text) {
  const size_t first_bad = FindFirstInvalid(text);
  if (first_bad == kValid) return std::string(text);
  std::string out(text.substr(0, first_bad));
  size_t pos = first_bad;
  char32_t cp;
  while (pos < text.size()) {
    const int n = DecodeOne(text, pos, &cp);
    if (n > 0) {
      out.append(text.substr(pos, n));
      pos += n;
    } else {
      Append(kReplacementChar, &out);
      pos += -n;
    }
  }
  return out;
}

std::string_view TruncateAtCharBoundary(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Continuation bytes are 10xxxxxx: step back to the start of the character cut in two.
  while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

}  // namespace llmserve::common::utf8
