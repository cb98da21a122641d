// The language added for real templates (issue 17): macros and call blocks, range/dict/
// strftime_now, floats, more filters, tests and str methods, Markup-safe strings, integer dict
// keys; and what the template sees of tools, tool calls and `content: null`. Every expected
// string in kCases is jinja2 3.1's output under transformers' environment (trim_blocks,
// lstrip_blocks, its tojson and strftime_now) for the input of ToolInput(), with the tool-call
// arguments preprocessed into dicts the way vLLM does.
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "common/chat_template/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

using ::testing::HasSubstr;

constexpr char kTools[] =
    R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
    R"("properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1.5}}}}}])";

ChatTemplateInput ToolInput() {
  ChatTemplateInput input;
  input.messages = {
      {.role = "user", .content = "Weather?"},
      {.role = "assistant",
       .content_is_none = true,
       .tool_calls = {{.id = "call_1",
                       .name = "get_weather",
                       .arguments = R"({"city": "Paris", "days": 2})"}}},
      {.role = "tool", .content = "sunny", .tool_call_id = "call_1"},
      {.role = "assistant",
       .content = "x",
       .tool_calls = {{.id = "call_2", .name = "get_weather", .arguments = "not json"}}},
  };
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  input.tools_json = kTools;
  input.now = absl::FromCivil(absl::CivilSecond(2025, 3, 7, 14, 5, 9), absl::UTCTimeZone());
  return input;
}

absl::StatusOr<std::string> Render(const std::string& source, const ChatTemplateInput& input) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(input);
}

struct Case {
  const char* source;
  const char* expected;
};

