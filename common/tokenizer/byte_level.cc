#include "common/tokenizer/byte_level.h"

#include <array>

#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 0x144> char_to_byte;  // every code point of the alphabet is < U+0144
};

// bytes_to_unicode() of GPT-2's encoder.py.
Tables BuildTables() {
  Tables t;
  t.char_to_byte.fill(-1);
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = printable ? static_cast<char32_t>(b) : 0x100 + next_extra++;
    t.byte_to_utf8[b] = common::utf8::Encode(cp);
    t.char_to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

const Tables& GetTables() {
  static const Tables* tables = new Tables(BuildTables());
  return *tables;
}

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  for (char c : bytes) out->append(t.byte_to_utf8[static_cast<uint8_t>(c)]);
}

int ByteForChar(char32_t cp) {
  const Tables& t = GetTables();
  return cp < t.char_to_byte.size() ? t.char_to_byte[cp] : -1;
}

void AppendBytesOfToken(std::string_view token, std::string* out) {
  const size_t start = out->size();
  size_t pos = 0;
  char32_t cp;
  while (pos < token.size()) {
    const int n = common::utf8::DecodeOne(token, pos, &cp);
    const int byte = n > 0 ? ByteForChar(cp) : -1;
    if (byte < 0) {
      out->resize(start);
      out->append(token);
      return;
    }
    out->push_back(static_cast<char>(byte));
    pos += n;
  }
}

}  // namespace llmserve::common::tokenizer
