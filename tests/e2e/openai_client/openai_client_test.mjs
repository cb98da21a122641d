// The official `openai` npm client against a running gateway: non-streaming and streaming chat
// and completions, model listing, and errors as the client surfaces them.
// Usage: node openai_client_test.mjs BASE_URL MODEL
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const models = await client.models.list();
assert.ok(models.data.some((m) => m.id === model), `model ${model} listed`);

const chat = await client.chat.completions.create({
  model,
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
  max_tokens: 8,
  ignore_eos: true,
});
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.choices[0].message.role, 'assistant');
assert.equal(typeof chat.choices[0].message.content, 'string');
assert.equal(chat.choices[0].finish_reason, 'length');
assert.equal(chat.usage.completion_tokens, 8);

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'Tell me a story' }],
  max_tokens: 12,
  ignore_eos: true,
  stream: true,
  stream_options: { include_usage: true },
});
let text = '';
let finish = null;
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    text += choice.delta?.content ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
assert.equal(finish, 'length');
assert.equal(usage.completion_tokens, 12);
assert.equal(typeof text, 'string');

const completion = await client.completions.create({
  model, prompt: 'Once upon a time', max_tokens: 5, n: 2, ignore_eos: true, logprobs: 2,
});
assert.equal(completion.choices.length, 2);
assert.equal(completion.choices[0].logprobs.tokens.length, 5);

await assert.rejects(
  client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
  (error) => error instanceof OpenAI.NotFoundError && /no-such-model/.test(error.message));
await assert.rejects(
  client.completions.create({ model, prompt: 'x', max_tokens: 1, temperature: 'hot' }),
  (error) => error instanceof OpenAI.BadRequestError && /temperature/.test(error.message));

console.log('openai npm client: ok');
