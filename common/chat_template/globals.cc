#include "common/chat_template/globals.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/civil_time.h"

namespace llmserve::common::globals {
namespace {

absl::StatusOr<Value> Range(const std::vector<Value>& args, const builtins::Kwargs& kwargs) {
  if (!kwargs.empty()) return absl::InvalidArgumentError("range() takes no keyword arguments");
  if (args.empty() || args.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("range expected at least 1 argument, at most 3, got ", args.size()));
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_int() && !args[i].is_bool()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", args[i].TypeName(), "' object cannot be interpreted as an integer"));
    }
    bounds[i] = args[i].is_int() ? args[i].as_int() : args[i].as_bool();
  }
  const int64_t start = args.size() == 1 ? 0 : bounds[0];
  const int64_t stop = args.size() == 1 ? bounds[0] : bounds[1];
  const int64_t step = args.size() == 3 ? bounds[2] : 1;
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  // The length in 128 bits: start/stop/step span all of int64.
  __int128 length = 0;
  if (step > 0 && start < stop) {
    length = ((__int128)stop - start + step - 1) / step;
  } else if (step < 0 && start > stop) {
    length = ((__int128)start - stop - step - 1) / -(__int128)step;
  }
  if (length > kMaxRange) {
    return absl::OutOfRangeError(absl::StrCat(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
  }
  ValueList items;
  items.reserve(static_cast<size_t>(length));
  for (__int128 i = 0; i < length; ++i) {
    items.push_back(Value::Int(static_cast<int64_t>(start + i * step)));
  }
  return Value::List(std::move(items));
}

absl::StatusOr<Value> Dict(const std::vector<Value>& args, const builtins::Kwargs& kwargs) {
  if (args.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dict expected at most 1 argument, got ", args.size()));
  }
  ValueDict dict;
  if (args.size() == 1) {
    if (!args[0].is_dict()) {
      return absl::InvalidArgumentError("dict() takes a dict or keyword arguments");
    }
    dict = args[0].as_dict();
  }
  for (const auto& [k, v] : kwargs) dict.Set(k, v);
  return Value::Dict(std::move(dict));
}

constexpr const char* kWeekdays[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                     "Friday", "Saturday", "Sunday"};
constexpr const char* kMonths[] = {"January",   "February", "March",    "April",
                                   "May",       "June",     "July",     "August",
                                   "September", "October",  "November", "December"};

}  // namespace

std::string Strftime(const std::string& format, absl::Time now) {
  const absl::CivilSecond t = absl::ToCivilSecond(now, absl::UTCTimeZone());
  const int weekday = static_cast<int>(absl::GetWeekday(absl::CivilDay(t)));  // Monday = 0
  const int yearday = absl::GetYearDay(absl::CivilDay(t));
  const int hour12 = t.hour() % 12 == 0 ? 12 : t.hour() % 12;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out.push_back(format[i]);
      continue;
    }
    size_t j = i + 1;
    const bool no_pad = format[j] == '-' && j + 1 < format.size();
    if (no_pad) ++j;
    const char d = format[j];
    auto num = [&](int64_t v, int width) {
      out += no_pad ? absl::StrCat(v) : absl::StrFormat("%0*d", width, v);
    };
    switch (d) {
      case 'a':
        out += std::string(kWeekdays[weekday]).substr(0, 3);
        break;
      case 'A':
        out += kWeekdays[weekday];
        break;
      case 'b':
      case 'h':
        out += std::string(kMonths[t.month() - 1]).substr(0, 3);
        break;
      case 'B':
        out += kMonths[t.month() - 1];
        break;
      case 'd':
        num(t.day(), 2);
        break;
      case 'e':
        out += no_pad ? absl::StrCat(t.day()) : absl::StrFormat("%2d", t.day());
        break;
      case 'm':
        num(t.month(), 2);
        break;
      case 'Y':
        out += absl::StrCat(t.year());
        break;
      case 'y':
        num(t.year() % 100, 2);
        break;
      case 'H':
        num(t.hour(), 2);
        break;
      case 'I':
        num(hour12, 2);
        break;
      case 'M':
        num(t.minute(), 2);
        break;
      case 'S':
        num(t.second(), 2);
        break;
      case 'p':
        out += t.hour() < 12 ? "AM" : "PM";
        break;
      case 'j':
        num(yearday, 3);
        break;
      case 'c':  // the C locale's "%a %b %e %H:%M:%S %Y"
        out += Strftime("%a %b %e %H:%M:%S %Y", now);
        break;
      case 'x':
      case 'D':
        out += Strftime("%m/%d/%y", now);
        break;
      case 'X':
      case 'T':
        out += Strftime("%H:%M:%S", now);
        break;
      case 'R':
        out += Strftime("%H:%M", now);
        break;
      case 'F':
        out += Strftime("%Y-%m-%d", now);
        break;
      case 'u':
        out += absl::StrCat(weekday + 1);
        break;
      case 'w':
        out += absl::StrCat((weekday + 1) % 7);
        break;
      case 'Z':
      case 'z':
        break;  // a naive datetime has no zone
      case '%':
        out.push_back('%');
        break;
      default:
        out.append(format, i, j - i + 1);
        break;
    }
    i = j;
  }
  return out;
}

absl::StatusOr<Value> CallGlobal(const std::string& name, const std::vector<Value>& args,
                                 const builtins::Kwargs& kwargs, absl::Time now) {
  if (name == "range") return Range(args, kwargs);
  if (name == "dict") return Dict(args, kwargs);
  if (name == "strftime_now") {
    if (args.size() != 1 || !kwargs.empty() || !args[0].is_string()) {
      return absl::InvalidArgumentError("strftime_now takes one string argument");
    }
    if (args[0].as_string().size() > 4096) {
      return absl::InvalidArgumentError("strftime_now: format too long");
    }
    return Value::String(Strftime(args[0].as_string(), now));
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' cannot be called here"));
}

}  // namespace llmserve::common::globals
