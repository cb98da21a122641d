// No template and no input may crash, hang or exhaust memory: limits on output, steps, value
// sizes and nesting, and a fuzz-style sweep over random and truncated templates, all of which
// must come back as a prompt or a status.
#include <pthread.h>

#include <random>
#include <string>
#include <vector>

#include "common/chat_template/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/sanitizers.h"

namespace llmserve::common {
namespace {

using ::testing::HasSubstr;

constexpr char kLlama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

constexpr char kMultiLine[] = R"({%- set ns = namespace(found=false, count=0) %}
{%- for message in messages[::-1] if message.role != 'tool' %}
    {%- if message['role'] == 'system' %}
        {%- set ns.found = true %}
    {%- endif %}
    {%- set ns.count = ns.count + loop.index %}
{%- endfor %}
{{- bos_token ~ (ns.count | string) }}
{%- for message in messages %}
    {{- '<|' + message.role | upper + '|>' + message.content.strip() }}{# role #}
    {%- if loop.last and add_generation_prompt %}{{ '<|ASSISTANT|>' }}{% endif %}
{%- endfor %})";

ChatTemplateInput Input() {
  ChatTemplateInput input;
  input.messages = {{"system", "s"}, {"user", " hi "}, {"assistant", "yo"}};
  input.bos_token = "<s>";
  return input;
}

absl::StatusOr<std::string> RenderWith(const std::string& source, RenderLimits limits,
                                       const ChatTemplateInput& input = Input()) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source, limits);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(input);
}

TEST(ChatTemplateRobustness, OutputIsBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 100;
  ChatTemplateInput input = Input();
  // Each string fits; together they do not.
  input.messages.push_back({"user", std::string(60, 'x')});
  input.messages.push_back({"user", std::string(60, 'y')});
  absl::StatusOr<std::string> out =
      RenderWith("{% for m in messages %}{{ m.content }}{% endfor %}", limits, input);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("exceeds 100 bytes"));

  // A single string over the limit is refused where it is built.
  out = RenderWith("{{ messages[0].content * 200 }}", limits, input);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ChatTemplateRobustness, StepsAreBounded) {
  RenderLimits limits;
  limits.max_steps = 100000;
  // A billion iterations if nothing stopped it.
  absl::StatusOr<std::string> out = RenderWith(
      "{% set l = 'x' * 1000 %}{% for a in l %}{% for b in l %}{% for c in l %}{% endfor %}"
      "{% endfor %}{% endfor %}",
      limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("evaluation steps"));
}

TEST(ChatTemplateRobustness, DoublingStringsIsBounded) {
  absl::StatusOr<std::string> out = RenderWith(
      "{% set ns = namespace(s='ab') %}{% for i in 'x' * 64 %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}{{ ns.s | length }}",
      RenderLimits{});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ChatTemplateRobustness, RepetitionIsBounded) {
  for (const char* source : {"{{ 'x' * 100000000000 }}", "{{ [1, 2] * 100000000000 }}",
                             "{{ ('x' * 1000000) * 1000 }}"}) {
    absl::StatusOr<std::string> out = RenderWith(source, RenderLimits{});
    ASSERT_FALSE(out.ok()) << source;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange) << source;
  }
  absl::StatusOr<std::string> out = RenderWith("{{ 'ab' * -3 }}|{{ [1] * 0 }}", RenderLimits{});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "|[]");
}

TEST(ChatTemplateRobustness, ValueNestingIsBounded) {
  absl::StatusOr<std::string> out = RenderWith(
      "{% set ns = namespace(l=[]) %}{% for i in 'x' * 1000 %}{% set ns.l = [ns.l] %}"
      "{% endfor %}{{ ns.l }}",
      RenderLimits{});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  // A namespace cannot hold itself (no cycles).
  out = RenderWith("{% set ns = namespace() %}{% set ns.me = ns %}", RenderLimits{});
  ASSERT_FALSE(out.ok());
}

TEST(ChatTemplateRobustness, DeepSyntaxIsAnErrorNotAStackOverflow) {
  const std::string parens =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  nots += "1 }}";
  std::string minus = "{{ " + std::string(100000, '-') + "1 }}";
  std::string ifs;
  for (int i = 0; i < 100000; ++i) ifs += "{% if true %}";
  std::string lists = "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}";
  for (const std::string& source : {parens, nots, minus, ifs, lists}) {
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    ASSERT_FALSE(tmpl.ok());
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tmpl.status().message()), HasSubstr("too deeply"));
  }
  // Moderate nesting is fine.
  EXPECT_EQ(*RenderWith("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}",
                        RenderLimits{}),
            "1");
}

