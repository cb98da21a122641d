// Renders the chat templates of the supported model families and compares with the exact
// prompts Hugging Face transformers produces (apply_chat_template(tokenize=False), i.e. jinja2
// with trim_blocks=True, lstrip_blocks=True). The expected strings were worked out from Jinja's
// rules and checked against jinja2 3.1.6 configured as transformers configures it
// (ImmutableSandboxedEnvironment, raise_exception, its tojson filter; bos_token "<s>",
// eos_token "</s>", tools=None).
//
// Templates: the ChatML template tools/make_model writes; Qwen2-Instruct; Meta-Llama-3-Instruct;
// a Llama-3.1-Instruct-style template (Meta's 3.1 layout with its tool branches, which these
// conversations do not take); Mistral-7B-Instruct v0.1 and the multi-line v0.2 form; Llama-2-chat;
// Zephyr; a Qwen3-style template (namespace, messages[::-1], string methods).
#include <string>
#include <vector>

#include "common/chat_template/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

using ::testing::HasSubstr;

constexpr char kMakeModelChatMl[] =
    R"tmpl({% for message in messages %}<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %})tmpl";

constexpr char kQwen2[] =
    R"tmpl({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})tmpl";

constexpr char kLlama3[] =
    R"tmpl({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})tmpl";

constexpr char kLlama31[] = R"tmpl({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)tmpl";

constexpr char kMistralV01[] =
    R"tmpl({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})tmpl";

constexpr char kMistralV02[] = R"tmpl({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)tmpl";

constexpr char kLlama2[] =
    R"tmpl({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\n' + content.strip() + '\n<</SYS>>\n\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})tmpl";

constexpr char kZephyr[] = R"tmpl({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})tmpl";

constexpr char kQwen3[] = R"tmpl({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
)tmpl";

std::vector<ChatMessage> Conversation(const std::string& name) {
  if (name == "sys") {
    return {{"system", "You are a pirate."},
            {"user", "Hello!"},
            {"assistant", "Arr, hello there!"},
            {"user", "Where is the treasure?"}};
  }
  if (name == "nosys") {
    return {{"user", "  Hi!\n"}, {"assistant", " Hello. "}, {"user", "Tell me a joke."}};
  }
  if (name == "think") {
    return {{"user", "What is 1+1?"},
            {"assistant", "<think>\nadd them\n</think>\n\nIt is 2."},
            {"user", "And 2+2?"}};
  }
  if (name == "think_last") {
    return {{"user", "What is 1+1?"}, {"assistant", "<think>\nadd them\n</think>\n\nIt is 2."}};
  }
  if (name == "named") return {{"user", "Hi", "alice"}};
  if (name == "bad") return {{"user", "a"}, {"user", "b"}};
  return {};
}

struct FamilyCase {
  const char* family;
  const char* source;
  const char* conversation;
  bool add_generation_prompt;
  const char* expected;  // the prompt, when `error` is empty
  const char* error;     // the raise_exception message transformers raises
};

