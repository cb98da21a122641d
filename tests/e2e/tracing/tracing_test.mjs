// Traces end to end, checked with OpenTelemetry's own code: a client instrumented with the
// OpenTelemetry JS SDK (@opentelemetry/sdk-trace-node, whose provider installs the W3C trace
// context propagator) calls a real gateway through the official `openai` npm client; an OTLP/HTTP
// receiver here decodes what the gateway and the workers export with the OTLP protobuf
// definitions OpenTelemetry publishes (@opentelemetry/otlp-transformer's generated root.js,
// ExportTraceServiceRequest.decode). Checks, per request, one connected trace
// client -> gateway -> worker (parent ids), the GenAI attributes, no prompt or completion text
// unless --trace_content, a retry shown as two attempts, streaming, errors; then that a receiver
// that hangs or refuses costs requests nothing (latency) and that the gateway counts the spans it
// dropped. Prints a JSON summary.
// Usage: node tracing_test.mjs BIN_DIR WORK_DIR
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import zlib from 'node:zlib';

import { context, propagation, trace, SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import OpenAI from 'openai';

const [bin, work] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const otlp = require('@opentelemetry/otlp-transformer/build/src/generated/root.js');
const { ExportTraceServiceRequest } = otlp.opentelemetry.proto.collector.trace.v1;
// Ids of the tiny model's vocabulary that no ordinary prompt here holds in a row (as in
// tests/e2e/query_of_death_test.py): a worker started with them as its crash marker dies on them.
const MARKER = [97, 98, 99, 100, 101];

// ---- processes ----------------------------------------------------------------------------------
const children = new Set();
function killAll() {
  for (const c of children) {
    try { c.kill('SIGKILL'); } catch { /* gone */ }
  }
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { killAll(); process.exit(1); });
setTimeout(() => { console.log('FAIL: the tracing test took more than 240 s'); process.exit(1); }, 240_000).unref();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start(name, command, args) {
  const log = path.join(work, `${name}.log`);
  const out = fs.openSync(log, 'w');
  const child = spawn(command, args, { stdio: ['ignore', out, out] });
  fs.closeSync(out);
  children.add(child);
  child.on('exit', () => children.delete(child));
  child.logText = () => fs.readFileSync(log, 'utf8');
  return child;
}
async function waitForLog(child, pattern, what) {
  for (let i = 0; i < 600; ++i) {
    const m = pattern.exec(child.logText());
    if (m) return m;
    if (!children.has(child)) break;
    await sleep(100);
  }
  throw new Error(`${what}: no line matching ${pattern}\n${child.logText().slice(-2000)}`);
}

// ---- an OTLP/HTTP receiver ----------------------------------------------------------------------
const hex = (bytes) => Buffer.from(bytes ?? []).toString('hex');
function anyValue(v) {
  if (v.stringValue !== undefined && v.stringValue !== null && v.stringValue !== '') return v.stringValue;
  if (v.arrayValue) return v.arrayValue.values.map(anyValue);
  if (v.intValue !== undefined && v.intValue !== null) return Number(v.intValue);
  if (v.doubleValue !== undefined && v.doubleValue !== null) return v.doubleValue;
  if (v.boolValue !== undefined && v.boolValue !== null) return v.boolValue;
  return v.stringValue ?? null;
}
const attributes = (list) => Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value)]));

// mode: 'ok' (decode and keep), 'refuse' (HTTP 500), 'hang' (never answer).
function startReceiver() {
  const receiver = { spans: [], posts: 0, mode: 'ok', gzipped: 0 };
  receiver.server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      receiver.posts += 1;
      if (receiver.mode === 'hang') return; // the socket stays open, unanswered
      if (receiver.mode === 'refuse') { res.writeHead(500); res.end('no'); return; }
      assert.equal(req.url, '/v1/traces');
      assert.equal(req.headers['content-type'], 'application/x-protobuf');
      assert.equal(req.headers['x-test-header'], 'a b', 'the --otlp_headers value, percent-decoded');
      let body = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') { body = zlib.gunzipSync(body); receiver.gzipped += 1; }
      const request = ExportTraceServiceRequest.decode(body);
      for (const rs of request.resourceSpans) {
        const resource = attributes(rs.resource?.attributes);
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            receiver.spans.push({
              service: resource['service.name'], scope: ss.scope?.name,
              traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId),
              name: s.name, kind: s.kind, attributes: attributes(s.attributes),
              events: (s.events ?? []).map((e) => e.name),
              start: BigInt(s.startTimeUnixNano.toString()), end: BigInt(s.endTimeUnixNano.toString()),
              status: s.status ?? {},
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' });
      res.end();
    });
  });
  return new Promise((resolve) => receiver.server.listen(0, '127.0.0.1', () => {
    receiver.port = receiver.server.address().port;
    resolve(receiver);
  }));
}