const Case
    kCases[] =
        {
            {R"j({% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }})j",
             R"j(2)j"},
            {R"j({% macro m() %}[{{ y }}]{% endmacro %}{% for y in [1, 2] %}{{ m() }}{% endfor %})j",
             R"j([][])j"},
            {R"j({% for y in [1, 2] %}{% macro m() %}[{{ y }}]{% endmacro %}{{ m() }}{% endfor %})j",
             R"j([1][2])j"},
            {R"j({% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(b=3, a=4) }})j",
             R"j(11!|12|43)j"},
            {R"j({% macro m(a) %}{{ a }}{{ varargs }}{% endmacro %}{{ m(1, 2, 'x') }})j",
             R"j(1(2, 'x'))j"},
            {R"j({% macro m(a) %}{{ a }}{{ kwargs }}{% endmacro %}{{ m(1, b=2, c='x') }})j",
             R"j(1{'b': 2, 'c': 'x'})j"},
            {R"j({% macro m(a) %}{{ a }}|{{ a is defined }}{% endmacro %}{{ m() }})j",
             R"j(|False)j"},
            {R"j({% macro m(a) %}<{{ caller(a) }}>{% endmacro %}{% call(x) m(5) %}c{{ x }}{% endcall %})j",
             R"j(<c5>)j"},
            {R"j({% macro m() %}<{{ caller() }}>{% endmacro %}{% set v = 3 %}{% for i in [1, 2] %}{% call m() %}{{ i }}{{ v }}{% endcall %}{% endfor %})j",
             R"j(<13><23>)j"},
            {R"j({% macro m() %}{% set z = 3 %}{{ z }}{% endmacro %}{{ m() }}{{ z }})j", R"j(3)j"},
            {R"j({% macro m(n) %}{{ n }}{% if n > 0 %}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(3) }})j",
             R"j(3210)j"},
            {R"j({% macro m() %}x{% endmacro %}{{ m is callable }}|{{ m is defined }}|{{ m() is string }})j",
             R"j(True|True|True)j"},
            {R"j({% set ns = namespace(a=1) %}{% macro m() %}{% set ns.a = 5 %}{% endmacro %}{{ m() }}{{ ns.a }})j",
             R"j(5)j"},
            {R"j({% macro outer() %}{% macro inner() %}I{{ caller() }}{% endmacro %}{% call inner() %}C{% endcall %}{% endmacro %}{{ outer() }})j",
             R"j(IC)j"},
            {R"j({% macro m() %}{% for i in [1, 2, 3] %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}{% endmacro %}{{ m() }})j",
             R"j(12)j"},
            {R"j({{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}{{ range(-3) | list }}{% for i in range(2) %}{{ i }}{% endfor %})j",
             R"j([0, 1, 2][1, 4, 7][5, 3, 1][]01)j"},
            {R"j({{ dict(a=1, b='x') }}{{ dict() }}{{ dict({'k': 1}, j=2) | tojson }})j",
             R"j({'a': 1, 'b': 'x'}{}{"k": 1, "j": 2})j"},
            {R"j({{ 'ab\ncd\n\nef' | indent }}|{{ 'ab\ncd\n\nef' | indent(2, true) }}|{{ 'ab\ncd\n\nef\n' | indent(2, blank=true) }}|{{ 'x\ny' | indent('--') }})j",
             R"j(ab
    cd

    ef|  ab
  cd

  ef|ab
  cd
  
  ef
  |x
--y)j"},
            {R"j({{ strftime_now('%d %m %Y %y %b %B %a %A %H %M %S %p %I %j %e %-d %-m %%') }})j",
             R"j(07 03 2025 25 Mar March Fri Friday 14 05 09 PM 02 066  7 7 3 %)j"},
            {R"j({{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}|{{ strftime_now('%Y-%m-%d') }})j",
             R"j(07 Mar 2025|March 07, 2025|2025-03-07)j"},
            {R"j({{ 1.5 }}|{{ 2.0 }}|{{ 1e20 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1 / 3 }}|{{ 7 / 2 }}|{{ 6 / 3 }})j",
             R"j(1.5|2.0|1e+20|1e+16|1000000000000000.0|0.0001|1e-05|0.3333333333333333|3.5|2.0)j"},
            {R"j({{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ 2.0 ** 3 }}|{{ 1 + 1.5 }}|{{ 1 == 1.0 }}|{{ 1.5 < 2 }}|{{ -1.5 }})j",
             R"j(3.0|0.5|8.0|2.5|True|True|-1.5)j"},
            {R"j({{ 3.7 | int }}|{{ '3.7' | int }}|{{ '3.7' | float }}|{{ 'x' | float }}|{{ 3 | float }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 3.14159 | round(2) }}|{{ 3.1 | round(method='ceil') }})j",
             R"j(3|3|3.7|0.0|3.0|2.0|4.0|3.14|4.0)j"},
            {R"j({{ [1.5, 2, 'a'] | tojson }}|{{ {'a': 1.0e-7} | tojson }}|{{ 1.5 is number }}|{{ 1.5 is float }}|{{ 1 is float }})j",
             R"j([1.5, 2, "a"]|{"a": 1e-07}|True|True|False)j"},
            {R"j({{ 'héllo' | tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}|{{ [1] | tojson(indent=2) }})j",
             R"j("h\u00e9llo"|{"a": 2, "b": 1}|[1,{"a":2}]|[
  1
])j"},
            {R"j({{ {'b': 1, 'a': 2} | dictsort }}|{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}|{{ {'B': 1, 'a': 2} | dictsort }}|{{ {'B': 1, 'a': 2} | dictsort(true) }})j",
             R"j([('a', 2), ('b', 1)]|[('a', 2), ('b', 1)]|[('a', 2), ('B', 1)]|[('B', 1), ('a', 2)])j"},
            {R"j({{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ [{'n': 2}, {'n': 1}] | sort(attribute='n') }})j",
             R"j([1, 2, 3]|['A', 'b', 'c']|['A', 'b', 'c']|[3, 2, 1]|[{'n': 1}, {'n': 2}])j"},
            {R"j({{ [1, 2, 1, 'a', 'A'] | unique | list }}|{{ [3, 1, 2] | min }}|{{ [3, 1, 2] | max }}|{{ ['b', 'A'] | max }}|{{ [1, 2, 3] | sum }}|{{ [1.5, 2] | sum }})j",
             R"j([1, 2, 'a']|1|3|b|6|3.5)j"},
            {R"j({{ messages | map(attribute='role') | join(',') }}|{{ [1, 2] | map('string') | join('-') }}|{{ ['a ', ' b'] | map('trim') | list }}|{{ none | selectattr('x') | list }})j",
             R"j(user,assistant,tool,assistant|1-2|['a', 'b']|[])j"},
            {R"j({{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a b  c '.rsplit(none, 1) }}|{{ 'abcabc'.count('b') }}|{{ 'héllo'.find('l') }}|{{ 'abc'.rfind('z') }})j",
             R"j(['a,b', 'c']|[' a b', 'c']|2|2|-1)j"},
            {R"j({{ '{} and {}'.format(1, 'x') }}|{{ '{0}{0}'.format('a') }}|{{ '{n}!'.format(n=3) }}|{{ 'a\nb\r\nc'.splitlines() }}|{{ '12'.isdigit() }}|{{ 'abc'.removeprefix('a') }})j",
             R"j(1 and x|aa|3!|['a', 'b', 'c']|True|bc)j"},
            {R"j({{ '%s is %d' % ('x', 3) }}|{{ '%s' % 'y' }}|{{ '%05.2f' % 3.14159 }}|{{ '%-4s|' % 'a' }}|{{ '%r' % 'q' }}|{{ '%(a)s' % {'a': 1} }}|{{ '%x' % 255 }}|{{ 'v%s' | format(2) }})j",
             R"j(x is 3|y|03.14|a   ||'q'|1|ff|v2)j"},
            {R"j({% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %})j",
             R"j(a2;b13;a2;)j"},
            {R"j({% filter upper %}hello {{ 'x' }}{% endfilter %}|{% filter trim | upper %}  ab  {% endfilter %})j",
             R"j(HELLO X|AB)j"},
            {R"j({{ "'" | safe + "<b>" }}|{{ "<a>" ~ "<b>" | safe }}|{{ "<" | e }}|{{ "<" | escape | safe }})j",
             R"j('&lt;b&gt;|<a><b>|&lt;|&lt;)j"},
            {R"j({% set d = {0: 'a', 1: 'b'} %}{{ d[0] }}{{ d }}{{ d | tojson }}{% for k, v in d.items() %}{{ k + 1 }}{% endfor %}{{ 0 in d }}{{ d.get(1) }}{% for k, v in {2: 'x', 1: 'y'} | dictsort %}{{ k }}{% endfor %})j",
             R"j(a{0: 'a', 1: 'b'}{"0": "a", "1": "b"}12Trueb12)j"},
            {R"j({% if false %}{{ x | no_such_filter }}{% endif %}{{ 1 if true else x | no_such_filter }}ok)j",
             R"j(1ok)j"},
            {R"j({{ 5 is gt 3 }}|{{ 5 is lt 3 }}|{{ 'a' is le 'b' }}|{{ none is sameas none }}|{{ 1 is sameas true }})j",
             R"j(True|False|True|True|False)j"},
            {R"j({{ messages[1].content is none }}|{{ messages[1].tool_calls[0].function.arguments.city }}|{{ messages[1].tool_calls[0].function.arguments | tojson }}|{{ messages[1].tool_calls[0].id }}|{{ messages[1].tool_calls[0].type }})j",
             R"j(True|Paris|{"city": "Paris", "days": 2}|call_1|function)j"},
            {R"j({{ messages[2].tool_call_id }}|{{ messages[2].tool_calls is defined }}|{{ messages[0].tool_call_id is defined }}|{{ messages[3].tool_calls[0].function.arguments }})j",
             R"j(call_1|False|False|not json)j"},
            {R"j({{ tools | tojson }}|{{ tools[0].function.parameters.properties | list }})j",
             R"j([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1.5}}}}}]|['city', 'days'])j"},
            {R"j({% generation %}g{{ 1 }}{% endgeneration %})j", R"j(g1)j"},
            {R"j({% macro m(x) %}{% for i in x %}{{ loop.index }}{{ i }}{% endfor %}{% endmacro %}{% for j in [1] %}{{ m([7, 8]) }}{{ loop.index }}{% endfor %})j",
             R"j(17281)j"},
            {R"j({% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{% set q = 1 %}{{ q }}{% endcall %}{{ q }})j",
             R"j(1)j"},
            {R"j({% macro m(a=none) %}{{ a | default('d') }}|{{ a is none }}{% endmacro %}{{ m() }}{{ m(0) }})j",
             R"j(None|True0|False)j"},
            {R"j({{ ('<'|safe) | length }}|{{ ('<'|safe) | tojson }}|{{ ('a'|safe) ~ 1 }}|{{ ('a'|safe) == 'a' }}|{{ ['<'|safe] | join(',') }})j",
             R"j(1|"<"|a1|True|<)j"},
            {R"j({{ ('a'|safe).upper() }}|{{ ('<a>'|safe + '<').strip() }})j", R"j(A|<a>&lt;)j"},
            {R"j({% set x = '<'|safe %}{{ x + '>' }}|{{ '>' + x }}|{{ x + x }})j",
             R"j(<&gt;|&gt;<|<<)j"},
            {R"j({% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{{ tc.function.name }}({{ tc.function.arguments | tojson }}){% endfor %}{% endif %}{% endfor %})j",
             R"j(get_weather({"city": "Paris", "days": 2})get_weather("not json"))j"},
            {R"j({% for m in messages %}{{ m.content is string }}{{ m.content | default('none') }};{% endfor %})j",
             R"j(TrueWeather?;FalseNone;Truesunny;Truex;)j"},
            {R"j({{ messages | selectattr('role', 'equalto', 'tool') | list | length }}|{{ messages | rejectattr('content') | map(attribute='role') | list }})j", R"j(1|['assistant'])j"},
            {R"j({{ tools | map(attribute='function') | map(attribute='name') | list }}|{{ tools[0].function.parameters | tojson(indent=2) }})j",
             R"j(['get_weather']|{
  "type": "object",
  "properties": {
    "city": {
      "type": "string"
    },
    "days": {
      "type": "integer",
      "default": 1.5
    }
  }
})j"},
            {R"j({{ tools[0] | items | list }})j",
             R"j([('type', 'function'), ('function', {'name': 'get_weather', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}, 'days': {'type': 'integer', 'default': 1.5}}}})])j"},
            {R"j({% for k, v in tools[0].function.parameters.items() %}{{ k }}={{ v }};{% endfor %})j",
             R"j(type=object;properties={'city': {'type': 'string'}, 'days': {'type': 'integer', 'default': 1.5}};)j"},
            {R"j({{ 10 / 4 }}|{{ (10 / 4) | int }}|{{ 10 % 3 }}|{{ 2 ** -1 }}|{{ 0.1 + 0.2 }}|{{ 1e300 * 1e10 }}|{{ -1e300 * 1e10 }})j",
             R"j(2.5|2|1|0.5|0.30000000000000004|inf|-inf)j"},
            {R"j({{ [0.1, 1e-5, 123456789012345678.0, 1.0e16, 5e-324] }})j",
             R"j([0.1, 1e-05, 1.2345678901234568e+17, 1e+16, 5e-324])j"},
            {R"j({{ 3 | round }}|{{ 2.675 | round(2) }}|{{ -2.5 | round }}|{{ 1 | round(1, 'floor') }})j",
             R"j(3|2.67|-2.0|1.0)j"},
            {R"j({{ '%.3f' % 2.0 }}|{{ '%5d|' % 42 }}|{{ '%-5d|' % 42 }}|{{ '%+d' % 5 }}|{{ '%s' % [1, 2] }}|{{ '%s' % none }}|{{ '%.1s' % 'abc' }})j",
             R"j(2.000|   42||42   ||+5|[1, 2]|None|a)j"},
            {R"j({{ dict(a=1).items() | list }}|{{ dict(a=1, b=2) | length }}|{{ dict(x=dict(y=1)).x.y }})j",
             R"j([('a', 1)]|2|1)j"},
            {R"j({{ strftime_now('%H:%M:%S %p %I') }}|{{ strftime_now('%A, %B %-d, %Y') }}|{{ strftime_now('%c') }})j",
             R"j(14:05:09 PM 02|Friday, March 7, 2025|Fri Mar  7 14:05:09 2025)j"},
            {R"j({{ {'a': [1, {'b': none}]} | tojson(indent=4) }})j",
             R"j({
    "a": [
        1,
        {
            "b": null
        }
    ]
})j"},
            {R"j({{ 'Hello %s!' | format('you') }}|{{ '%s-%s' | format(1, 2) }})j",
             R"j(Hello you!|1-2)j"},
            {R"j({{ [1, 2, 3] | first }}|{{ [] | first }}|{{ 'abc' | last }}|{{ {'a': 1} | first }})j",
             R"j(1||c|a)j"},
            {R"j({{ [3, 2, 1] | sort | first }}|{{ ['a', 'B'] | sort | join }}|{{ [['b', 1], ['a', 2]] | sort | first }})j",
             R"j(1|aB|['a', 2])j"},
            {R"j({% set d = {'b': 1, 'a': 2} %}{% for k in d %}{{ k }}{% endfor %}|{{ d | dictsort | first }}|{{ d.keys() | list }}|{{ d.values() | list }})j",
             R"j(ba|('a', 2)|['b', 'a']|[1, 2])j"},
            {R"j({{ 'a-b-c'.split('-', 1) }}|{{ 'a b'.split(' ') }}|{{ '  '.split() }}|{{ 'x'.rsplit('x') }})j",
             R"j(['a', 'b-c']|['a', 'b']|[]|['', ''])j"},
            {R"j({{ 'abc'.index('b') }}|{{ 'aaa'.count('aa') }}|{{ ''.count('') }}|{{ 'abc'.startswith(('x', 'a')) }})j",
             R"j(1|1|1|True)j"},
            {R"j({{ '{}'.format(none) }}|{{ '{}{}'.format(1.5, true) }}|{{ '{{x}}'.format() }})j",
             R"j(None|1.5True|{x})j"},
            {R"j({{ 1 is number }}|{{ true is number }}|{{ 'a' is iterable }}|{{ none is iterable }}|{{ 1.0 is integer }}|{{ {} is mapping }}|{{ [] is sequence }})j",
             R"j(True|True|True|False|False|True|True)j"},
            {R"j({{ [1, 2] | min }}|{{ [] | max }}|{{ ['a', 'b'] | unique | list }}|{{ [{'a': 1}, {'a': 1}] | unique(attribute='a') | list }})j",
             R"j(1||['a', 'b']|[{'a': 1}])j"},
            {R"j({{ -7 // 2.0 }}|{{ 7 % -3 }}|{{ 7.0 % -3 }}|{{ -0.0 }}|{{ 1 / 3 * 3 }})j",
             R"j(-4.0|-2|-2.0|-0.0|1.0)j"},
            {R"j({% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i * 1.5] %}{% endfor %}{{ ns.items }})j",
             R"j([0.0, 1.5, 3.0])j"},
            {R"j({% macro m() %}{{ varargs[0] }}{{ kwargs.k }}{% endmacro %}{{ m('v', k='w') }})j",
             R"j(vw)j"},
            {R"j({% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(b=2) }})j", R"j(2)j"},
            {R"j({% macro m(a) %}{{ a }}{% endmacro %}{% set n = m %}{{ n(3) }})j", R"j(3)j"},
            {R"j({% macro m(a) -%}  {{ a }}  {%- endmacro %}[{{ m(1) }}])j", R"j([1])j"},
            {R"j({% macro m(a) %}
  line {{ a }}
{% endmacro %}[{{ m(1) }}])j",
             R"j([  line 1
])j"},
};

