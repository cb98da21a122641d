// Benchmark of the token mask (issue 17): prints JSON with, for a real 100k vocabulary
// (deepseek-llm) and a synthetic 128k one (the same plus generated pieces), and for a JSON
// Schema and JSON mode: cold compile time, FillNextTokenBitmask time per step along seeded
// random generations (mean/p50/p99/max), cache hit rates, the cold worst case inside a string,
// and batch-32 time (32 matchers at different states filled one after another).
//
// Usage: structured_mask_benchmark [TOKENIZER_DIR [EXTRA_TOKENIZER_DIR...]]  (default
// $LLMSERVE_TESTDATA/tokenizers/deepseek-llm; extra dirs, e.g. models/small with its 128k
// vocabulary, are measured as they are). Built with the tests, never run by ctest.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "worker/structured/grammar_compiler.h"
#include "worker/structured/grammar_matcher.h"
#include "worker/structured/vocabulary.h"

namespace llmserve::worker::structured {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

constexpr char kSchema[] = R"({"type": "object", "properties": {
  "name": {"type": "string"},
  "email": {"type": "string", "format": "email"},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "id": {"type": "integer"},
  "role": {"enum": ["admin", "user", "guest"]},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
  "bio": {"type": "string", "maxLength": 200}},
  "required": ["name", "age", "role", "tags"]})";

nlohmann::json Summary(std::vector<double> ms) {
  if (ms.empty()) return nlohmann::json::object();
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double v : ms) sum += v;
  auto pct = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  };
  return {{"n", ms.size()},
          {"mean_ms", sum / ms.size()},
          {"p50_ms", pct(0.5)},
          {"p99_ms", pct(0.99)},
          {"max_ms", ms.back()}};
}

// Picks a random allowed token; EOS only when nothing else is allowed or with probability
// `eos_bias` when allowed (so generations end). One pick in four is among the allowed tokens
// with JSON punctuation, so that generations leave strings and visit many grammar states (a
// uniform pick stays inside the first string for hundreds of steps).
int32_t Pick(const TokenVocabulary& vocab, const std::vector<uint32_t>& mask, std::mt19937& rng,
             double eos_bias) {
  std::vector<int32_t> allowed;
  std::vector<int32_t> structural;
  bool eos = false;
  for (int32_t t = 0; t < vocab.size(); ++t) {
    if (!((mask[t / 32] >> (t % 32)) & 1)) continue;
    if (vocab.is_eos(t)) {
      eos = true;
      continue;
    }
    allowed.push_back(t);
    if (vocab.token_bytes(t).find_first_of("\"{}[],") != std::string::npos) {
      structural.push_back(t);
    }
  }
  if (eos && (allowed.empty() || std::uniform_real_distribution<>(0, 1)(rng) < eos_bias)) {
    return vocab.eos_token_ids()[0];
  }
  if (!structural.empty() && rng() % 4 == 0) return structural[rng() % structural.size()];
  if (allowed.empty()) return -1;
  return allowed[rng() % allowed.size()];
}

