// Structured outputs and tool calling through the official `openai` npm client, against a
// random-weight model: only the worker's constraint can make its output parse, so every check
// here fails without it. `ajv` (a JSON Schema validator nobody here wrote) judges the JSON.
// Usage: node structured_outputs_test.mjs BASE_URL MODEL
import OpenAI from 'openai';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import assert from 'node:assert/strict';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const verbose = process.env.LLMSERVE_TEST_VERBOSE === '1';

function checkValid(schema, value, what) {
  if (verbose) console.log(`${what}: ${JSON.stringify(value)}`);
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${what}: ${JSON.stringify(value)} fails its schema: ` +
    JSON.stringify(validate.errors));
}

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    role: { enum: ['admin', 'user', 'guest'] },
    active: { type: 'boolean' },
    scores: { type: 'array', items: { type: 'number', minimum: -10, maximum: 10 }, maxItems: 3 },
    email: { type: 'string', format: 'email' },
  },
  required: ['name', 'age', 'role', 'active', 'scores'],
  additionalProperties: false,
};
const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];

// response_format json_schema, whole and streamed, several seeds.
for (const seed of [1, 2, 3]) {
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 400, seed,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
  });
  const choice = chat.choices[0];
  assert.equal(choice.finish_reason, 'stop', `seed ${seed}: ended by the grammar`);
  checkValid(person, JSON.parse(choice.message.content), `json_schema seed ${seed}`);
}
{
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 400, seed: 7, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person } },
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta?.content ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(finish, 'stop');
  checkValid(person, JSON.parse(text), 'json_schema streamed');
}

// A recursive schema ($defs + $ref) through vLLM's guided_json, on the completions endpoint.
const tree = {
  $defs: {
    node: {
      type: 'object',
      properties: {
        id: { type: 'integer', minimum: 1, maximum: 99 },
        children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 },
      },
      required: ['id', 'children'],
      additionalProperties: false,
    },
  },
  $ref: '#/$defs/node',
};
{
  const completion = await client.completions.create({
    model, prompt: 'A tree:', max_tokens: 600, seed: 5, guided_json: tree,
  });
  const choice = completion.choices[0];
  if (choice.finish_reason === 'stop') {
    checkValid(tree, JSON.parse(choice.text), 'recursive guided_json');
  } else {
    // Random weights may nest on past max_tokens; what came must still be a prefix of a tree.
    assert.equal(choice.finish_reason, 'length');
    assert.match(choice.text, /^\{"/);
  }
}

// guided_choice and guided_regex.
{
  const choices = ['red', 'green', 'blue', 'dark blue'];
  for (const seed of [1, 2, 3, 4]) {
    const chat = await client.chat.completions.create({
      model, messages, max_tokens: 20, seed, guided_choice: choices,
    });
    assert.ok(choices.includes(chat.choices[0].message.content), chat.choices[0].message.content);
  }
  const pattern = '[A-Z]{2}-\\d{3,5}(-[a-z]+)?';
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 30, seed: 3, guided_regex: pattern,
  });
  const text = chat.choices[0].message.content;
  if (chat.choices[0].finish_reason === 'stop') {
    assert.match(text, new RegExp(`^(?:${pattern})$`), text);
  } else {
    assert.match(text, /^[A-Z]{2}-\d{3}/, text);
  }
}

// JSON mode: any JSON object.
{
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 800, seed: 11, response_format: { type: 'json_object' },
  });
  const choice = chat.choices[0];
  if (choice.finish_reason === 'stop') {
    const value = JSON.parse(choice.message.content);
    assert.equal(typeof value, 'object');
    assert.ok(value !== null && !Array.isArray(value));
  } else {
    assert.match(choice.message.content, /^\{/);
  }
}

// Tool calling: a named function and "required" constrain the call; arguments always validate.
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', minLength: 1, maxLength: 16 },
          unit: { enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'Adds two integers',
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', minimum: -100, maximum: 100 }, b: { type: 'integer', minimum: -100, maximum: 100 } },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];
const byName = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
const toolMessages = [{ role: 'user', content: 'What is the weather in Paris?' }];

for (const seed of [1, 2]) {
  const chat = await client.chat.completions.create({
    model, messages: toolMessages, tools, max_tokens: 200, seed,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const message = chat.choices[0].message;
  assert.equal(message.tool_calls.length, 1);
  const call = message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  checkValid(byName.get_weather, JSON.parse(call.function.arguments), 'named tool arguments');
  assert.equal(chat.choices[0].finish_reason, 'tool_calls');
}
for (const seed of [3, 4, 5]) {
  const chat = await client.chat.completions.create({
    model, messages: toolMessages, tools, max_tokens: 300, seed, tool_choice: 'required',
    parallel_tool_calls: false,
  });
  const message = chat.choices[0].message;
  assert.equal(chat.choices[0].finish_reason, 'tool_calls');
  assert.equal(message.tool_calls.length, 1);
  const call = message.tool_calls[0];
  assert.ok(call.function.name in byName, call.function.name);
  checkValid(byName[call.function.name], JSON.parse(call.function.arguments), 'required tool');
}

// Streamed: the client's own stream helper assembles the tool-call deltas.
{
  const runner = client.beta.chat.completions.stream({
    model, messages: toolMessages, tools, max_tokens: 300, seed: 9, tool_choice: 'required',
  });
  const final = await runner.finalChatCompletion();
  const calls = final.choices[0].message.tool_calls;
  assert.ok(calls.length >= 1);
  for (const call of calls) {
    assert.ok(call.function.name in byName, call.function.name);
    checkValid(byName[call.function.name], JSON.parse(call.function.arguments), 'streamed tool');
    assert.match(call.id, /^call_/);
  }
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
}

// The whole tool loop: the call and its result go back into the history.
{
  const first = await client.chat.completions.create({
    model, messages: toolMessages, tools, max_tokens: 200, seed: 1,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const call = first.choices[0].message.tool_calls[0];
  const followUp = await client.chat.completions.create({
    model, tools, max_tokens: 8, ignore_eos: true, tool_choice: 'none',
    messages: [...toolMessages, first.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }],
  });
  assert.equal(followUp.choices[0].finish_reason, 'length');
  assert.equal(followUp.choices[0].message.tool_calls, undefined);
  // The tools and the call are in the prompt, rendered by the model's template.
  assert.ok(followUp.usage.prompt_tokens > first.usage.prompt_tokens);
}

// Every input error is a 400 that names the field.
const rejects = async (body, pattern) => assert.rejects(
  client.chat.completions.create({ model, messages, max_tokens: 5, ...body }),
  (error) => error instanceof OpenAI.BadRequestError && pattern.test(error.message),
  `expected 400 matching ${pattern}`);
await rejects({ response_format: { type: 'xml' } }, /response_format\.type/);
await rejects({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } },
  /response_format\.json_schema\.schema/);
await rejects({ response_format: { type: 'json_schema', json_schema: { name: 'x',
  schema: { type: 'object', properties: { a: { type: 'strnig' } } } } } }, /properties.*a.*type/);
await rejects({ guided_regex: 'a(?=b)' }, /regex/);
await rejects({ guided_choice: [] }, /guided_choice/);
await rejects({ guided_json: { type: 'object' }, guided_regex: 'a+' }, /cannot be combined/);
await rejects({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, /tool_choice/);
await rejects({ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, /tools\[0\]\.function\.name/);
await rejects({ tools, tool_choice: 'required', response_format: { type: 'json_object' } }, /tool_choice/);

console.log('openai npm client, structured outputs and tools: ok');