TEST(ChatTemplateLanguage, RendersAsJinja2) {
  for (const Case& c : kCases) {
    absl::StatusOr<std::string> out = Render(c.source, ToolInput());
    ASSERT_TRUE(out.ok()) << c.source << ": " << out.status();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
}

struct ErrorCase {
  const char* source;
  absl::StatusCode code;
  const char* message;
};

const ErrorCase kRenderErrors[] = {
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", absl::StatusCode::kInvalidArgument,
     "line 1, column 41: macro 'm' takes not more than 1 argument(s)"},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}", absl::StatusCode::kInvalidArgument,
     "macro 'm' takes no keyword argument 'b'"},
    // As jinja2: a keyword for a parameter already given positionally is "no keyword argument".
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}", absl::StatusCode::kInvalidArgument,
     "macro 'm' takes no keyword argument 'a'"},
    {"{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}", absl::StatusCode::kInvalidArgument,
     "No caller defined"},
    {"{% macro m(a) %}{{ a + 1 }}{% endmacro %}{{ m() }}", absl::StatusCode::kInvalidArgument,
     "parameter 'a' was not provided"},
    {"{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", absl::StatusCode::kOutOfRange,
     "macro calls nested deeper than 64"},
    {"{% macro m() %}{% call m() %}{% endcall %}{% endmacro %}{{ m() }}",
     absl::StatusCode::kInvalidArgument, "invoked with two values for the special caller"},
    {"{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{{ m() }}{% endcall %}",
     absl::StatusCode::kInvalidArgument, "No caller defined"},
    {"{% set ns = namespace(c=none) %}{% macro m() %}{% set ns.c = caller %}{% endmacro %}"
     "{% call m() %}x{% endcall %}{{ ns.c() }}",
     absl::StatusCode::kInvalidArgument, "caller() called after its {% call %} block ended"},
    {"{{ range(100001) | length }}", absl::StatusCode::kOutOfRange,
     "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."},
    {"{{ range(0, 9223372036854775807, 2) | length }}", absl::StatusCode::kOutOfRange,
     "Range too big"},
    {"{{ range(1, 2, 0) }}", absl::StatusCode::kInvalidArgument, "range() arg 3 must not be zero"},
    {"{{ range('a') }}", absl::StatusCode::kInvalidArgument,
     "'str' object cannot be interpreted as an integer"},
    {"{{ dict(1) }}", absl::StatusCode::kInvalidArgument, "dict() takes a dict"},
    {"{{ strftime_now() }}", absl::StatusCode::kInvalidArgument, "strftime_now takes one"},
    {"{{ 1 / 0 }}", absl::StatusCode::kInvalidArgument, "float division by zero"},
    {"{{ '%d' % 'x' }}", absl::StatusCode::kInvalidArgument, "a real number is required"},
    {"{{ '%s %s' % ('a',) }}", absl::StatusCode::kInvalidArgument,
     "not enough arguments for format string"},
    {"{{ 'abc' % 5 }}", absl::StatusCode::kInvalidArgument, "not all arguments converted"},
    {"{{ [1, 'a'] | sort }}", absl::StatusCode::kInvalidArgument,
     "'<' not supported between instances of 'str' and 'int'"},
    {"{% if true %}{{ x | no_such_filter }}{% endif %}", absl::StatusCode::kInvalidArgument,
     "unsupported filter 'no_such_filter'"},
    {"{{ ('x\n' * 100000) | indent(5000) }}", absl::StatusCode::kInvalidArgument,
     "indent: result too large"},
};