nlohmann::json Run(const std::shared_ptr<const TokenVocabulary>& vocab, const Constraint& c,
                   int steps) {
  nlohmann::json out;
  const size_t words = (vocab->size() + 31) / 32;
  std::vector<uint32_t> mask(words);
  // Cold compile.
  {
    GrammarCompiler compiler(vocab);
    const auto start = Clock::now();
    auto g = compiler.Compile(c);
    out["compile_cold_ms"] = Ms(Clock::now() - start);
    if (!g.ok()) {
      out["error"] = std::string(g.status().message());
      return out;
    }
  }
  // Worst case: a fresh grammar (no shared masks) and matcher (no memoized transitions),
  // inside a JSON string where nearly every token is allowed.
  {
    GrammarCompiler compiler(vocab);
    auto g = compiler.Compile(c);
    GrammarMatcher m(*g);
    const bool ok =
        m.AcceptString(c.kind == Constraint::Kind::kJsonSchema ? "{\"name\": \"x" : "{\"x");
    auto start = Clock::now();
    m.FillNextTokenBitmask(absl::MakeSpan(mask));
    out["worst_cold_string_ms"] = Ms(Clock::now() - start);
    out["worst_cold_string_work_units"] = m.stats().max_call_work;
    int allowed = 0;
    for (int32_t t = 0; t < vocab->size(); ++t) allowed += (mask[t / 32] >> (t % 32)) & 1;
    out["worst_cold_string_allowed_tokens"] = allowed;
    out["worst_cold_string_prefix_ok"] = ok;
    // Same state reached again by a new matcher: the shared cache answers.
    GrammarMatcher m2(*g);
    m2.AcceptString(c.kind == Constraint::Kind::kJsonSchema ? "{\"name\": \"y" : "{\"y");
    start = Clock::now();
    m2.FillNextTokenBitmask(absl::MakeSpan(mask));
    out["second_matcher_same_state_ms"] = Ms(Clock::now() - start);
    // A different string state in the warm matcher: memoized transitions, mask miss.
    if (c.kind == Constraint::Kind::kJsonSchema) {
      m.AcceptString("\", \"age\": 1, \"role\": \"user\", \"tags\": [\"");
      start = Clock::now();
      m.FillNextTokenBitmask(absl::MakeSpan(mask));
      out["warm_dfa_new_string_state_ms"] = Ms(Clock::now() - start);
    }
  }
  // Batch 1: generations with a fresh matcher each, on one compiled grammar.
  GrammarCompiler compiler(vocab);
  auto g = *compiler.Compile(c);
  std::mt19937 rng(1234);
  std::vector<double> fill_ms;
  int64_t fills = 0, local_hits = 0, shared_hits = 0, computed = 0, generations = 0;
  auto matcher = std::make_unique<GrammarMatcher>(g);
  auto flush_stats = [&] {
    const GrammarMatcher::Stats s = matcher->stats();
    fills += s.fills;
    local_hits += s.local_hits;
    shared_hits += s.shared_hits;
    computed += s.computed;
  };
  for (int step = 0; step < steps; ++step) {
    const auto start = Clock::now();
    matcher->FillNextTokenBitmask(absl::MakeSpan(mask));
    fill_ms.push_back(Ms(Clock::now() - start));
    const int32_t token = Pick(*vocab, mask, rng, 0.5);
    if (token < 0 || !matcher->AcceptToken(token) || matcher->IsTerminated()) {
      flush_stats();
      ++generations;
      matcher = std::make_unique<GrammarMatcher>(g);
    }
  }
  flush_stats();
  out["batch1_fill"] = Summary(fill_ms);
  out["batch1_generations_finished"] = generations;
  out["cache"] = {{"fills", fills},
                  {"local_hits", local_hits},
                  {"shared_hits", shared_hits},
                  {"computed", computed},
                  {"hit_rate", fills ? double(local_hits + shared_hits) / fills : 0.0}};
  // Batch 32: matchers at different states, all filled one after another each step.
  std::vector<std::unique_ptr<GrammarMatcher>> batch;
  for (int i = 0; i < 32; ++i) {
    batch.push_back(std::make_unique<GrammarMatcher>(g));
    for (int k = 0; k < i; ++k) {  // matcher i starts i tokens in
      batch[i]->FillNextTokenBitmask(absl::MakeSpan(mask));
      const int32_t t = Pick(*vocab, mask, rng, 0.0);
      if (t < 0 || !batch[i]->AcceptToken(t)) break;
    }
  }
  std::vector<double> batch_ms;
  std::vector<std::vector<uint32_t>> masks(32, std::vector<uint32_t>(words));
  for (int step = 0; step < std::max(10, steps / 8); ++step) {
    const auto start = Clock::now();
    for (int i = 0; i < 32; ++i) batch[i]->FillNextTokenBitmask(absl::MakeSpan(masks[i]));
    batch_ms.push_back(Ms(Clock::now() - start));
    for (int i = 0; i < 32; ++i) {
      const int32_t t = Pick(*vocab, masks[i], rng, 0.5);
      if (t < 0 || !batch[i]->AcceptToken(t) || batch[i]->IsTerminated()) {
        batch[i] = std::make_unique<GrammarMatcher>(g);
      }
    }
  }
  out["batch32_fill_all"] = Summary(batch_ms);
  return out;
}

}  // namespace
}  // namespace llmserve::worker::structured

