#include "common/chat_template/py_string.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::py_string {
namespace {

// Decodes the code point at `pos`; an invalid byte is taken alone (as U+FFFD, never a space).
size_t Next(std::string_view s, size_t pos, char32_t* cp) {
  const int len = utf8::DecodeOne(s, pos, cp);
  if (len > 0) return static_cast<size_t>(len);
  *cp = utf8::kReplacementChar;
  return 1;
}

bool InChars(char32_t cp, const std::string* chars) {
  if (chars == nullptr) return IsSpace(cp);
  for (size_t pos = 0; pos < chars->size();) {
    char32_t c;
    pos += Next(*chars, pos, &c);
    if (c == cp) return true;
  }
  return false;
}

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char ToUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char ToLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool IsSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<std::string_view> cps = CodePoints(s);
  size_t begin = 0;
  size_t end = cps.size();
  auto strippable = [&](std::string_view piece) {
    char32_t cp;
    Next(piece, 0, &cp);
    return piece.size() == 1 && static_cast<unsigned char>(piece[0]) >= 0x80
               ? false  // a lone invalid byte
               : InChars(cp, chars);
  };
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  if (begin == end) return "";
  const size_t from = static_cast<size_t>(cps[begin].data() - s.data());
  const size_t to = static_cast<size_t>(cps[end - 1].data() + cps[end - 1].size() - s.data());
  return std::string(s.substr(from, to - from));
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToUpper(c);
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToLower(c);
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = ToUpper(out[0]);
  return out;
}

std::string Title(std::string_view s) {
  // Python: a letter after a non-letter starts a word.
  std::string out(s);
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = IsAsciiLetter(c);
    if (letter) c = prev_letter ? ToLower(c) : ToUpper(c);
    prev_letter = letter;
  }
  return out;
}

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    const size_t len = Next(s, pos, &cp);
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

size_t Length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) {
    char32_t cp;
    pos += Next(s, pos, &cp);
  }
  return n;
}

std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  const std::vector<std::string_view> cps = CodePoints(s);
  auto is_space = [](std::string_view piece) {
    char32_t cp;
    return utf8::DecodeOne(piece, 0, &cp) > 0 && IsSpace(cp);
  };
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, right-stripped, is the last part.
      const size_t from = static_cast<size_t>(cps[i].data() - s.data());
      out.push_back(Strip(s.substr(from), nullptr, false, true));
      break;
    }
    std::string part;
    while (i < cps.size() && !is_space(cps[i])) part.append(cps[i++]);
    out.push_back(std::move(part));
  }
  return out;
}

std::vector<std::string> RSplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return Split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep != nullptr) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.substr(0, end).rfind(*sep);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::vector<std::string_view> cps = CodePoints(s);
  auto is_space = [](std::string_view piece) {
    char32_t cp;
    return utf8::DecodeOne(piece, 0, &cp) > 0 && IsSpace(cp);
  };
  size_t i = cps.size();
  while (i > 0) {
    while (i > 0 && is_space(cps[i - 1])) --i;
    if (i == 0) break;
    if (static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, as it is up to its last non-space, is the first part.
      const size_t to = static_cast<size_t>(cps[i - 1].data() - s.data()) + cps[i - 1].size();
      out.emplace_back(s.substr(0, to));
      break;
    }
    size_t j = i;
    while (j > 0 && !is_space(cps[j - 1])) --j;
    std::string part;
    for (size_t k = j; k < i; ++k) part.append(cps[k]);
    out.push_back(std::move(part));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    int64_t done = 0;
    for (std::string_view cp : CodePoints(s)) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      out.append(cp);
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string Repr(std::string_view s) {
  const char quote =
      (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"'
                                                                                        : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    const size_t len = Next(s, pos, &cp);
    const std::string_view piece = s.substr(pos, len);
    pos += len;
    if (cp == '\\' || cp == static_cast<char32_t>(quote)) {
      out.push_back('\\');
      out.append(piece);
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      out.append(absl::StrFormat("\\x%02x", static_cast<uint32_t>(cp)));
    } else {
      out.append(piece);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace llmserve::common::py_string