TEST(ChatTemplateLanguage, RenderErrorsAsJinja2WithPosition) {
  for (const ErrorCase& c : kRenderErrors) {
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(c.source);
    ASSERT_TRUE(tmpl.ok()) << c.source << ": " << tmpl.status();
    absl::StatusOr<std::string> out = tmpl->Render(ToolInput());
    ASSERT_FALSE(out.ok()) << c.source << " rendered " << *out;
    EXPECT_EQ(out.status().code(), c.code) << c.source << ": " << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.message)) << c.source;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("chat template: line "));
  }
}

TEST(ChatTemplateLanguage, ParseErrorsForMacrosAndUnknownFilters) {
  const std::pair<const char*, const char*> kParseErrors[] = {
      {"{% macro m(a=1, b) %}{% endmacro %}", "line 1, column 17: non-default argument follows"},
      {"{% macro m(a, a) %}{% endmacro %}", "duplicate argument 'a'"},
      {"{% macro m() %}", "expected '{% endmacro %}'"},
      {"{% macro m() %}{% break %}{% endmacro %}", "'break' outside a for loop"},
      {"{% for i in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}",
       "'break' outside a for loop"},
      {"{% call m %}{% endcall %}", "expected a call"},
      {"{{ x | no_such_filter }}", "unsupported filter 'no_such_filter'"},
      // Only an if statement or inline if defers an unknown filter; a loop inside one does not.
      {"{% if x %}{% for i in x %}{{ i | no_such_filter }}{% endfor %}{% endif %}",
       "unsupported filter"},
      {"{% filter no_such_filter %}x{% endfilter %}", "unsupported filter"},
      {"{{ 1.5e }}", "expected '}}'"},
  };
  for (const auto& [source, message] : kParseErrors) {
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    ASSERT_FALSE(tmpl.ok()) << source;
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_THAT(std::string(tmpl.status().message()), HasSubstr(message)) << source;
  }
}

