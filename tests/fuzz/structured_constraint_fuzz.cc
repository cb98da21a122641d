// Fuzz target: a structured-output constraint as a client sends it to a worker. The first byte
// picks the kind (JSON Schema, regex, GBNF grammar, choice list with entries split at '\n', JSON
// mode: byte % 5) and the reasoning block before it (none, open, optional: byte / 5 % 3), the next
// the seed of a walk; the rest is the constraint's text. The compiler must
// answer OK or INVALID_ARGUMENT, never crash or hang; a compiled grammar is then walked for up
// to 48 tokens of a small vocabulary (single bytes, some multi-byte pieces, EOS, a special token)
// choosing only tokens its mask allows, and the mask must agree with the matcher: every chosen
// token is accepted, EOS is allowed exactly when the output can end, the special token never. A
// matcher past its per-token work budget must fail cleanly (INVALID_ARGUMENT, an empty mask), in
// a mask or in accepting a token the mask allowed (seed regex_accept_over_budget, found by a
// 10-minute run: accepting its token took more than the budget that its mask fit in).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "worker/structured/constraint.h"
#include "worker/structured/grammar_compiler.h"
#include "worker/structured/grammar_matcher.h"
#include "worker/structured/vocabulary.h"

namespace {

namespace structured = llmserve::worker::structured;

constexpr int32_t kEos = 256;
constexpr int32_t kSpecial = 257;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "structured_constraint_fuzz: %s\n", what);
  std::abort();
}

structured::GrammarCompiler& Compiler() {
  static structured::GrammarCompiler* const compiler = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
    pieces.push_back("");             // EOS
    pieces.push_back("<|special|>");  // not text
    for (const char* piece : {"{\"", "\": ", "\", \"", "true", "null", "12", "\xc3\xa9", "\xe2\x82",
                              "\xac", "[1, ", "\"}", "abc", "\\u00"}) {
      pieces.push_back(piece);
    }
    std::vector<bool> is_text(pieces.size(), true);
    is_text[kEos] = false;
    is_text[kSpecial] = false;
    absl::StatusOr<std::shared_ptr<const structured::TokenVocabulary>> vocab =
        structured::TokenVocabulary::FromTokenBytes(pieces, is_text, {kEos});
    if (!vocab.ok()) Fail("the vocabulary does not build");
    // A small cache: inputs rarely repeat, and evictions get exercised. A work budget 16 times
    // smaller than the worker's: the budget paths are the same code, and an input that runs to
    // the budget at every step (the seeds regex_*budget*) then costs 0.5 s rather than 8, which
    // would leave the fuzzer a few hundred runs in the CI's 15 seconds.
    return new structured::GrammarCompiler(
        *vocab, 4, structured::GrammarCompiler::kDefaultCacheBytes,
        structured::CompiledGrammar::kDefaultMaxWorkPerCall / 16);
  }();
  return *compiler;
}

bool Allowed(const std::vector<uint32_t>& bits, int32_t token) {
  return (bits[token / 32] >> (token % 32)) & 1u;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  structured::Constraint constraint;
  constexpr structured::Constraint::Kind kKinds[] = {
      structured::Constraint::Kind::kJsonSchema, structured::Constraint::Kind::kRegex,
      structured::Constraint::Kind::kGrammar, structured::Constraint::Kind::kChoice,
      structured::Constraint::Kind::kJsonObject};
  constraint.kind = kKinds[data[0] % 5];
  // The first byte's higher part puts a reasoning block before the constraint (seeds below 5 have
  // none).
  constexpr structured::Constraint::ReasoningBlock kBlocks[] = {
      structured::Constraint::ReasoningBlock::kNone, structured::Constraint::ReasoningBlock::kOpen,
      structured::Constraint::ReasoningBlock::kOptional};
  constraint.reasoning_block = kBlocks[data[0] / 5 % 3];
  uint32_t seed = data[1];
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  if (constraint.kind == structured::Constraint::Kind::kChoice) {
    constraint.choices = absl::StrSplit(text, '\n');
  } else {
    constraint.text = text;
  }
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
      Compiler().Compile(constraint);
  if (!grammar.ok()) {
    if (!absl::IsInvalidArgument(grammar.status())) Fail("a refusal that is not INVALID_ARGUMENT");
    return 0;
  }
  structured::GrammarMatcher matcher(*grammar);
  const int32_t vocab = (*grammar)->vocab().size();
  std::vector<uint32_t> bits((vocab + 31) / 32);
  for (int step = 0; step < 48 && !matcher.IsTerminated(); ++step) {
    std::fill(bits.begin(), bits.end(), 0u);
    if (!matcher.FillNextTokenBitmask(absl::MakeSpan(bits))) {
      // Past the per-token work budget: refused as the client's constraint, nothing allowed.
      if (!absl::IsInvalidArgument(matcher.status()))
        Fail("a budget failure that is not INVALID_ARGUMENT");
      for (const uint32_t word : bits) {
        if (word != 0) Fail("a failed matcher's mask allows tokens");
      }
      if (matcher.AcceptToken('a')) Fail("a failed matcher accepted a token");
      return 0;
    }
    if (Allowed(bits, kSpecial)) Fail("the mask allows a special token");
    if (Allowed(bits, kEos) != matcher.CanTerminate()) Fail("EOS disagrees with CanTerminate");
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab; ++t) {
      if (Allowed(bits, t)) allowed.push_back(t);
    }
    // Compile prunes what can never finish, so a live matcher always has a way on.
    if (allowed.empty()) Fail("a live state with nothing allowed");
    seed = seed * 1103515245u + 12345u;
    const int32_t token = allowed[(seed >> 8) % allowed.size()];
    if (!matcher.AcceptToken(token)) {
      // Accepting has its own work budget: past it the matcher fails as a mask would.
      if (matcher.status().ok()) Fail("a token the mask allowed was refused");
      if (!absl::IsInvalidArgument(matcher.status()))
        Fail("a budget failure that is not INVALID_ARGUMENT");
      return 0;
    }
  }
  return 0;
}
