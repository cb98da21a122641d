// Unicode character classes with the exact meaning the Hugging Face tokenizers (Rust) give them,
// so that pre-tokenizers split where HF splits. Backed by utf8proc. Pure and thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_UNICODE_CATEGORIES_H_
#define LLMSERVE_COMMON_TOKENIZER_UNICODE_CATEGORIES_H_

namespace llmserve::common::tokenizer {

// Rust char::is_numeric: general category Nd, Nl or No (so '²', '½' and '٣' count).
bool IsNumeric(char32_t cp);

// HF Punctuation pre-tokenizer: char::is_ascii_punctuation or general category P*.
bool IsPunctuation(char32_t cp);

// Rust char::is_whitespace: the White_Space property.
bool IsWhitespace(char32_t cp);

// General category Mn (nonspacing mark), used by StripAccents.
bool IsNonspacingMark(char32_t cp);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_UNICODE_CATEGORIES_H_
