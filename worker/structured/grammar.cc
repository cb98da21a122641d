#include "worker/structured/grammar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::structured {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

int EncodeUtf8(char32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] into ranges whose UTF-8 encodings are products of byte ranges (the algorithm
// of RE2 and Rust's utf8-ranges).
void SplitUtf8(char32_t lo, char32_t hi, std::vector<ByteRanges>* out) {
  static constexpr char32_t kMaxes[] = {0x7F, 0x7FF, 0xFFFF};
  for (const char32_t max : kMaxes) {
    if (lo <= max && hi > max) {
      SplitUtf8(lo, max, out);
      SplitUtf8(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  uint8_t lo_bytes[4];
  const int n = EncodeUtf8(lo, lo_bytes);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t hi_bytes[4];
  EncodeUtf8(hi, hi_bytes);
  ByteRanges seq;
  for (int i = 0; i < n; ++i) seq.push_back({lo_bytes[i], hi_bytes[i]});
  out->push_back(std::move(seq));
}

std::string ByteSetKey(const ByteSet& set) {
  return std::string(reinterpret_cast<const char*>(set.bits), sizeof(set.bits));
}

}  // namespace

void NormalizeRanges(CodePointRanges* ranges) {
  std::sort(ranges->begin(), ranges->end());
  CodePointRanges out;
  for (const auto& [lo, hi] : *ranges) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  ranges->swap(out);
}

CodePointRanges WithoutSurrogates(const CodePointRanges& ranges) {
  CodePointRanges out;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) out.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) out.push_back({0xE000, hi});
  }
  return out;
}

CodePointRanges NegateRanges(const CodePointRanges& ranges) {
  CodePointRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return WithoutSurrogates(out);
}

GrammarBuilder::GrammarBuilder() {
  never_ = NewRule("never");
  defined_[never_] = true;
}

int32_t GrammarBuilder::RuleId(absl::string_view name) {
  const auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(names_.size());
  names_.emplace_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  ids_.emplace(std::string(name), id);
  return id;
}

int32_t GrammarBuilder::NewRule(absl::string_view base) {
  std::string name;
  do {
    name = absl::StrCat(base, "~", helpers_++);
  } while (ids_.contains(name));
  return RuleId(name);
}

absl::Status GrammarBuilder::CountSymbols(int64_t n) {
  symbols_ += n;
  if (symbols_ > kMaxGrammarSymbols || static_cast<int64_t>(names_.size()) > kMaxGrammarRules) {
    return absl::InvalidArgumentError(absl::StrCat("grammar too large (more than ",
                                                   kMaxGrammarSymbols, " symbols or ",
                                                   kMaxGrammarRules, " rules after expansion)"));
  }
  return absl::OkStatus();
}

absl::Status GrammarBuilder::Define(int32_t rule, std::vector<Sequence> alternatives) {
  int64_t n = 1;
  for (const Sequence& seq : alternatives) n += static_cast<int64_t>(seq.size()) + 1;
  if (absl::Status s = CountSymbols(n); !s.ok()) return s;
  rules_[rule] = std::move(alternatives);
  defined_[rule] = true;
  return absl::OkStatus();
}

Symbol GrammarBuilder::Bytes(const ByteSet& set) {
  const std::string key = ByteSetKey(set);
  const auto it = byte_set_ids_.find(key);
  if (it != byte_set_ids_.end()) return {false, it->second};
  const int32_t id = static_cast<int32_t>(byte_sets_.size());
  byte_sets_.push_back(set);
  byte_set_ids_.emplace(key, id);
  return {false, id};
}

void GrammarBuilder::AppendLiteral(absl::string_view bytes, Sequence* seq) {
  for (const char c : bytes) {
    ByteSet set;
    set.Add(static_cast<uint8_t>(c));
    seq->push_back(Bytes(set));
  }
}

absl::Status GrammarBuilder::AppendCodePointClass(const CodePointRanges& ranges, Sequence* seq) {
  if (ranges.empty()) {
    seq->push_back({true, never_});
    return absl::OkStatus();
  }
  if (ranges.back().second < 0x80) {
    ByteSet set;
    for (const auto& [lo, hi] : ranges) {
      set.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    }
    seq->push_back(Bytes(set));
    return absl::OkStatus();
  }
  std::string key;
  for (const auto& [lo, hi] : ranges) absl::StrAppend(&key, lo, "-", hi, ",");
  if (const auto it = class_rules_.find(key); it != class_rules_.end()) {
    seq->push_back({true, it->second});
    return absl::OkStatus();
  }
  std::vector<ByteRanges> split;
  for (const auto& [lo, hi] : ranges) SplitUtf8(lo, hi, &split);
  std::vector<Sequence> alts;
  ByteSet ascii;
  bool has_ascii = false;
  for (const ByteRanges& byte_ranges : split) {
    if (byte_ranges.size() == 1) {
      ascii.AddRange(byte_ranges[0].first, byte_ranges[0].second);
      has_ascii = true;
      continue;
    }
    Sequence alt;
    for (const auto& [lo, hi] : byte_ranges) {
      ByteSet set;
      set.AddRange(lo, hi);
      alt.push_back(Bytes(set));
    }
    alts.push_back(std::move(alt));
  }
  if (has_ascii) alts.insert(alts.begin(), Sequence{Bytes(ascii)});
  const int32_t rule = NewRule("class");
  if (absl::Status s = Define(rule, std::move(alts)); !s.ok()) return s;
  class_rules_.emplace(key, rule);
  seq->push_back({true, rule});
  return absl::OkStatus();
}