// The deepest recursion a template can reach: macros nested to the call limit, each call with
// syntax nested nearly to the parse limit. It must end in an error on a thread with a small
// stack (gRPC and worker threads are not the main thread).
TEST(ChatTemplateRobustness, RecursiveMacrosHitTheCallLimitOnASmallStack) {
  const std::string nest = std::string(45, '(') + "n" + std::string(45, ')');
  const std::string source =
      "{% macro m(n) %}{% if n > 0 %}{% for i in [1] %}{% if true %}{{ m(" + nest +
      " - 1) }}{% endif %}{% endfor %}{% endif %}{% endmacro %}{{ m(1000) }}";
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  struct Job {
    const ChatTemplate* tmpl;
    absl::StatusOr<std::string> out;
  } job{&*tmpl, std::string()};
#if defined(LLMSERVE_ASAN)  // GCC's and clang's ASan alike (tests/testing/sanitizers.h)
  constexpr size_t kStack = size_t{16} << 20;  // ASan frames are several times larger
#else
  constexpr size_t kStack = size_t{1} << 20;
#endif
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, kStack), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* arg) -> void* {
                  auto* j = static_cast<Job*>(arg);
                  j->out = j->tmpl->Render(Input());
                  return nullptr;
                },
                &job),
            0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
  ASSERT_FALSE(job.out.ok());
  EXPECT_EQ(job.out.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(job.out.status().message()), HasSubstr("macro calls nested deeper"));
  // Mutual recursion through caller() counts too.
  absl::StatusOr<std::string> out = RenderWith(
      "{% macro m() %}{% call m() %}x{% endcall %}{{ caller() }}{% endmacro %}"
      "{% call m() %}y{% endcall %}",
      RenderLimits{});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
}

// A macro defined in a loop copies the variables it sees (its closure), and each call copies
// them back: both count as steps, so many variables times many definitions or calls end at
// the step limit instead of running for minutes.
TEST(ChatTemplateRobustness, MacroClosuresCostSteps) {
  std::string sets;
  for (int i = 0; i < 2000; ++i) sets += "{% set v" + std::to_string(i) + " = 1 %}";
  for (const std::string& loop :
       {std::string("{% for i in range(100000) %}{% macro m() %}{% endmacro %}{% endfor %}"),
        std::string("{% macro m() %}{% endmacro %}{% for i in range(100000) %}{{ m() }}"
                    "{% endfor %}")}) {
    // Uncharged, either loop costs about 300k steps and renders; each closure copies 2000
    // variables, so charged, the limit stops it after about 500 iterations. The default limit
    // (10M) makes the same point with 10 times the copying: 92 s under ASan.
    RenderLimits limits;
    limits.max_steps = 1'000'000;
    absl::StatusOr<std::string> out =
        RenderWith("{% for o in [1] %}" + sets + loop + "{% endfor %}", limits);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange) << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("evaluation steps"));
    // The same loop with nothing to capture fits: the closures' copies are what cost.
    EXPECT_TRUE(RenderWith("{% for o in [1] %}" + loop + "{% endfor %}", limits).ok()) << loop;
  }
}

TEST(ChatTemplateRobustness, InvalidUtf8InMessagesIsCarriedThrough) {
  ChatTemplateInput input;
  input.messages = {{"user", std::string("a\xff\xfe b\xc3", 6)}};
  absl::StatusOr<std::string> out = RenderWith(
      "{{ messages[0].content | trim | length }}|{{ messages[0].content[::-1] | length }}|"
      "{{ messages[0].content.split() | length }}|{{ messages[0].content | tojson | length }}",
      RenderLimits{}, input);
  ASSERT_TRUE(out.ok()) << out.status();
}

