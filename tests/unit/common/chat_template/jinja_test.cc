// Jinja semantics of the renderer, case by case: whitespace control (trim_blocks and
// lstrip_blocks as transformers sets them), literals and printing, operators, scoping, loops,
// filters, tests and methods. Every expected string was worked out from jinja2's rules and
// checked against jinja2 3.1.6 configured as transformers configures it; `messages` is
// [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}].
#include <string>
#include <vector>

#include "common/chat_template/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

using ::testing::HasSubstr;

struct JinjaCase {
  const char* source;
  const char* expected;
};

const JinjaCase kCases[] = {
    {"a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc"},
    {"  {% if true %}\n  x\n  {% endif %}\n", "  x\n"},
    {"  {{ 'v' }}\n  {# note #}\n  y  {% if true %} z {% endif %}", "  v\n  y   z "},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
    {"a {{- ' b ' -}} c", "a b c"},
    {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "  1\n  2\n"},
    {"{%+ if true %}x{% endif +%}\ny", "x\ny"},
    {"line1\r\nline2\n\n", "line1\nline2\n"},
    {"{# comment -#}   \n  x{#- c2 #} y", "x y"},
    {"{{ 'it\\'s' }}|{{ \"a\\tb\\n\" }}|{{ 'é\\u00e9\\x41' }}|{{ 'a' 'b' }}", "it's|a\tb\n|ééA|ab"},
    {"{{ none }}|{{ true }}|{{ False }}|{{ 42 }}|{{ [1, 'a', none, true] }}|{{ {'k': 'v', 'n': "
     "[1]} }}|{{ (1, 2) }}",
     "None|True|False|42|[1, 'a', None, True]|{'k': 'v', 'n': [1]}|(1, 2)"},
    {"{{ [\"it's\"] }}|{{ ['a\"b'] }}|{{ ['x\\ny'] }}", "[\"it's\"]|['a\"b']|['x\\ny']"},
    {"{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ "
     "-2 ** 2 }}",
     "7|9|3|-4|2|1024|4"},
    {"{{ 'a' ~ 1 ~ none ~ undefined_var }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 'x' + 'y' }}",
     "a1None|ababab|[1, 2]|xy"},
    {"{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'a' < 'b' }}|{{ 1 == 1.__class__ if false else 'n' }}",
     "True|False|True|n"},
    {"{{ 'b' in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'z' not in 'abc' }}|{{ 'role' "
     "in messages[0] }}",
     "True|True|True|True|True"},
    {"{{ true and 'x' }}|{{ 0 or 'y' }}|{{ not 0 }}|{{ '' or [] or 'z' }}|{{ none and "
     "undefined_var.x }}",
     "x|y|True|z|None"},
    {"{{ 'yes' if messages else 'no' }}|{{ 'a' if false }}|{{ 1 if false else 2 if true else 3 }}",
     "yes||2"},
    {"{{ true == 1 }}|{{ none == none }}|{{ [1, 2] == [1, 2] }}|{{ {'a': 1} != {'a': 2} }}",
     "True|True|True|True"},
    {"{{ messages[0].role }}|{{ messages[0]['content'] }}|{{ messages[-1].role }}|{{ messages[5] "
     "}}|{{ messages[0].missing }}|{{ nothing }}",
     "user|hi|assistant|||"},
    {"{% set l = [0, 1, 2, 3, 4] %}{{ l[1:] }}{{ l[:2] }}{{ l[::-1] }}{{ l[1:4:2] }}{{ l[-2:] }}{{ "
     "l[10:] }}{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ 'abc'[1] }}",
     "[1, 2, 3, 4][0, 1][4, 3, 2, 1, 0][1, 3][3, 4][]élolléhb"},
    {"{{ messages.0.role }}|{{ {'a': {'b': 'c'}}.a.b }}", "user|c"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
     "12121"},
    {"{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}", "in-if"},
    {"{% set ns = namespace(count=0, seen='') %}{% for m in ['a', 'b', 'c'] %}{% set ns.count = "
     "ns.count + 1 %}{% set ns.seen = ns.seen ~ m %}{% endfor %}{{ ns.count }} {{ ns.seen }}",
     "3 abc"},
    {"{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]", "[  inner 2  ]"},
    {"{% set a = 'x', 'y' %}{{ a }}", "('x', 'y')"},
    {"{% for m in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
     "loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;"},
    {"{% for m in ['a', 'b', 'c'] %}{{ loop.previtem }}>{{ m }}<{{ loop.nextitem }};{% endfor %}",
     ">a<b;a>b<c;b>c<;"},
    {"{% for i in [1, 2, 3, 4] if i is even %}{{ i }}/{{ loop.length }} {% endfor %}", "2/2 4/2 "},
    {"{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in undefined_var %}x{% endfor %}|{% "
     "for c in 'ab' %}{{ c }}.{% endfor %}",
     "empty||a.b."},
    {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in {'a': 1, "
     "'b': 2} %}{{ k }}{% endfor %}",
     "a=1,b=2,|ab"},
    {"{% for i in [1, 2, 3, 4, 5] %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% "
     "break %}{% endif %}{{ i }}{% endfor %}",
     "13"},
    {"{% for a in [1, 2] %}{% for b in [3, 4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ "
     "loop.index }}|{% endfor %}",
     "131 142 1|231 242 2|"},
    {"{{ '  x  ' | trim }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}|{{ 'hello world' | title }}|{{ "
     "'hELLO' | capitalize }}",
     "x|ABC|abc|Hello World|Hello"},
    {"{{ [1, 2, 3] | length }}|{{ 'héllo' | length }}|{{ {'a': 1} | count }}|{{ undefined_var | "
     "length }}",
     "3|5|1|0"},
    {"{{ [1, 2, 3] | join(', ') }}|{{ ['a', 'b'] | join }}|{{ messages | map(attribute='role') | "
     "join('+') }}",
     "1, 2, 3|ab|user+assistant"},
    {"{{ undefined_var | default('dflt') }}|{{ '' | default('e', true) }}|{{ 'set' | d('no') }}",
     "dflt|e|set"},
    {"{{ [3, 1, 2] | first }}|{{ [3, 1, 2] | last }}|{{ 'abc' | first }}|{{ [1, 2] | reverse | "
     "list }}|{{ 'abc' | reverse }}",
     "3|2|a|[2, 1]|cba"},
    {"{{ messages | tojson }}|{{ {'a': [1, 'é', none, true], 'b': {}} | tojson }}|{{ 'q\"\\n' | "
     "tojson }}",
     "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
     "\"yo\"}]|{\"a\": [1, \"é\", null, true], \"b\": {}}|\"q\\\"\\n\""},
    {"{{ {'a': [1, 2], 'b': {'c': 'd'}, 'e': []} | tojson(indent=2) }}",
     "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": \"d\"\n  },\n  \"e\": []\n}"},
    {"{{ '12' | int + 1 }}|{{ 'x' | int }}|{{ 5 | string ~ 'a' }}|{{ -3 | abs }}|{{ 'a-b-a' | "
     "replace('a', 'X') }}",
     "13|0|5a|3|X-b-X"},
    {"{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('equalto', 2) | list "
     "}}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | "
     "rejectattr('role', 'equalto', 'user') | list | length }}",
     "[1, 3]|[1, 3, 4]|1|1"},
    {"{{ {'b': 1, 'a': 2} | items | list }}|{{ 'ab' | list }}", "[('b', 1), ('a', 2)]|['a', 'b']"},
    {"{{ x is defined }}|{{ messages is defined }}|{{ x is undefined }}|{{ none is none }}|{{ 'a' "
     "is string }}|{{ 1 is string }}|{{ 1 is number }}|{{ true is boolean }}|{{ 1 is integer }}",
     "False|True|True|True|True|False|True|True|True"},
    {"{{ {} is mapping }}|{{ [] is mapping }}|{{ [] is iterable }}|{{ 'a' is iterable }}|{{ 1 is "
     "iterable }}|{{ [] is sequence }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ "
     "9 is divisibleby(2) }}",
     "True|False|True|True|False|True|True|True|True|False"},
    {"{{ messages[0].name is not defined }}|{{ 'x' is not none }}|{{ false is false }}|{{ true is "
     "true }}|{{ 1 is true }}|{{ 2 is eq(2) }}|{{ 2 is ne 2 }}|{{ 'a' is in 'abc' }}|{{ 'ab' is "
     "lower }}|{{ 'AB' is upper }}",
     "True|True|True|True|False|True|False|True|True|True"},
    {"{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x  '.lstrip() }}.|{{ '  x  '.rstrip() "
     "}}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}",
     "x|a|x  .|  x|ABab"},
    {"{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith('lo') }}|{{ 'hello'.startswith(('x', "
     "'h')) }}|{{ 'hello'.endswith('x') }}",
     "True|True|True|False"},
    {"{{ ' a  b '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ "
     "'</think>x'.split('</think>')[-1] }}|{{ 'a-b'.replace('-', '+') }}|{{ ', '.join(['x', 'y']) "
     "}}",
     "['a', 'b']|['a', 'b', '', 'c']|['a', 'b c']|x|a+b|x, y"},
    {"{{ {'a': 1}.get('a') }}|{{ {'a': 1}.get('b') }}|{{ {'a': 1}.get('b', 'z') }}|{{ {'a': "
     "1}.keys() | list }}|{{ {'a': 1}.values() | list }}",
     "1|None|z|['a']|[1]"},
    {"{{ 'a  '.strip() }}|{{ '　x　' | trim }}|", "a|x|"},
    {"{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
     "hiyo"},
    // Argument unpacking (AI21 Jamba 1.6's template calls with *): *list after the positional
    // arguments, **dict last.
    {"{% macro f(a, b, c='z') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ f(*['x', 'y']) }}|{{ f(1, "
     "*[2], **{'c': 3}) }}|{{ f(**{'b': 2, 'a': 1}) }}",
     "x-y-z|1-2-3|1-2-z"},
    {"{% macro f() %}{{ varargs }}|{{ kwargs }}{% endmacro %}{{ f(*'ab', x=1, **{'y': 2}) }}",
     "('a', 'b')|{'x': 1, 'y': 2}"},
    {"{{ range(*[1, 4]) | list }}|{{ '{}-{}'.format(*['p', 'q']) }}|{{ [messages[0].role] | "
     "join(*[', ']) }}",
     "[1, 2, 3]|p-q|user"},
};

ChatTemplateInput TwoMessages() {
  ChatTemplateInput input;
  input.messages = {{"user", "hi"}, {"assistant", "yo"}};
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  return input;
}

class JinjaSemanticsTest : public ::testing::TestWithParam<JinjaCase> {};

TEST_P(JinjaSemanticsTest, RendersLikeJinja2) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(GetParam().source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  absl::StatusOr<std::string> out = tmpl->Render(TwoMessages());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(ChatTemplateJinja, JinjaSemanticsTest, ::testing::ValuesIn(kCases));

struct ErrorCase {
  const char* source;
  const char* message;  // the whole message must contain this
};

// Rejected at Parse, with the position of the problem.
const ErrorCase kParseErrors[] = {
    {"{% if x %}a", "line 1, column 12: unexpected end of template, expected '{% endif %}'"},
    {"{{ x ", "line 1, column 1: unclosed '{{' (missing '}}')"},
    {"ab\n {% if x", "line 2, column 2: unclosed '{%' (missing '%}')"},
    {"{% for %}{% endfor %}", "line 1, column 8: expected a name, found '%}'"},
    {"{% for x of y %}{% endfor %}", "line 1, column 10: expected 'in', found 'of'"},
    {"x\n{{ name | wordwrap }}", "line 2, column 11: unsupported filter 'wordwrap'"},
    {"{{ x is escaped }}", "line 1, column 9: unsupported test 'escaped'"},
    {"{% macro f(a=1, b) %}{% endmacro %}", "line 1, column 17: non-default argument follows"},
    {"{% include 'x' %}", "the 'include' statement is not supported"},
    {"{% macro f(a, a) %}{% endmacro %}", "line 1, column 15: duplicate argument 'a'"},
    {"{% break %}", "line 1, column 4: 'break' outside a for loop"},
    {"a\n  {{ 'x' ~ }}", "line 2, column 12: expected an expression, found '}}'"},
    {"{# never closed", "line 1, column 1: unclosed comment"},
    {"{{ 'abc }}", "line 1, column 4: unterminated string literal"},
    {"{% endif %}", "line 1, column 4: unexpected statement 'endif'"},
    {"{{ (1 }}", "line 1, column 7: unexpected '}'"},
    {"{{ a ]] }}", "line 1, column 6: unexpected ']'"},
    {"{{ a $ b }}", "line 1, column 6: unexpected character '$'"},
    {"{% set a, b = 1, 2 %}", "assigning to several names at once is not supported"},
    {"{% for x in y recursive %}{% endfor %}", "recursive loops are not supported"},
    {"{% if %}{% endif %}", "line 1, column 7: expected an expression, found '%}'"},
    {"{{ f(a=1, 2) }}", "positional argument after keyword argument"},
    {"{{ f(*a, b) }}", "line 1, column 10: positional argument after *list"},
    {"{{ f(*a, *b) }}", "*list must come once"},
    {"{{ f(**a, *b) }}", "*list must come once, before any **dict argument"},
    {"{{ f(**a, **b) }}", "only one **dict argument is allowed"},
    {"{{ f(**a, b=1) }}", "keyword argument after **dict"},
    {"{{ 99999999999999999999 }}", "integer literal out of range"},
    {"{{ '\\x4' }}", "malformed \\x, \\u or \\U escape"},
};

TEST(ChatTemplateJinja, ParseErrorsNameTheirPosition) {
  for (const ErrorCase& c : kParseErrors) {
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(c.source);
    ASSERT_FALSE(tmpl.ok()) << c.source;
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument) << c.source;
    EXPECT_THAT(std::string(tmpl.status().message()), HasSubstr(c.message)) << c.source;
    EXPECT_THAT(std::string(tmpl.status().message()), HasSubstr("chat template: line "));
  }
}

// Parse fine, fail at Render the way jinja2 fails.
const ErrorCase kRenderErrors[] = {
    {"{{ raise_exception('boom') }}", "chat template: line 1, column 4: boom"},
    {"{{ foo.bar }}", "line 1, column 7: 'foo' is undefined"},
    {"{{ foo['bar'] }}", "'foo' is undefined"},
    {"{{ foo() }}", "line 1, column 4: 'foo' is undefined"},
    {"{{ messages[0].name + 'x' }}", "'dict object' has no attribute 'name'"},
    {"{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'"},
    {"{{ 1 // 0 }}", "integer division or modulo by zero"},
    {"{{ 7 / 0 }}", "float division by zero"},
    {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
    {"{% set x = 1 %}{% set x.a = 2 %}", "cannot assign attribute 'a' on non-namespace object 'x'"},
    {"{% for x in none %}{% endfor %}", "'NoneType' object is not iterable"},
    {"{% for a, b in [1] %}{% endfor %}", "cannot unpack"},
    {"{{ 'a' < 1 }}", "'<' not supported between instances of 'str' and 'int'"},
    {"{{ 1 in none }}", "argument of type 'NoneType' is not iterable"},
    {"{{ 5 | length }}", "object of type 'int' has no len()"},
    {"{{ messages | tojson(separators=1) }}", "separators must be"},
    {"{{ 'abc'.strip(1) }}", "argument 'chars' must be a string, not int"},
    {"{{ 'a'.split('') }}", "empty separator"},
    {"{{ [1][::0] }}", "slice step cannot be zero"},
    {"{{ messages[0].content.nope() }}", "'str object' has no attribute 'nope'"},
    {"{{ raise_exception() }}", "raise_exception takes one argument"},
    {"{{ (namespace(a=1)) | tojson }}", "not JSON serializable"},
    {"{% macro f(a) %}{% endmacro %}{{ f(*1) }}", "argument after *"},
    {"{% macro f(a) %}{% endmacro %}{{ f(**[1]) }}",
     "argument after ** must be a mapping, not list"},
    {"{% macro f(a) %}{% endmacro %}{{ f(a=1, **{'a': 2}) }}",
     "got multiple values for keyword argument 'a'"},
};

TEST(ChatTemplateJinja, RenderErrorsAreStatusesWithPosition) {
  for (const ErrorCase& c : kRenderErrors) {
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(c.source);
    ASSERT_TRUE(tmpl.ok()) << c.source << ": " << tmpl.status();
    absl::StatusOr<std::string> out = tmpl->Render(TwoMessages());
    ASSERT_FALSE(out.ok()) << c.source << " rendered " << *out;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.source;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.message)) << c.source;
  }
}

