#include "common/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

// Per-thread scratch: match data (one ovector pair is all FindAll reads) and a JIT stack
// larger than the 32 KiB default so long whitespace runs never hit the JIT stack limit.
struct ThreadScratch {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() {
    if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

ThreadScratch& Scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Code {
  pcre2_code* code;
};

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex \"", std::string(pattern),
                                                   "\" rejected by PCRE2 at offset ", error_offset,
                                                   ": ", ErrorMessage(error_code)));
  }
  // JIT is an optimization: when it is unavailable pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), new Code{code}));
}

Regex::~Regex() {
  pcre2_code_free(code_->code);
  delete code_;
}

absl::Status Regex::FindAll(std::string_view text,
                            std::vector<std::pair<size_t, size_t>>* matches) const {
  ThreadScratch& scratch = Scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               scratch.match_data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("regex \"", pattern_, "\" failed: ", ErrorMessage(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    matches->emplace_back(begin, end);
    if (end > begin) {
      start = end;
    } else {
      // An empty match: step over one character so the scan makes progress.
      if (end >= text.size()) break;
      char32_t cp;
      const int n = common::utf8::DecodeOne(text, end, &cp);
      start = end + (n > 0 ? n : 1);
    }
  }
  return absl::OkStatus();
}

}  // namespace llmserve::common::tokenizer