// Deterministic pseudo-random templates: pieces of real syntax glued at random, every
// truncation of real templates, and random bytes. Each must parse or fail cleanly, and each
// that parses must render or fail cleanly, within small limits.
TEST(ChatTemplateRobustness, FuzzRandomAndTruncatedTemplates) {
  static const char* const kPieces[] = {"{{",
                                        "}}",
                                        "{%",
                                        "%}",
                                        "{#",
                                        "#}",
                                        "{%-",
                                        "-%}",
                                        "{{-",
                                        "-}}",
                                        " if ",
                                        " elif ",
                                        " else ",
                                        " endif ",
                                        " for ",
                                        " in ",
                                        " endfor ",
                                        " set ",
                                        " = ",
                                        "messages",
                                        "message",
                                        "loop",
                                        ".index0",
                                        ".last",
                                        "[0]",
                                        "[1:]",
                                        "[::-1]",
                                        "['role']",
                                        ".content",
                                        "(",
                                        ")",
                                        "[",
                                        "]",
                                        "{",
                                        "}",
                                        ",",
                                        ":",
                                        "'x'",
                                        "\"y\"",
                                        "1",
                                        "0",
                                        "-1",
                                        " + ",
                                        " ~ ",
                                        " * ",
                                        " // ",
                                        " % ",
                                        " == ",
                                        " != ",
                                        " < ",
                                        " and ",
                                        " or ",
                                        " not ",
                                        " is ",
                                        " defined ",
                                        " none ",
                                        " string ",
                                        " | ",
                                        "trim",
                                        "length",
                                        "tojson",
                                        "join",
                                        "upper",
                                        "default",
                                        ".strip()",
                                        ".split('a')",
                                        ".startswith('u')",
                                        "namespace(a=1)",
                                        "ns",
                                        ".a",
                                        "raise_exception('e')",
                                        " break ",
                                        " continue ",
                                        "\n",
                                        "  ",
                                        "text",
                                        "'",
                                        "\"",
                                        "\\",
                                        "{% endset %}",
                                        "{% set x %}",
                                        "{% generation %}",
                                        "{% endgeneration %}",
                                        "bos_token",
                                        "eos_token",
                                        "add_generation_prompt",
                                        "items()",
                                        "loop.length",
                                        " if ",
                                        " else ",
                                        "{% macro m(a, b=1) %}",
                                        "{% macro m() %}",
                                        "{% endmacro %}",
                                        "m(",
                                        "m(1, 2)",
                                        "{% call(x) m(1) %}",
                                        "{% call m() %}",
                                        "{% endcall %}",
                                        "caller(",
                                        "varargs",
                                        "kwargs",
                                        "range(",
                                        "dict(a=",
                                        "strftime_now('%d %B %Y')",
                                        "{% filter upper %}",
                                        "{% endfilter %}",
                                        "| indent(2)",
                                        "| dictsort",
                                        "1.5",
                                        " % ",
                                        " / ",
                                        "| safe",
                                        "{0: 1}"};
  const std::vector<std::string> real = {
      kLlama3, kMultiLine,
      "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] "
      "}}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif "
      "%}"};
  RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20000;
  limits.max_allocated_bytes = 1 << 22;
  std::mt19937 rng(12345);
  int parsed = 0;
  int rendered = 0;
  auto check = [&](const std::string& source) {
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source, limits);
    if (!tmpl.ok()) {
      EXPECT_FALSE(tmpl.status().message().empty());
      return;
    }
    ++parsed;
    absl::StatusOr<std::string> out = tmpl->Render(Input());
    if (out.ok()) {
      ++rendered;
      EXPECT_LE(out->size(), limits.max_output_bytes);
    } else {
      EXPECT_FALSE(out.status().message().empty());
    }
  };
  for (const std::string& source : real) {
    ASSERT_TRUE(ChatTemplate::Parse(source).ok());
    for (size_t n = 0; n <= source.size(); ++n) check(source.substr(0, n));
    for (size_t n = 0; n < source.size(); ++n) check(source.substr(n));
  }
  const size_t num_pieces = sizeof(kPieces) / sizeof(kPieces[0]);
  for (int i = 0; i < 30000; ++i) {
    std::string source;
    const int len = static_cast<int>(rng() % 24);
    for (int j = 0; j < len; ++j) source += kPieces[rng() % num_pieces];
    check(source);
  }
  for (int i = 0; i < 5000; ++i) {
    std::string source(rng() % 40, '\0');
    for (char& c : source) c = static_cast<char>(rng() % 256);
    check("{{ " + source + " }}");
    check(source);
  }
  // The sweep must have exercised the renderer, not only the parser.
  EXPECT_GT(parsed, 1000);
  EXPECT_GT(rendered, 500);
}

}  // namespace
}  // namespace llmserve::common