TEST(ChatTemplateJinja, MessageNameIsPresentOnlyWhenGiven) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(
      "{% for m in messages %}{{ m.role }}{% if m.name is defined %}({{ m.name }}){% endif %};"
      "{% endfor %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplateInput input;
  input.messages = {{"user", "a", "ann"}, {"user", "b"}};
  EXPECT_EQ(*tmpl->Render(input), "user(ann);user;");
}

TEST(ChatTemplateJinja, ToolsAndDocumentsAreNoneAsInTransformers) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(
      "{{ tools is none }}{{ documents is none }}{% if tools %}T{% endif %}{{ "
      "add_generation_prompt }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplateInput input;
  input.add_generation_prompt = false;
  EXPECT_EQ(*tmpl->Render(input), "TrueTrueFalse");
}

TEST(ChatTemplateJinja, RendersAreIndependent) {
  // A namespace mutated in one render must not leak into the next.
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(*tmpl->Render(TwoMessages()), "2");
  EXPECT_EQ(*tmpl->Render(TwoMessages()), "2");
  const ChatTemplate copy = *tmpl;
  EXPECT_EQ(*copy.Render(TwoMessages()), "2");
  EXPECT_EQ(copy.source(), tmpl->source());
}

}  // namespace
}  // namespace llmserve::common