absl::StatusOr<Symbol> GrammarBuilder::Group(Sequence seq) {
  if (seq.size() == 1) return seq[0];
  const int32_t rule = NewRule("group");
  if (absl::Status s = Define(rule, {std::move(seq)}); !s.ok()) return s;
  return Symbol{true, rule};
}

absl::Status GrammarBuilder::AppendRepeat(Symbol item, int min, int max, Sequence* seq) {
  if (min < 0 || min > kMaxRepetition || max > kMaxRepetition || (max >= 0 && max < min)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition {", min, ",", max, "} is invalid or exceeds the limit of ", kMaxRepetition));
  }
  if (absl::Status s = CountSymbols(min); !s.ok()) return s;
  for (int i = 0; i < min; ++i) seq->push_back(item);
  if (max < 0) {
    // star ::= item star | "" (right recursion: the matcher's tail calls keep stacks flat).
    const int32_t star = NewRule("star");
    if (absl::Status s = Define(star, {{item, {true, star}}, {}}); !s.ok()) return s;
    seq->push_back({true, star});
    return absl::OkStatus();
  }
  // Nested optionals, opt_k ::= item opt_{k-1} | "", so that each count has a single parse.
  int32_t prev = -1;
  for (int k = 1; k <= max - min; ++k) {
    const int32_t opt = NewRule("opt");
    Sequence first = {item};
    if (prev >= 0) first.push_back({true, prev});
    if (absl::Status s = Define(opt, {std::move(first), {}}); !s.ok()) return s;
    prev = opt;
  }
  if (prev >= 0) seq->push_back({true, prev});
  return absl::OkStatus();
}

