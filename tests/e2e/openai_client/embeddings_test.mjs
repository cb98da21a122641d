// The official `openai` npm client's embeddings.create against the gateway and a worker run with
// --task=embed: the client's default (it asks for base64 and decodes it) and encoding_format
// "float" give the same unit-length vectors; a list of inputs comes back in order, each equal to
// its single-input embedding; token-id inputs; `dimensions` refused by name for a model without
// Matryoshka lengths; and the embedding model refused for chat completions.
// Usage: node embeddings_test.mjs BASE_URL EMBEDDING_MODEL GENERATION_MODEL
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL, model, generationModel] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const norm = (v) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));
const close = (a, b) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) < 1e-6);

const byDefault = await client.embeddings.create({ model, input: 'The quick brown fox' });
assert.equal(byDefault.object, 'list');
assert.equal(byDefault.model, model);
assert.equal(byDefault.data.length, 1);
const vector = byDefault.data[0].embedding;
assert.ok(Array.isArray(vector) && vector.length > 0, 'the client decoded the base64 vector');
assert.ok(Math.abs(norm(vector) - 1) < 1e-5, `normalized: ${norm(vector)}`);
assert.ok(byDefault.usage.prompt_tokens > 0);
assert.equal(byDefault.usage.total_tokens, byDefault.usage.prompt_tokens);

const asFloats = await client.embeddings.create({
  model, input: 'The quick brown fox', encoding_format: 'float',
});
// Floats as JSON are the shortest decimals that read back as the same float32 values the base64
// carried.
assert.deepEqual(asFloats.data[0].embedding.map(Math.fround), vector);

const texts = ['first input', 'The quick brown fox', 'a third, longer input with more words'];
const listed = await client.embeddings.create({ model, input: texts });
assert.deepEqual(listed.data.map((item) => item.index), [0, 1, 2]);
assert.ok(close(listed.data[1].embedding, vector), 'a list input equals its single embedding');
assert.ok(!close(listed.data[0].embedding, listed.data[2].embedding), 'different inputs differ');

const ids = await client.embeddings.create({ model, input: [[5, 17, 300], [42]] });
assert.equal(ids.data.length, 2);
assert.equal(ids.usage.prompt_tokens, 4);

await assert.rejects(
  client.embeddings.create({ model, input: 'x', dimensions: 8 }),
  (error) => error.status === 400 && /dimensions/.test(error.message));
await assert.rejects(
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }),
  (error) => error.status === 400 && /serves embeddings/.test(error.message));
await assert.rejects(
  client.embeddings.create({ model: generationModel, input: 'x' }),
  (error) => error.status === 400 && /generates text/.test(error.message));
console.log('embeddings: ok');
