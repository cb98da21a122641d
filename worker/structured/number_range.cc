#include "worker/structured/number_range.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llmserve::worker::structured {
namespace {

std::string Quote(absl::string_view digits) { return absl::StrCat("\"", digits, "\""); }

std::string Alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

// Digit strings of the same length n between lo and hi (lo <= hi).
std::string SameLength(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (lo == hi) return Quote(lo);
  if (n == 1) return absl::StrCat("[", lo, "-", hi, "]");
  if (lo[0] == hi[0])
    return absl::StrCat(Quote(lo.substr(0, 1)), " ", SameLength(lo.substr(1), hi.substr(1)));
  const std::string lo_rest = lo.substr(1);
  const std::string hi_rest = hi.substr(1);
  const std::string nines(n - 1, '9');
  const std::string zeros(n - 1, '0');
  std::vector<std::string> alts;
  char full_begin = lo[0];
  char full_end = hi[0];
  if (lo_rest != zeros) {
    alts.push_back(absl::StrCat(Quote(lo.substr(0, 1)), " ", SameLength(lo_rest, nines)));
    ++full_begin;
  }
  std::string last;
  if (hi_rest != nines) {
    last = absl::StrCat(Quote(hi.substr(0, 1)), " ", SameLength(zeros, hi_rest));
    --full_end;
  }
  if (full_begin <= full_end) {
    alts.push_back(absl::StrCat("[", std::string(1, full_begin), "-", std::string(1, full_end),
                                "] [0-9]{", n - 1, "}"));
  }
  if (!last.empty()) alts.push_back(last);
  return Alternatives(alts);
}

// Non-negative integers in [lo, hi]; hi nullopt = unbounded. lo <= hi.
std::string NonNegative(int64_t lo, std::optional<int64_t> hi) {
  const std::string a = std::to_string(lo);
  std::vector<std::string> alts;
  if (hi.has_value()) {
    const std::string b = std::to_string(*hi);
    for (size_t len = a.size(); len <= b.size(); ++len) {
      const std::string from = len == a.size() ? a : "1" + std::string(len - 1, '0');
      const std::string to = len == b.size() ? b : std::string(len, '9');
      alts.push_back(SameLength(from, to));
    }
  } else {
    alts.push_back(SameLength(a, std::string(a.size(), '9')));
    alts.push_back(absl::StrCat("[1-9] [0-9]{", a.size(), ",}"));
  }
  return Alternatives(alts);
}

// |x| for a real x: L <(=) y <(=) U, y >= 0, as "int[.frac]".
std::string AbsReal(int64_t lo, bool lo_exclusive, std::optional<RealBound> hi) {
  static constexpr char kAnyFrac[] = "(\".\" [0-9]+)?";
  static constexpr char kZeroFrac[] = "(\".\" \"0\"+)?";
  static constexpr char kNonZeroFrac[] = "\".\" \"0\"* [1-9] [0-9]*";
  std::vector<std::string> alts;
  int64_t start = lo;
  if (lo_exclusive) {
    if (!hi.has_value() || lo < hi->value) {
      alts.push_back(absl::StrCat(Quote(std::to_string(lo)), " ", kNonZeroFrac));
    }
    start = lo + 1;
  }
  if (!hi.has_value()) {
    alts.push_back(absl::StrCat(NonNegative(start, std::nullopt), " ", kAnyFrac));
  } else {
    if (start <= hi->value - 1) {
      alts.push_back(absl::StrCat(NonNegative(start, hi->value - 1), " ", kAnyFrac));
    }
    if (!hi->exclusive && hi->value >= start) {
      alts.push_back(absl::StrCat(Quote(std::to_string(hi->value)), " ", kZeroFrac));
    }
  }
  if (alts.empty()) return "";
  return Alternatives(alts);
}

}  // namespace

std::string IntegerRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!hi.has_value() || *hi >= 0) {
    alts.push_back(NonNegative(lo.has_value() && *lo > 0 ? *lo : 0, hi));
  }
  if (!lo.has_value() || *lo < 0) {
    const int64_t abs_lo = hi.has_value() && *hi < 0 ? -*hi : 1;
    std::optional<int64_t> abs_hi;
    if (lo.has_value()) abs_hi = -*lo;
    alts.push_back(absl::StrCat("\"-\" ", NonNegative(abs_lo, abs_hi)));
  }
  return Alternatives(alts);
}

std::string RealRangeGbnf(std::optional<RealBound> lo, std::optional<RealBound> hi) {
  std::vector<std::string> alts;
  // x >= 0.
  if (!hi.has_value() || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const bool bounded = lo.has_value() && lo->value >= 0;
    std::string part = AbsReal(bounded ? lo->value : 0, bounded && lo->exclusive, hi);
    if (!part.empty()) alts.push_back(part);
  }
  // x < 0, written "-" y with y > 0.
  if (!lo.has_value() || lo->value < 0) {
    int64_t y_lo = 0;
    bool y_lo_exclusive = true;
    if (hi.has_value() && hi->value < 0) {
      y_lo = -hi->value;
      y_lo_exclusive = hi->exclusive;
    }
    std::optional<RealBound> y_hi;
    if (lo.has_value()) y_hi = RealBound{-lo->value, lo->exclusive};
    std::string part = AbsReal(y_lo, y_lo_exclusive, y_hi);
    if (!part.empty()) alts.push_back(absl::StrCat("\"-\" ", part));
  }
  if (alts.empty()) return "";
  return Alternatives(alts);
}

}  // namespace llmserve::worker::structured