TEST(ChatTemplateLanguage, StrftimeNowUsesTheGivenClockElseTheRealOne) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplateInput input;
  input.now = absl::FromCivil(absl::CivilSecond(2024, 12, 31, 23, 59, 59), absl::UTCTimeZone());
  EXPECT_EQ(*tmpl->Render(input), "31 Dec 2024");
  input.now.reset();
  const absl::Time before = absl::Now();
  absl::StatusOr<std::string> out = tmpl->Render(input);
  const absl::Time after = absl::Now();
  ASSERT_TRUE(out.ok()) << out.status();
  // The real clock: one of the dates around the render (it may cross midnight).
  EXPECT_TRUE(*out == absl::FormatTime("%d %b %Y", before, absl::UTCTimeZone()) ||
              *out == absl::FormatTime("%d %b %Y", after, absl::UTCTimeZone()))
      << *out;
}

TEST(ChatTemplateLanguage, ToolsAreNoneWithoutToolsJson) {
  ChatTemplateInput input = ToolInput();
  input.tools_json.clear();
  EXPECT_EQ(*Render("{{ tools is none }}", input), "True");
  EXPECT_EQ(*Render("{{ tools | length }}", ToolInput()), "1");
}

TEST(ChatTemplateLanguage, MalformedToolsJsonIsInvalidArgument) {
  for (const char* tools : {"{", "{\"type\": \"function\"}", "\"x\"", "[1,]"}) {
    ChatTemplateInput input = ToolInput();
    input.tools_json = tools;
    absl::StatusOr<std::string> out = Render("x", input);
    ASSERT_FALSE(out.ok()) << tools;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << tools;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("tools")) << tools;
  }
  ChatTemplateInput deep = ToolInput();
  deep.tools_json = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(Render("x", deep).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateLanguage, ToolCallArgumentsKeepTheirKeyOrder) {
  ChatTemplateInput input = ToolInput();
  input.messages[1].tool_calls[0].arguments = R"({"z": 1, "a": {"y": 2, "b": 3}})";
  EXPECT_EQ(*Render("{{ messages[1].tool_calls[0].function.arguments | tojson }}", input),
            R"({"z": 1, "a": {"y": 2, "b": 3}})");
  // A JSON value that is not an object stays the string it was.
  input.messages[1].tool_calls[0].arguments = "[1, 2]";
  EXPECT_EQ(*Render("{{ messages[1].tool_calls[0].function.arguments is string }}", input), "True");
}