int main(int argc, char** argv) {
  using namespace llmserve::worker::structured;
  std::string dir;
  if (argc > 1) {
    dir = argv[1];
  } else if (const char* testdata = std::getenv("LLMSERVE_TESTDATA")) {
    dir = std::string(testdata) + "/tokenizers/deepseek-llm";
  } else {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR (or set LLMSERVE_TESTDATA)\n", argv[0]);
    return 2;
  }
  auto tok = llmserve::common::tokenizer::Tokenizer::FromDirectory(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::vector<int32_t> eos;
  if ((*tok)->eos_token_id().has_value()) eos.push_back(*(*tok)->eos_token_id());
  const auto build_start = Clock::now();
  auto real = TokenVocabulary::FromTokenizer(**tok, (*tok)->vocab_size(), eos);
  const double real_build_ms = Ms(Clock::now() - build_start);
  if (!real.ok()) return 1;
  // Synthetic 128k: the real tokens plus generated pieces (words, numbers, punctuation runs,
  // multi-byte text) up to 131072 ids.
  std::vector<std::string> bytes;
  std::vector<bool> is_text;
  for (int32_t t = 0; t < (*real)->size(); ++t) {
    bytes.push_back((*real)->token_bytes(t));
    is_text.push_back((*real)->is_text(t));
  }
  std::mt19937 rng(99);
  const std::vector<std::string> punct = {"\"", ",", ":", "{", "}", "[", "]", " ", "\\", "."};
  const std::vector<std::string> cjk = {"\xE4\xB8\xAD",     "\xE6\x96\x87", "\xE6\x97\xA5",
                                        "\xF0\x9F\x98\x80", "\xC3\xA9",     "\xD0\x96"};
  while (bytes.size() < 131072) {
    std::string piece;
    switch (rng() % 4) {
      case 0:
        piece = rng() % 2 ? " " : "";
        for (int i = 0, n = 3 + rng() % 10; i < n; ++i) piece.push_back('a' + rng() % 26);
        break;
      case 1:
        for (int i = 0, n = 1 + rng() % 6; i < n; ++i) piece.push_back('0' + rng() % 10);
        break;
      case 2:
        for (int i = 0, n = 2 + rng() % 4; i < n; ++i) piece += punct[rng() % punct.size()];
        break;
      default:
        for (int i = 0, n = 1 + rng() % 4; i < n; ++i) piece += cjk[rng() % cjk.size()];
    }
    bytes.push_back(piece);
    is_text.push_back(true);
  }
  auto synthetic = TokenVocabulary::FromTokenBytes(bytes, is_text, eos);
  if (!synthetic.ok()) return 1;

  Constraint schema;
  schema.kind = Constraint::Kind::kJsonSchema;
  schema.text = kSchema;
  Constraint json_mode;
  json_mode.kind = Constraint::Kind::kJsonObject;
  const int steps = 400;
  nlohmann::json report;
  report["real_vocab_build_ms"] = real_build_ms;
  report["steps_per_run"] = steps;
  for (const auto& [name, vocab] : {std::pair{std::string("deepseek_100k"), *real},
                                    std::pair{std::string("synthetic_128k"), *synthetic}}) {
    report[name]["vocab_size"] = vocab->size();
    report[name]["trie_nodes"] = vocab->trie_size();
    report[name]["json_schema"] = Run(vocab, schema, steps);
    report[name]["json_mode"] = Run(vocab, json_mode, steps);
  }
  for (int i = 2; i < argc; ++i) {
    auto extra = llmserve::common::tokenizer::Tokenizer::FromDirectory(argv[i]);
    if (!extra.ok()) continue;
    std::vector<int32_t> extra_eos;
    if ((*extra)->eos_token_id().has_value()) extra_eos.push_back(*(*extra)->eos_token_id());
    if (extra_eos.empty()) extra_eos.push_back((*extra)->vocab_size() - 1);
    auto vocab = TokenVocabulary::FromTokenizer(**extra, (*extra)->vocab_size(), extra_eos);
    if (!vocab.ok()) continue;
    const std::string name = argv[i];
    report[name]["vocab_size"] = (*vocab)->size();
    report[name]["trie_nodes"] = (*vocab)->trie_size();
    report[name]["json_schema"] = Run(*vocab, schema, steps);
    report[name]["json_mode"] = Run(*vocab, json_mode, steps);
  }
  // The per-call work budget (GrammarMatcher::kMaxWorkPerCall): how long a call that exhausts
  // it takes, for a constraint whose cost is expansion (nullable chains) and one whose cost is
  // walking the trie through memoized transitions.
  for (const auto& [name, vocab] : {std::pair{std::string("deepseek_100k"), *real},
                                    std::pair{std::string("synthetic_128k"), *synthetic}}) {
    GrammarCompiler compiler(vocab);
    Constraint expensive;
    expensive.kind = Constraint::Kind::kRegex;
    expensive.text = "abc(.?){2000}";
    auto g = compiler.Compile(expensive);
    if (!g.ok()) continue;
    GrammarMatcher m(*g);
    std::vector<uint32_t> mask((vocab->size() + 31) / 32);
    m.AcceptString("abc");
    const auto start = Clock::now();
    const bool filled = m.FillNextTokenBitmask(absl::MakeSpan(mask));
    report[name]["budget_exhausted"] = {{"ms", Ms(Clock::now() - start)},
                                        {"filled", filled},
                                        {"work_units", m.stats().max_call_work},
                                        {"budget", GrammarMatcher::kMaxWorkPerCall}};
  }
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
