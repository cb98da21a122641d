#ifndef LLMSERVE_WORKER_STRUCTURED_HEX_DIGIT_H_
#define LLMSERVE_WORKER_STRUCTURED_HEX_DIGIT_H_

namespace llmserve::worker::structured {

// The value of one hexadecimal digit (either case), or -1 when `c` is not one: the regex and GBNF
// parsers both read \xHH and \uHHHH escapes.
inline int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_HEX_DIGIT_H_