// ---- the client's own tracing -------------------------------------------------------------------
const clientSpans = new InMemorySpanExporter();
const provider = new NodeTracerProvider();
provider.addSpanProcessor(new SimpleSpanProcessor(clientSpans));
provider.register(); // AsyncLocalStorage context, W3C trace context and baggage propagators
const clientTracer = trace.getTracer('llmserve-tracing-test');

// Runs `call(headers)` inside a client span; the headers carry its traceparent.
async function traced(name, call) {
  return clientTracer.startActiveSpan(name, { kind: SpanKind.CLIENT }, async (span) => {
    const headers = {};
    propagation.inject(context.active(), headers);
    try {
      return { result: await call(headers), traceId: span.spanContext().traceId, spanId: span.spanContext().spanId, headers };
    } catch (error) {
      return { error, traceId: span.spanContext().traceId, spanId: span.spanContext().spanId, headers };
    } finally {
      span.end();
    }
  });
}

async function waitFor(what, predicate, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (predicate()) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function metric(port, name) {
  const text = await new Promise((resolve, reject) => {
    http.get(`http://127.0.0.1:${port}/metrics`, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
  const values = {};
  for (const line of text.split('\n')) {
    if (line.startsWith(name)) {
      const [series, value] = line.split(' ');
      values[series] = Number(value);
    }
  }
  return values;
}

// ---- the stack ----------------------------------------------------------------------------------
fs.mkdirSync(work, { recursive: true });
const model = path.join(work, 'tiny');
fs.rmSync(model, { recursive: true, force: true });
const make = spawn(`${bin}/llmserve-make-model`, ['--preset', 'tiny', '--out', model], { stdio: 'ignore' });
await new Promise((resolve) => make.on('exit', resolve));

const receiver = await startReceiver();
const endpoint = `http://127.0.0.1:${receiver.port}/v1/traces`;
const tracingFlags = [`--otlp_traces_endpoint=${endpoint}`, '--otlp_headers=x-test-header=a%20b'];

async function startWorker(name, ...flags) {
  const child = start(name, `${bin}/llmserve-worker`, ['--model', model, '--served_model_name=tiny',
    '--host=127.0.0.1', '--port=0', '--metrics_port=-1', '--threads=1', '--kv_cache_memory=16MiB',
    ...tracingFlags, ...flags]);
  const m = await waitForLog(child, /serving tiny on 127\.0\.0\.1:(\d+)/, name);
  return { child, address: `127.0.0.1:${m[1]}` };
}
async function startGateway(name, workers, ...flags) {
  const child = start(name, `${bin}/llmserve-gateway`, ['--host=127.0.0.1', '--grpc_port=0',
    '--http_port=0', `--workers=${workers.map((w) => w.address).join(',')}`, ...flags]);
  const m = await waitForLog(child, /HTTP on http:\/\/127\.0\.0\.1:(\d+)/, name);
  await waitForLog(child, /gateway: ready/, name);
  return { child, port: Number(m[1]) };
}

const keys = path.join(work, 'api-keys');
const apiKey = `sk-tracing-${process.pid}`;
fs.writeFileSync(keys, `tracer ${require('node:crypto').createHash('sha256').update(apiKey).digest('hex')}\n`);

// Worker A crashes on the marker prompt; B does not. Round robin sends the first request to A.
const workerA = await startWorker('worker-a', `--test_only_crash_on_prompt_tokens=${MARKER.join(',')}`);
const workerB = await startWorker('worker-b');
const gateway = await startGateway('gateway', [workerA, workerB], ...tracingFlags,
  `--api_keys_file=${keys}`, '--routing=round_robin', '--query_of_death_retries=1',
  '--trace_sample_ratio=1');
// "ready" means one worker is: the retry below needs the round robin over both (with only B known
// ready, both tries went to B and the trace had one attempt: seen once in CI under the sanitizers).
{
  const series = 'llmserve_gateway_model_ready_workers{model="tiny"}';
  let ready = 0;
  for (let i = 0; i < 600 && ready < 2; ++i) {
    ready = (await metric(gateway.port, series))[series] ?? 0;
    if (ready < 2) await sleep(100);
  }
  assert.equal(ready, 2, 'the gateway finds both workers ready within 60 s');
}
const client = new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${gateway.port}/v1`, maxRetries: 0 });

const summary = {};
// JSON of spans (their times are BigInts).
const jsonOf = (value) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
const spansOf = (traceId) => receiver.spans.filter((s) => s.traceId === traceId);
const SERVER = 2;
const CLIENT = 3;

// Checks the trace of one request; returns its spans by role.
function checkTrace(call, { operation, attempts = 1, workerSpans = 1 }) {
  const spans = spansOf(call.traceId);
  const server = spans.filter((s) => s.service === 'llmserve-gateway' && s.kind === SERVER);
  assert.equal(server.length, 1, `one gateway server span: ${JSON.stringify(spans.map((s) => s.name))}`);
  const [root] = server;
  assert.equal(root.parentSpanId, call.spanId, "the gateway's span is the client span's child");
  assert.equal(root.name, `${operation} tiny`);
  assert.equal(root.scope, 'llmserve');
  const children = spans.filter((s) => s.parentSpanId === root.spanId);
  const attemptSpans = children.filter((s) => s.kind === CLIENT);
  assert.equal(attemptSpans.length, attempts, `${attempts} worker attempt(s): ${JSON.stringify(children.map((s) => s.name))}`);
  for (const name of ['admission', 'prepare']) {
    assert.ok(children.some((s) => s.name === name), `a ${name} span`);
  }
  const worker = spans.filter((s) => s.service === 'llmserve-worker');
  assert.equal(worker.length, workerSpans, `${workerSpans} worker span(s)`);
  for (const w of worker) {
    assert.equal(w.kind, SERVER);
    assert.ok(attemptSpans.some((a) => a.spanId === w.parentSpanId), "the worker's span is an attempt's child");
  }
  for (const s of spans) {
    assert.ok(s.end >= s.start, `${s.name}: end >= start`);
    assert.ok(!('gen_ai.input.messages' in s.attributes) && !('gen_ai.output.messages' in s.attributes),
      `${s.name}: no content without --trace_content`);
  }
  return { root, attemptSpans, worker };
}

// 1. The retry: the marker prompt crashes worker A, the gateway retries on B. Round robin sends
// one of the first two requests to A.
{
  let call;
  for (let i = 0; i < 2; ++i) {
    call = await traced('retry', (headers) => client.completions.create(
      { model: 'tiny', prompt: [40, 41, ...MARKER, 42], max_tokens: 3 }, { headers }));
    assert.ok(call.result, `the request succeeded: ${call.error}`);
    await waitFor('the trace', () => spansOf(call.traceId).some((s) => s.service === 'llmserve-worker')
      && spansOf(call.traceId).some((s) => s.kind === SERVER && s.service === 'llmserve-gateway'));
    if (spansOf(call.traceId).filter((s) => s.kind === CLIENT).length === 2) break;
  }
  const { root, attemptSpans, worker } = checkTrace(call, { operation: 'text_completion', attempts: 2 });
  const [first, second] = attemptSpans.sort((a, b) => a.attributes['llmserve.attempt'] - b.attributes['llmserve.attempt']);
  assert.equal(first.status.code, 2, 'the first attempt failed');
  assert.equal(`${first.attributes['server.address']}:${first.attributes['server.port']}`, workerA.address);
  assert.equal(`${second.attributes['server.address']}:${second.attributes['server.port']}`, workerB.address);
  assert.equal(worker[0].parentSpanId, second.spanId, "B's span hangs under the second attempt");
  assert.equal(root.attributes['gen_ai.response.id'], call.result.id);
  summary.retry = { attempts: attemptSpans.length, first_error: first.attributes['error.type'] };
}

// 2. A chat, not streamed: the GenAI attributes.
{
  const call = await traced('chat', (headers) => client.chat.completions.create(
    { model: 'tiny', messages: [{ role: 'user', content: 'secret prompt text' }], max_tokens: 4, temperature: 0.5, top_p: 0.9 },
    { headers }));
  assert.ok(call.result, `chat: ${call.error}`);
  await waitFor('the chat trace', () => spansOf(call.traceId).length >= 5);
  const { root, worker } = checkTrace(call, { operation: 'chat' });
  const a = root.attributes;
  assert.equal(a['gen_ai.operation.name'], 'chat');
  assert.equal(a['gen_ai.provider.name'], 'llmserve');
  assert.equal(a['gen_ai.request.model'], 'tiny');
  assert.equal(a['gen_ai.response.model'], 'tiny');
  assert.equal(a['gen_ai.response.id'], call.result.id);
  assert.deepEqual(a['gen_ai.response.finish_reasons'], [call.result.choices[0].finish_reason]);
  assert.equal(a['gen_ai.usage.input_tokens'], call.result.usage.prompt_tokens);
  assert.equal(a['gen_ai.usage.output_tokens'], call.result.usage.completion_tokens);
  assert.equal(a['gen_ai.request.max_tokens'], 4);
  assert.ok(Math.abs(a['gen_ai.request.temperature'] - 0.5) < 1e-6);
  assert.ok(Math.abs(a['gen_ai.request.top_p'] - 0.9) < 1e-6);
  assert.equal(a['user.id'], 'tracer', "the key's name");
  assert.ok(!jsonOf(root).includes(apiKey), 'never the key itself');
  assert.equal(a['server.address'], '127.0.0.1');
  assert.equal(a['server.port'], gateway.port);
  assert.ok(a['llmserve.time_to_first_token_s'] > 0);
  assert.equal(root.status.code ?? 0, 0, 'status unset on success');
  const w = worker[0].attributes;
  assert.equal(w['gen_ai.usage.input_tokens'], call.result.usage.prompt_tokens);
  assert.equal(w['gen_ai.usage.output_tokens'], call.result.usage.completion_tokens);
  assert.ok(w['llmserve.queue_time_s'] >= 0 && w['llmserve.prefill_time_s'] >= 0);
  assert.ok(worker[0].events.includes('scheduled') && worker[0].events.includes('first_token'));
  assert.ok(!jsonOf(spansOf(call.traceId)).includes('secret prompt text'), 'no prompt text');
  summary.chat = { spans: spansOf(call.traceId).length };
}

// 3. Streaming.
{
  const call = await traced('stream', async (headers) => {
    const stream = await client.completions.create(
      { model: 'tiny', prompt: 'Once upon a time', max_tokens: 5, stream: true }, { headers });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    return text;
  });
  assert.ok(call.result !== undefined, `stream: ${call.error}`);
  await waitFor('the stream trace', () => spansOf(call.traceId).length >= 5);
  const { root } = checkTrace(call, { operation: 'text_completion' });
  assert.equal(root.attributes['gen_ai.usage.output_tokens'], 5);
  summary.stream = { spans: spansOf(call.traceId).length };
}

// 4. An error: an unknown model fails the gateway's span and reaches no worker.
{
  const call = await traced('unknown model', (headers) => client.completions.create(
    { model: 'no-such-model', prompt: 'x', max_tokens: 1 }, { headers }));
  assert.equal(call.error?.status, 404);
  await waitFor('the error trace', () => spansOf(call.traceId).length >= 1);
  await sleep(1500); // nothing else may come
  const spans = spansOf(call.traceId);
  const root = spans.find((s) => s.kind === SERVER);
  assert.equal(root.parentSpanId, call.spanId);
  assert.equal(root.status.code, 2);
  assert.equal(root.attributes['error.type'], 'NOT_FOUND');
  assert.equal(root.attributes['gen_ai.request.model'], 'no-such-model');
  assert.ok(!spans.some((s) => s.service === 'llmserve-worker'), 'no worker span');
  summary.error = { spans: spans.length };
}

// 5. No traceparent: the gateway starts the trace, and the worker continues it.
{
  const result = await client.completions.create({ model: 'tiny', prompt: 'hi', max_tokens: 2 });
  await waitFor('the root trace', () => receiver.spans.some((s) => s.attributes['gen_ai.response.id'] === result.id));
  const root = receiver.spans.find((s) => s.attributes['gen_ai.response.id'] === result.id && s.kind === SERVER);
  assert.equal(root.parentSpanId, '', 'a root span');
  await waitFor('its worker span', () => spansOf(root.traceId).some((s) => s.service === 'llmserve-worker'));
}

// 6. An unsampled caller: nothing is recorded anywhere, and the request is served.
{
  const before = receiver.spans.length;
  const traceId = 'abcdef0123456789abcdef0123456789';
  const result = await client.completions.create({ model: 'tiny', prompt: 'quiet', max_tokens: 2 },
    { headers: { traceparent: `00-${traceId}-0123456789abcdef-00` } });
  assert.ok(result.id);
  await sleep(1500);
  assert.equal(spansOf(traceId).length, 0, 'not sampled: no span');
  assert.ok(receiver.spans.length >= before);
}
assert.ok(receiver.gzipped > 0, 'exports are gzip-compressed by default');

// 7. --trace_content: the prompt and the output are in the gateway's span, in the GenAI shape.
const withContent = await startGateway('gateway-content', [workerB], `--api_keys_file=${keys}`,
  ...tracingFlags, '--trace_content');
{
  const c = new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${withContent.port}/v1`, maxRetries: 0 });
  const result = await c.chat.completions.create(
    { model: 'tiny', messages: [{ role: 'user', content: 'traced prompt text' }], max_tokens: 4 });
  await waitFor('the content trace', () => receiver.spans.some((s) => s.attributes['gen_ai.response.id'] === result.id));
  const root = receiver.spans.find((s) => s.attributes['gen_ai.response.id'] === result.id);
  assert.deepEqual(JSON.parse(root.attributes['gen_ai.input.messages']),
    [{ role: 'user', parts: [{ type: 'text', content: 'traced prompt text' }] }]);
  assert.deepEqual(JSON.parse(root.attributes['gen_ai.output.messages']),
    [{ role: 'assistant', parts: [{ type: 'text', content: result.choices[0].message.content }] }]);
  summary.content = { output_chars: result.choices[0].message.content.length };
}

// 8. A receiver that hangs, then one that refuses: requests do not slow down; spans are dropped
// and counted. A gateway without tracing in front of the same worker is the baseline.
async function latencies(port, n) {
  const c = new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const times = [];
  for (let i = 0; i < n; ++i) {
    const t0 = process.hrtime.bigint();
    await c.completions.create({ model: 'tiny', prompt: `latency ${i}`, max_tokens: 2 });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((x, y) => x - y);
  return times[Math.floor(times.length / 2)];
}
const baseline = await startGateway('gateway-untraced', [workerB], `--api_keys_file=${keys}`);
const slow = await startGateway('gateway-hang', [workerB], `--api_keys_file=${keys}`,
  `--otlp_traces_endpoint=${endpoint}`, '--otlp_timeout=1s', '--otlp_compression=none');
receiver.mode = 'hang';
const baselineMs = await latencies(baseline.port, 30);
const hangMs = await latencies(slow.port, 30);
receiver.mode = 'refuse';
const refuseMs = await latencies(slow.port, 30);
let dropped = 0;
for (let i = 0; i < 200 && dropped === 0; ++i) {
  const values = await metric(slow.port, 'llmserve_gateway_trace_spans_total');
  dropped = values['llmserve_gateway_trace_spans_total{result="dropped"}'] ?? 0;
  if (dropped === 0) await sleep(100);
}
assert.ok(dropped > 0, 'the gateway counts the spans it could not export');
// "Within noise": a generous bound that a data path waiting on the exporter (1 s per export)
// could not meet.
for (const [what, ms] of [['hanging', hangMs], ['refusing', refuseMs]]) {
  assert.ok(ms < baselineMs * 3 + 50, `median latency with a ${what} receiver ${ms} ms vs ${baselineMs} ms without tracing`);
}
summary.dead_receiver = { median_ms: { untraced: baselineMs, hanging: hangMs, refusing: refuseMs }, dropped_spans: dropped };

// Every server exits cleanly on SIGTERM (the tracer flushes within its bound).
for (const child of [gateway.child, withContent.child, baseline.child, slow.child, workerB.child]) {
  child.kill('SIGTERM');
  const code = await Promise.race([new Promise((r) => child.on('exit', (c) => r(c))), sleep(30_000).then(() => 'timeout')]);
  assert.equal(code, 0, `exit on SIGTERM: ${code}`);
}
receiver.server.close();
summary.spans_received = receiver.spans.length;
summary.client_spans = clientSpans.getFinishedSpans().length;
console.log(JSON.stringify(summary));
console.log('ok');
process.exit(0);