absl::StatusOr<Grammar> GrammarBuilder::Build(absl::string_view root, absl::string_view what) {
  const size_t num_rules = names_.size();
  for (size_t r = 0; r < num_rules; ++r) {
    if (!defined_[r]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": undefined rule \"", names_[r], "\""));
    }
  }
  const auto root_it = ids_.find(root);
  if (root_it == ids_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no rule \"", root, "\""));
  }

  // Alternatives flattened, with each rule's occurrences, for linear-time fixpoints.
  struct Alt {
    int32_t rule;
    const Sequence* seq;
  };
  std::vector<Alt> alts;
  std::vector<std::vector<int32_t>> occurrences(num_rules);  // rule -> alts using it
  for (size_t r = 0; r < num_rules; ++r) {
    for (const Sequence& seq : rules_[r]) {
      const int32_t a = static_cast<int32_t>(alts.size());
      alts.push_back({static_cast<int32_t>(r), &seq});
      for (const Symbol& sym : seq) {
        if (sym.is_rule) occurrences[sym.id].push_back(a);
      }
    }
  }
  // Productive: the rule derives some finite byte string.
  auto fixpoint = [&](bool bytes_block) {
    std::vector<bool> done(num_rules, false);
    std::vector<int32_t> remaining(alts.size());
    std::vector<int32_t> queue;
    for (size_t a = 0; a < alts.size(); ++a) {
      int32_t count = 0;
      bool blocked = false;
      for (const Symbol& sym : *alts[a].seq) {
        if (sym.is_rule)
          ++count;
        else if (bytes_block)
          blocked = true;
      }
      remaining[a] = blocked ? -1 : count;
      if (remaining[a] == 0) queue.push_back(static_cast<int32_t>(a));
    }
    while (!queue.empty()) {
      const int32_t a = queue.back();
      queue.pop_back();
      const int32_t r = alts[a].rule;
      if (done[r]) continue;
      done[r] = true;
      for (const int32_t user : occurrences[r]) {
        if (remaining[user] > 0 && --remaining[user] == 0) queue.push_back(user);
      }
    }
    return std::make_pair(done, remaining);
  };
  auto [productive, unresolved] = fixpoint(/*bytes_block=*/false);
  const std::vector<bool> nullable = fixpoint(/*bytes_block=*/true).first;
  if (!productive[root_it->second]) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the language is empty (rule \"", root,
        "\" can never complete: recursion without a base case, or a class matching nothing)"));
  }
  // Alternatives that cannot complete are dropped: then any live matcher state can complete.
  std::vector<bool> keep(alts.size());
  for (size_t a = 0; a < alts.size(); ++a) keep[a] = unresolved[a] == 0;

  // Left recursion: a cycle through symbols that can start a rule (after nullable prefixes).
  std::vector<std::vector<int32_t>> left(num_rules);
  for (size_t a = 0; a < alts.size(); ++a) {
    if (!keep[a]) continue;
    for (const Symbol& sym : *alts[a].seq) {
      if (!sym.is_rule) break;
      left[alts[a].rule].push_back(sym.id);
      if (!nullable[sym.id]) break;
    }
  }
  std::vector<uint8_t> color(num_rules, 0);  // 0 new, 1 on stack, 2 done
  std::vector<int32_t> post_order;           // a rule after every rule it can start with
  post_order.reserve(num_rules);
  for (size_t start = 0; start < num_rules; ++start) {
    if (color[start] != 0) continue;
    std::vector<std::pair<int32_t, size_t>> stack = {{static_cast<int32_t>(start), 0}};
    color[start] = 1;
    while (!stack.empty()) {
      auto& [rule, next] = stack.back();
      if (next == left[rule].size()) {
        color[rule] = 2;
        post_order.push_back(rule);
        stack.pop_back();
        continue;
      }
      const int32_t to = left[rule][next++];
      if (color[to] == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": rule \"", names_[to],
            "\" is left-recursive (directly, or through a repetition of something that can be "
            "empty), which is not supported"));
      }
      if (color[to] == 0) {
        color[to] = 1;
        stack.push_back({to, 0});
      }
    }
  }

  // Expansion work: how many stacks the matcher may visit when it expands one position without
  // consuming input. Entering a nullable rule continues after it, so nested repetitions of
  // something that can be empty multiply: ((a?){0,256}){0,256} visits 65k stacks at its start.
  // rule_cost[r] counts the positions reachable when r is entered (its alternatives' nullable
  // prefixes, recursively); the worst position anywhere bounds a single expansion.
  constexpr int64_t kSaturated = int64_t{1} << 40;
  std::vector<int64_t> rule_cost(num_rules, 1);
  for (const int32_t rule : post_order) {
    int64_t total = 1;
    for (const Sequence& seq : rules_[rule]) {
      for (const Symbol& sym : seq) {
        total += 1 + (sym.is_rule ? rule_cost[sym.id] : 0);
        if (!sym.is_rule || !nullable[sym.id] || total >= kSaturated) break;
      }
    }
    rule_cost[rule] = std::min(total, kSaturated);
  }
  int64_t worst = 0;
  int32_t worst_rule = 0;
  for (size_t a = 0; a < alts.size(); ++a) {
    if (!keep[a]) continue;
    const Sequence& seq = *alts[a].seq;
    int64_t after = 0;  // the cost of expanding from the next position
    for (size_t i = seq.size(); i-- > 0;) {
      const Symbol& sym = seq[i];
      int64_t cost = 1;
      if (sym.is_rule) cost += rule_cost[sym.id] + (nullable[sym.id] ? after : 0);
      after = std::min(cost, kSaturated);
      if (after > worst) {
        worst = after;
        worst_rule = sym.is_rule ? sym.id : alts[a].rule;
      }
    }
  }
  if (worst > kMaxExpansion) {
    const std::string& name = names_[worst_rule];
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": too complex: matching it may expand ",
        worst >= kSaturated ? absl::StrCat("more than ", kSaturated) : absl::StrCat(worst),
        " grammar positions at one point of the output (the limit is ", kMaxExpansion,
        "); repetitions of something that can be empty multiply when nested (x{0,256} inside "
        "{0,256} is 65536-fold)",
        name.find('~') == std::string::npos ? absl::StrCat(", at rule \"", name, "\"") : ""));
  }

  Grammar g;
  g.byte_sets = byte_sets_;
  g.rule_names = names_;
  g.alternatives.resize(num_rules);
  g.root = root_it->second;
  for (size_t a = 0; a < alts.size(); ++a) {
    if (!keep[a]) continue;
    g.alternatives[alts[a].rule].push_back(static_cast<int32_t>(g.elements.size()));
    for (const Symbol& sym : *alts[a].seq) {
      g.elements.push_back({sym.is_rule ? ElementKind::kRule : ElementKind::kBytes, sym.id});
    }
    g.elements.push_back({ElementKind::kEnd, 0});
  }
  return g;
}

}  // namespace llmserve::worker::structured