const FamilyCase kCases[] = {
    {"make_model", kMakeModelChatMl, "sys", true,
     "<|im_start|>system\nYou are a "
     "pirate.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nArr, hello "
     "there!<|im_end|>\n<|im_start|>user\nWhere is the "
     "treasure?<|im_end|>\n<|im_start|>assistant\n",
     ""},
    {"make_model", kMakeModelChatMl, "nosys", false,
     "<|im_start|>user\n  Hi!\n<|im_end|>\n<|im_start|>assistant\n Hello. "
     "<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n",
     ""},
    {"make_model", kMakeModelChatMl, "named", true,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", ""},
    {"qwen2", kQwen2, "sys", true,
     "<|im_start|>system\nYou are a "
     "pirate.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nArr, hello "
     "there!<|im_end|>\n<|im_start|>user\nWhere is the "
     "treasure?<|im_end|>\n<|im_start|>assistant\n",
     ""},
    {"qwen2", kQwen2, "nosys", true,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n  "
     "Hi!\n<|im_end|>\n<|im_start|>assistant\n Hello. <|im_end|>\n<|im_start|>user\nTell me a "
     "joke.<|im_end|>\n<|im_start|>assistant\n",
     ""},
    {"qwen2", kQwen2, "nosys", false,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n  "
     "Hi!\n<|im_end|>\n<|im_start|>assistant\n Hello. <|im_end|>\n<|im_start|>user\nTell me a "
     "joke.<|im_end|>\n",
     ""},
    {"llama3", kLlama3, "sys", true,
     "<s><|start_header_id|>system<|end_header_id|>\n\nYou are a "
     "pirate.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_"
     "id|>assistant<|end_header_id|>\n\nArr, hello "
     "there!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhere is the "
     "treasure?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     ""},
    {"llama3", kLlama3, "nosys", true,
     "<s><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|"
     "end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTell me a "
     "joke.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     ""},
    {"llama3", kLlama3, "nosys", false,
     "<s><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|"
     "end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTell me a "
     "joke.<|eot_id|>",
     ""},
    {"llama31", kLlama31, "sys", true,
     "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
     "2023\nToday Date: 26 Jul 2024\n\nYou are a "
     "pirate.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_"
     "id|>assistant<|end_header_id|>\n\nArr, hello "
     "there!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhere is the "
     "treasure?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     ""},
    {"llama31", kLlama31, "nosys", true,
     "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
     "2023\nToday Date: 26 Jul "
     "2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|"
     ">assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>"
     "\n\nTell me a joke.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     ""},
    {"llama31", kLlama31, "nosys", false,
     "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
     "2023\nToday Date: 26 Jul "
     "2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|"
     ">assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>"
     "\n\nTell me a joke.<|eot_id|>",
     ""},
    {"mistral_v1", kMistralV01, "nosys", true,
     "<s>[INST]   Hi!\n [/INST] Hello. </s>[INST] Tell me a joke. [/INST]", ""},
    {"mistral_v1", kMistralV01, "think", true,
     "<s>[INST] What is 1+1? [/INST]<think>\nadd them\n</think>\n\nIt is 2.</s>[INST] And 2+2? "
     "[/INST]",
     ""},
    {"mistral_v1", kMistralV01, "sys", true, "",
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"mistral_v1", kMistralV01, "bad", true, "",
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"mistral_v2", kMistralV02, "sys", true,
     "<s> [INST] You are a pirate.\n\nHello! [/INST] Arr, hello there!</s> [INST] Where is the "
     "treasure? [/INST]",
     ""},
    {"mistral_v2", kMistralV02, "nosys", true,
     "<s> [INST]   Hi!\n [/INST]  Hello. </s> [INST] Tell me a joke. [/INST]", ""},
    {"mistral_v2", kMistralV02, "bad", true, "",
     "After the optional system message, conversation roles must alternate "
     "user/assistant/user/assistant/..."},
    {"llama2", kLlama2, "sys", true,
     "<s>[INST] <<SYS>>\nYou are a pirate.\n<</SYS>>\n\nHello! [/INST] Arr, hello there! "
     "</s><s>[INST] Where is the treasure? [/INST]",
     ""},
    {"llama2", kLlama2, "nosys", true,
     "<s>[INST] Hi! [/INST] Hello. </s><s>[INST] Tell me a joke. [/INST]", ""},
    {"llama2", kLlama2, "bad", true, "",
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"zephyr", kZephyr, "sys", true,
     "<|system|>\nYou are a pirate.</s>\n<|user|>\nHello!</s>\n<|assistant|>\nArr, hello "
     "there!</s>\n<|user|>\nWhere is the treasure?</s>\n<|assistant|>\n",
     ""},
    {"zephyr", kZephyr, "nosys", true,
     "<|user|>\n  Hi!\n</s>\n<|assistant|>\n Hello. </s>\n<|user|>\nTell me a "
     "joke.</s>\n<|assistant|>\n",
     ""},
    {"zephyr", kZephyr, "nosys", false,
     "<|user|>\n  Hi!\n</s>\n<|assistant|>\n Hello. </s>\n<|user|>\nTell me a joke.</s>\n", ""},
    {"qwen3", kQwen3, "sys", true,
     "<|im_start|>system\nYou are a "
     "pirate.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nArr, hello "
     "there!<|im_end|>\n<|im_start|>user\nWhere is the "
     "treasure?<|im_end|>\n<|im_start|>assistant\n",
     ""},
    {"qwen3", kQwen3, "think", true,
     "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\nIt is "
     "2.<|im_end|>\n<|im_start|>user\nAnd 2+2?<|im_end|>\n<|im_start|>assistant\n",
     ""},
    {"qwen3", kQwen3, "think_last", false,
     "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n<think>\nadd "
     "them\n</think>\n\nIt is 2.<|im_end|>\n",
     ""},
};

class FamilyTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(FamilyTest, MatchesTransformers) {
  const FamilyCase& c = GetParam();
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(c.source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplateInput input;
  input.messages = Conversation(c.conversation);
  input.add_generation_prompt = c.add_generation_prompt;
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  absl::StatusOr<std::string> prompt = tmpl->Render(input);
  if (std::string(c.error).empty()) {
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_EQ(*prompt, c.expected);
  } else {
    ASSERT_FALSE(prompt.ok()) << *prompt;
    EXPECT_EQ(prompt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(prompt.status().message()), HasSubstr(c.error));
  }
}

std::string CaseName(const ::testing::TestParamInfo<FamilyCase>& info) {
  return std::string(info.param.family) + "_" + info.param.conversation +
         (info.param.add_generation_prompt ? "_gen" : "_nogen") + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(ChatTemplateFamilies, FamilyTest, ::testing::ValuesIn(kCases), CaseName);

TEST(ChatTemplateFamilies, RaiseExceptionReportsTemplatePosition) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(kMistralV02);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplateInput input;
  input.messages = {{"user", "a"}, {"user", "b"}};
  absl::StatusOr<std::string> prompt = tmpl->Render(input);
  ASSERT_FALSE(prompt.ok());
  // The raise_exception of the alternation check is on line 11, column 13.
  EXPECT_EQ(std::string(prompt.status().message()),
            "chat template: line 11, column 13: After the optional system message, conversation "
            "roles must alternate user/assistant/user/assistant/...");

  input.messages = {{"user", "a"}, {"tool", "b"}};
  prompt = tmpl->Render(input);
  ASSERT_FALSE(prompt.ok());
  EXPECT_THAT(std::string(prompt.status().message()),
              HasSubstr("line 22, column 13: Only user and assistant roles are supported"));
}

TEST(ChatTemplateFamilies, TokenizerConfigStringAndNamedList) {
  const std::string config =
      R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"})";
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromTokenizerConfig(config);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatTemplateInput input;
  input.messages = {{"user", "x"}, {"assistant", "y"}};
  input.bos_token = "<s>";
  EXPECT_EQ(*tmpl->Render(input), "<s>xy");

  const std::string list_config =
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages|length }}"}]})";
  tmpl = ChatTemplate::FromTokenizerConfig(list_config);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(*tmpl->Render(input), "D2");
  tmpl = ChatTemplate::FromTokenizerConfig(list_config, "tool_use");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(*tmpl->Render(input), "T");

  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(R"({"bos_token": "<s>"})").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(list_config, "rag").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig("{not json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(R"({"chat_template": 3})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(R"({"chat_template": "{% for %}"})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateFamilies, PlainFallbackForModelsWithoutATemplate) {
  ChatTemplateInput input;
  input.messages = {{"system", "Be brief."}, {"user", "Hi", "bob"}};
  EXPECT_EQ(RenderPlainChat(input), "system: Be brief.\nuser: Hi\nassistant:");
  input.add_generation_prompt = false;
  EXPECT_EQ(RenderPlainChat(input), "system: Be brief.\nuser: Hi\n");
  input.messages.clear();
  EXPECT_EQ(RenderPlainChat(input), "");
}

}  // namespace
}  // namespace llmserve::common
