// The official `openai` npm client against a gateway started with --reasoning_parser=deepseek_r1
// in front of the generated model: its random-weight text never closes the think block that
// deepseek_r1 opens, so every reply is reasoning cut by max_tokens. Checks the fields as the
// client surfaces them (message.reasoning_content, delta.reasoning_content, usage's
// completion_tokens_details.reasoning_tokens), that a streamed and a non-streamed reply agree,
// that /v1/completions stays raw text, that a structured output is taken (it starts after the
// reasoning), and that chat_template_kwargs are taken (and a reserved key refused).
// Usage: node reasoning_test.mjs BASE_URL MODEL
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const messages = [{ role: 'user', content: 'What is 1+1?' }];

const chat = await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 0, ignore_eos: true,
});
const message = chat.choices[0].message;
assert.equal(chat.choices[0].finish_reason, 'length');
assert.equal(typeof message.reasoning_content, 'string');
assert.ok(message.reasoning_content.length > 0, 'the reply is reasoning');
assert.equal(message.content, null, 'unterminated reasoning leaves no answer');
assert.equal(chat.usage.completion_tokens, 10);
assert.equal(chat.usage.completion_tokens_details.reasoning_tokens, 10);

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true,
  stream_options: { include_usage: true },
});
let reasoning = '';
let content = '';
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    reasoning += choice.delta?.reasoning_content ?? '';
    content += choice.delta?.content ?? '';
  }
}
assert.equal(reasoning, message.reasoning_content, 'streamed reasoning adds up to the whole');
assert.equal(content, '');
assert.equal(usage.completion_tokens_details.reasoning_tokens, 10);

// Raw completions are not chats: no parsing, the text is the model's.
const completion = await client.completions.create({
  model, prompt: 'What is 1+1?', max_tokens: 5, temperature: 0, ignore_eos: true,
});
assert.equal(typeof completion.choices[0].text, 'string');
assert.equal(completion.choices[0].reasoning_content, undefined);
assert.equal(completion.usage.completion_tokens_details, undefined);

// A structured output starts after the reasoning: the worker compiles the schema behind the block
// (the random model does not close it in 8 tokens, and the mask allows no EOS inside it, so the
// reply is all reasoning, cut by length).
const constrained = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0, response_format: { type: 'json_object' },
});
assert.equal(constrained.choices[0].finish_reason, 'length');
assert.equal(typeof constrained.choices[0].message.reasoning_content, 'string');
assert.equal(constrained.usage.completion_tokens_details.reasoning_tokens, 8);

// chat_template_kwargs reach the template (the tiny model's ignores enable_thinking, so the reply
// is read as before); a key the template gets from the request itself is refused by name.
const kwargs = await client.chat.completions.create({
  model, messages, max_tokens: 5, chat_template_kwargs: { enable_thinking: false },
});
assert.equal(kwargs.choices.length, 1);
await assert.rejects(
  client.chat.completions.create({
    model, messages, max_tokens: 5, chat_template_kwargs: { messages: [] },
  }),
  (error) => error instanceof OpenAI.BadRequestError &&
    /chat_template_kwargs/.test(error.message));

console.log('openai npm client, reasoning: ok');