// chat_template_kwargs: each key of the object is a variable (Qwen3's enable_thinking), values
// keep their JSON types; a key the template gets from the request itself, or one that is not an
// identifier, and anything but an object within the limits are INVALID_ARGUMENT naming it.
TEST(ChatTemplateLanguage, TemplateKwargsBecomeVariables) {
  const char* source =
      "{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on{% endif %}"
      "|{{ effort | default('none') }}|{{ budget + 1 }}|{{ tags | join(',') }}";
  ChatTemplateInput input;
  EXPECT_EQ(*Render("{% if enable_thinking is defined %}set{% else %}unset{% endif %}", input),
            "unset");
  input.template_kwargs_json = R"({"enable_thinking": false, "budget": 41, "tags": ["a", "b"]})";
  EXPECT_EQ(*Render(source, input), "off|none|42|a,b");
  input.template_kwargs_json = R"({"enable_thinking": true, "effort": "low", "budget": 0,
                                   "tags": []})";
  EXPECT_EQ(*Render(source, input), "on|low|1|");

  for (const auto& [kwargs, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": []})", "\"messages\" is a variable the chat template gets"},
           {R"({"range": 1})", "\"range\""},
           {R"({"not-an-id": 1})", "not an identifier"},
           {R"({"9a": 1})", "not an identifier"},
           {"[1]", "must be a JSON object"},
           {"{", "must be a JSON object"},
           {absl::StrCat(R"({"a": )", std::string(100, '['), std::string(100, ']'), "}"),
            "nested too deeply"},
           {absl::StrCat(R"({"a": ")", std::string(kMaxTemplateKwargsBytes, 'x'), R"("})"),
            "over the limit of 16384"},
       }) {
    SCOPED_TRACE(kwargs.substr(0, 40));
    input.template_kwargs_json = kwargs;
    absl::StatusOr<std::string> out = Render("x", input);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(says));
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("kwargs"));
    EXPECT_FALSE(ValidateTemplateKwargsJson(kwargs).ok());
  }
  std::string many = "{";
  for (int i = 0; i <= kMaxTemplateKwargs; ++i)
    absl::StrAppend(&many, i ? ", " : "", "\"k", i, "\": 1");
  many += "}";
  EXPECT_THAT(std::string(ValidateTemplateKwargsJson(many).message()), HasSubstr("65 keys"));
  EXPECT_TRUE(ValidateTemplateKwargsJson(R"({"enable_thinking": false})").ok());
}

}  // namespace
}  // namespace llmserve::common
