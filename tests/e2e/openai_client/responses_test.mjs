// The official `openai` npm client's Responses API (client.responses.create) against the gateway:
// a text answer whole and streamed (the deltas add up to the final text, events in order), a
// function call forced by tool_choice whose arguments fit the tool's schema, both rebuilt from the
// events by the client's own stream helper (responses.stream), the call sent back with its output
// for a second turn, reasoning items from a gateway with --reasoning_parser, and a field we
// do not support refused by name.
// Usage: node responses_test.mjs BASE_URL REASONING_BASE_URL MODEL
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL, reasoningURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const whole = await client.responses.create({
  model, input: 'What is 1+1?', instructions: 'Answer briefly.', max_output_tokens: 12,
  temperature: 0,
});
assert.equal(whole.object, 'response');
assert.match(whole.id, /^resp_/);
assert.ok(['completed', 'incomplete'].includes(whole.status), whole.status);
assert.equal(typeof whole.output_text, 'string', 'the client finds the message text');
assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 12);
assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + whole.usage.output_tokens);
assert.equal(whole.instructions, 'Answer briefly.');

const stream = await client.responses.create({
  model, input: 'What is 1+1?', instructions: 'Answer briefly.', max_output_tokens: 12,
  temperature: 0, stream: true,
});
const types = [];
let deltas = '';
let final = null;
for await (const event of stream) {
  types.push(event.type);
  if (event.type === 'response.output_text.delta') deltas += event.delta;
  if (event.type === 'response.completed' || event.type === 'response.incomplete') {
    final = event.response;
  }
}
assert.equal(types[0], 'response.created');
assert.equal(types[1], 'response.in_progress');
assert.ok(final, `a final event: ${types.join(', ')}`);
const finalText = final.output.filter((item) => item.type === 'message')
  .flatMap((item) => item.content).map((part) => part.text).join('');
assert.equal(deltas, finalText, 'streamed deltas add up to the final text');
assert.equal(finalText, whole.output_text, 'greedy: streamed and whole agree');

// A forced call: the grammar makes the model write it, so its arguments fit the schema.
const tools = [{
  type: 'function', name: 'get_weather', description: 'The weather in a city.',
  parameters: {
    type: 'object', properties: { city: { type: 'string', maxLength: 20 } },
    required: ['city'], additionalProperties: false,
  },
}];
const input = [{ role: 'user', content: 'Weather in Paris?' }];
const called = await client.responses.create({
  model, input, tools, tool_choice: { type: 'function', name: 'get_weather' },
  max_output_tokens: 200, temperature: 0,
});
const call = called.output.find((item) => item.type === 'function_call');
assert.ok(call, JSON.stringify(called.output));
assert.equal(call.name, 'get_weather');
assert.equal(typeof JSON.parse(call.arguments).city, 'string');
// The client's stream helper rebuilds the response from the events (it throws on an event that
// names an item or part not added before): greedy, it must be the call above.
const callStream = client.responses.stream({
  model, input, tools, tool_choice: { type: 'function', name: 'get_weather' },
  max_output_tokens: 200, temperature: 0,
});
let argumentDeltas = '';
callStream.on('response.function_call_arguments.delta', (event) => {
  argumentDeltas += event.delta;
});
const rebuilt = await callStream.finalResponse();
const rebuiltCall = rebuilt.output.find((item) => item.type === 'function_call');
assert.equal(rebuiltCall.arguments, call.arguments);
assert.equal(argumentDeltas, call.arguments);
assert.equal(rebuiltCall.call_id.startsWith('call_'), true);

const textStream = client.responses.stream({
  model, input: 'What is 1+1?', instructions: 'Answer briefly.', max_output_tokens: 12,
  temperature: 0,
});
const rebuiltText = (await textStream.finalResponse()).output
  .filter((item) => item.type === 'message').flatMap((item) => item.content)
  .map((part) => part.text).join('');
assert.equal(rebuiltText, whole.output_text);

const second = await client.responses.create({
  model, tools, max_output_tokens: 6, temperature: 0,
  input: [...input, call, { type: 'function_call_output', call_id: call.call_id, output: '22 C' }],
});
assert.ok(second.usage.input_tokens > called.usage.input_tokens, 'the call and result are in');

// Reasoning: the random model never closes deepseek_r1's think block.
const reasoner = new OpenAI({ baseURL: reasoningURL, apiKey: 'unused', maxRetries: 0 });
const reasoned = await reasoner.responses.create({
  model, input: 'What is 1+1?', max_output_tokens: 8, temperature: 0,
});
assert.equal(reasoned.output[0].type, 'reasoning');
assert.ok(reasoned.output[0].content[0].text.length > 0);
assert.equal(reasoned.usage.output_tokens_details.reasoning_tokens, 8);
assert.equal(reasoned.status, 'incomplete');

await assert.rejects(
  client.responses.create({ model, input: 'x', previous_response_id: 'resp_123' }),
  (error) => error instanceof OpenAI.BadRequestError && /previous_response_id/.test(error.message));

console.log('openai npm client, responses: ok');
