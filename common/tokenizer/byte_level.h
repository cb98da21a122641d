// The GPT-2 byte <-> unicode alphabet used by ByteLevel pre-tokenizers and decoders: every byte
// maps to one printable code point (printable Latin-1 bytes to themselves, the rest to
// U+0100..U+0143), so that byte-level BPE vocabularies are valid UTF-8 strings. Immutable
// tables built once; thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_BYTE_LEVEL_H_
#define LLMSERVE_COMMON_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace llmserve::common::tokenizer {

// Appends the byte-level form of every byte of `bytes` to *out.
void AppendByteLevel(std::string_view bytes, std::string* out);

// The byte that code point `cp` stands for, or -1 when cp is not in the alphabet.
int ByteForChar(char32_t cp);

// Decodes one token: every char mapped back to its byte. When any char is outside the
// alphabet, the token's own UTF-8 bytes are appended instead (as HF does).
void AppendBytesOfToken(std::string_view token, std::string* out);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_BYTE_LEVEL_H_
