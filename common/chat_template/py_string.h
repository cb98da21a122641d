// Python str operations on UTF-8 strings, as chat templates call them (str.strip(), len(s),
// s[1:], repr(s), ...). Python strings index code points, so lengths and slices here count code
// points, not bytes. Invalid UTF-8 bytes count as one code point each and are kept as they are.
//
// Thread-safety: pure functions.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_PY_STRING_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_PY_STRING_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace llmserve::common::py_string {

// str.isspace() for one code point (the Unicode White_Space set plus \x1c-\x1f, as Python).
bool IsSpace(char32_t cp);

// str.strip()/lstrip()/rstrip(). With `chars` null, strips Python whitespace; otherwise strips
// the code points that occur in *chars.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right);

// str.upper()/lower()/capitalize()/title() on ASCII letters; other characters are kept as they
// are (Python also maps non-ASCII letters; chat templates apply these to role names).
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string Capitalize(std::string_view s);
std::string Title(std::string_view s);

// The code points of `s`, each as its UTF-8 bytes.
std::vector<std::string_view> CodePoints(std::string_view s);
size_t Length(std::string_view s);

// str.split(sep, maxsplit) (maxsplit < 0: no limit); sep null splits on runs of whitespace and
// drops empty parts, as Python does.
std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit);

// str.rsplit(sep, maxsplit): as Split, the splits counted from the right.
std::vector<std::string> RSplit(std::string_view s, const std::string* sep, int64_t maxsplit);

// str.replace(old, new, count) (count < 0: all).
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

// repr(s): single quotes unless the string has a ' and no ", escapes for \\, the quote, \n,
// \r, \t and other control characters.
std::string Repr(std::string_view s);

}  // namespace llmserve::common::py_string

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_PY_STRING_H_
