// The chart's commands are real: render a ci values file, take the gateway's and the workers'
// container command and args exactly as rendered, substitute only ports (free loopback ports), the
// host (127.0.0.1), the model path, the paths of mounted Secrets (temp files with the rendered
// Secret's content, or a fresh certificate for an existing TLS Secret) and the worker DNS names
// (localhost:<that group's port>), and run the real binaries with them. The model comes from the
// rendered init container, run the same way. Passes when the gateway's /readyz answers 200, an
// authenticated /v1/completions succeeds (an unauthenticated one is refused), metrics answer, and
// every server exits 0 on SIGTERM. A flag the binaries do not know fails it.
// Usage: node flags_test.mjs HELM CHART_DIR TMP_DIR GATEWAY_BIN WORKER_BIN MAKE_MODEL_BIN
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { component, find, flag, parseFlags, render, workloads } from './render.mjs';

const [helmBin, chart, tmp, gatewayBin, workerBin, makeModelBin] = process.argv.slice(2);
const BINARIES = {
  'llmserve-gateway': gatewayBin,
  'llmserve-worker': workerBin,
  'llmserve-make-model': makeModelBin,
};
const FLAG_ERROR = /ERROR: (Unknown command line flag|Illegal value|Missing value)[^\n]*/;
fs.rmSync(tmp, { recursive: true, force: true });
fs.mkdirSync(tmp, { recursive: true });

// ---- processes: every one is killed on every way out --------------------------------------------
const children = new Set();
function killAll() {
  for (const c of children) {
    try { c.kill('SIGKILL'); } catch { /* gone */ }
  }
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { killAll(); process.exit(1); });
setTimeout(() => { console.log('FAIL: the flags test took more than 150 s'); process.exit(1); }, 150_000).unref();

function start(name, command, args, env = {}) {
  const log = path.join(tmp, `${name}.log`);
  const out = fs.openSync(log, 'w');
  const child = spawn(command, args, { stdio: ['ignore', out, out], env: { ...process.env, ...env } });
  fs.closeSync(out);
  children.add(child);
  child.exited = new Promise((resolve) => child.on('exit', (code, signal) => {
    children.delete(child);
    resolve({ code, signal });
  }));
  child.logText = () => fs.readFileSync(log, 'utf8');
  child.label = name;
  return child;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function freePort() {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}
async function listening(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

function request(url, { method = 'GET', headers = {}, body, ca } = {}) {
  const mod = url.startsWith('https:') ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { method, headers, ca, timeout: 30_000 }, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: data }));
    });
    req.on('timeout', () => req.destroy(new Error(`${url}: timed out`)));
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

// ---- what the chart rendered ----------------------------------------------------------------------
function binaryFor(container) {
  const cmd = container.command ?? [];
  const base = path.basename(cmd[0] ?? '');
  assert.ok(BINARIES[base] && cmd[0] === `/usr/local/bin/${base}`,
    `container ${container.name}: command ${JSON.stringify(cmd)} is not one of the images' binaries`);
  return [BINARIES[base], ...cmd.slice(1)];
}

// Replaces the value of the flags named in `subs` (a function of the old value); every other
// argument is passed exactly as rendered.
function substitute(args, subs) {
  const allowed = new Set(['host', 'port', 'grpc_port', 'http_port', 'metrics_port', 'model',
    'speculative_model',
    'worker_dns', 'api_keys_file', 'jwt_hs256_secret_file', 'jwt_public_key_file', 'jwt_jwks_file',
    'tls_cert', 'tls_key', 'request_log']);
  for (const name of Object.keys(subs)) assert.ok(allowed.has(name), `substituting --${name}`);
  parseFlags(args); // every argument is --name=value
  return args.map((a) => {
    const [name, value] = parseFlags([a])[0];
    return name in subs ? `--${name}=${subs[name](value)}` : a;
  });
}

// The content of the file a flag names, from the Secret mounted there.
function mountedSecretFile(objects, workload, container, filePath) {
  const mount = container.volumeMounts.find((m) => filePath.startsWith(`${m.mountPath}/`));
  assert.ok(mount, `${filePath} is in a mount`);
  const volume = workload.spec.template.spec.volumes.find((v) => v.name === mount.name);
  assert.ok(volume?.secret, `${filePath} comes from a Secret`);
  const file = filePath.slice(mount.mountPath.length + 1);
  const key = volume.secret.items?.find((i) => i.path === file)?.key ?? file;
  const secret = find(objects, 'Secret', volume.secret.secretName);
  if (!secret) return undefined; // an existing Secret, made outside the chart
  assert.ok(secret.data?.[key] !== undefined, `Secret ${secret.metadata.name} has ${key}`);
  return Buffer.from(secret.data[key], 'base64');
}

function selfSignedCertificate(dir) {
  const cert = path.join(dir, 'tls.crt');
  const key = path.join(dir, 'tls.key');
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout', key, '-out', cert], { encoding: 'utf8' });
  assert.equal(r.status, 0, `openssl: ${r.stderr}`);
  return { cert, key };
}

function hs256Jwt(secret, claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const unsigned = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  return `${unsigned}.${crypto.createHmac('sha256', secret).update(unsigned).digest('base64url')}`;
}

// ---- one values file ------------------------------------------------------------------------------
async function runScenario(valuesFile) {
  const name = path.basename(valuesFile, '-values.yaml');
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  const objects = render(helmBin, chart, [valuesFile]);
  const gatewayWorkload = workloads(objects).find((w) => component(w) === 'gateway');
  const workerWorkloads = workloads(objects).filter((w) => component(w) === 'worker');
  const started = [];

  // Workers: the init container (if any) writes the model, then the worker serves it.
  const groups = [];
  let cpuGroups = 0;
  for (const w of workerWorkloads) {
    const group = w.metadata.labels['llmserve.io/worker-group'];
    const models = path.join(dir, `models-${group}`);
    fs.mkdirSync(models);
    for (const init of w.spec.template.spec.initContainers ?? []) {
      if (!(init.command?.[0] ?? '').startsWith('/usr/local/bin/llmserve-')) {
        console.log(`     (${group}: init container ${init.name} runs ${init.image}, not one of ours; skipped)`);
        continue;
      }
      const [bin, ...rest] = binaryFor(init);
      const args = [...rest, ...(init.args ?? [])].map((a) => a.replace(/^\/models(?=\/|$)/, models));
      const r = spawnSync(bin, args, { encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.status, 0, `${group}: init container ${init.name} (${args.join(' ')}) failed:\n` +
        `${r.stdout}${r.stderr}`);
    }
    const c = w.spec.template.spec.containers[0];
    const backend = flag(c.args, 'backend');
    let modelDir = flag(c.args, 'model').replace(/^\/models/, models);
    if (!fs.existsSync(path.join(modelDir, 'config.json'))) {
      // A model from a claim or the node: stand in a generated one.
      modelDir = path.join(models, 'standin');
      const r = spawnSync(makeModelBin, ['--preset', 'tiny', '--out', modelDir], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    }
    const port = await freePort();
    const metricsPort = await freePort();
    const [bin, ...rest] = binaryFor(c);
    const args = [...rest, ...substitute(c.args, {
      host: () => '127.0.0.1',
      port: () => port,
      metrics_port: () => metricsPort,
      model: () => modelDir,
      // A draft model from the same volume; the stand-in drafts for itself.
      ...(c.args.some((a) => a.startsWith('--speculative_model='))
        ? { speculative_model: (v) => {
            const dir = v.replace(/^\/models/, models);
            return fs.existsSync(path.join(dir, 'config.json')) ? dir : modelDir;
          } }
        : {}),
    })];
    const child = start(`${name}-worker-${group}`, bin, args);
    started.push(child);
    groups.push({ group, service: w.metadata.name, backend, port, metricsPort, child, args,
      model: flag(c.args, 'served_model_name') });
    if (backend === 'cpu') cpuGroups++;
  }
  assert.ok(cpuGroups > 0, `${name}: a CPU group to serve the test`);

  // A worker whose backend cannot run here must still have parsed its flags.
  for (const g of groups) {
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && children.has(g.child) && !(await listening(g.port))) await sleep(100);
    const log = g.child.logText();
    const flagError = FLAG_ERROR.exec(log);
    assert.ok(!flagError, `${g.service}: the worker refused its rendered flags: ${flagError?.[0]}\n` +
      `args: ${g.args.join(' ')}`);
    if (g.backend === 'cpu') {
      assert.ok(children.has(g.child) && await listening(g.port),
        `${g.service}: the worker did not start:\n${log}`);
    } else {
      console.log(`     (${g.service}: backend ${g.backend} ${children.has(g.child) ? 'started' :
        'exited after parsing its flags'}: ${log.trim().split('\n').pop()})`);
    }
  }

  // The gateway, pointed at the workers through --worker_dns.
  const gc = gatewayWorkload.spec.template.spec.containers[0];
  const ports = { grpc: await freePort(), http: await freePort(), metrics: await freePort() };
  const files = {};
  let certificate;
  const fileFlag = (flagName) => (value) => {
    const content = mountedSecretFile(objects, gatewayWorkload, gc, value);
    if (content === undefined) {
      assert.ok(flagName === 'tls_cert' || flagName === 'tls_key',
        `--${flagName}: an existing Secret the test cannot stand in for`);
      certificate ??= selfSignedCertificate(dir);
      return flagName === 'tls_cert' ? certificate.cert : certificate.key;
    }
    const file = path.join(dir, `${flagName}.file`);
    fs.writeFileSync(file, content, { mode: 0o600 });
    files[flagName] = content;
    return file;
  };
  const subs = {
    host: () => '127.0.0.1',
    grpc_port: () => ports.grpc,
    http_port: () => ports.http,
    metrics_port: () => ports.metrics,
    worker_dns: (value) => value.split(',').map((entry) => {
      const g = groups.find((x) => entry.startsWith(`${x.service}.`));
      assert.ok(g, `--worker_dns entry ${entry} names no rendered worker group`);
      return `localhost:${g.backend === 'cpu' ? g.port : 1}`;
    }).join(','),
  };
  for (const f of ['api_keys_file', 'jwt_hs256_secret_file', 'jwt_public_key_file', 'jwt_jwks_file',
    'tls_cert', 'tls_key']) {
    if (flag(gc.args, f) !== undefined) subs[f] = fileFlag(f);
  }
  // The request log's file: in a folder of the test's instead of the pod's volume.
  const requestLog = path.join(dir, 'requests.jsonl');
  if (flag(gc.args, 'request_log') !== undefined) subs.request_log = () => requestLog;
  const [gbin, ...grest] = binaryFor(gc);
  const gargs = [...grest, ...substitute(gc.args, subs)];
  // Global rate limits: the URL a Secret would hold names a real redis-server started here.
  const env = {};
  if ((gc.env ?? []).some((e) => e.name === 'LLMSERVE_REDIS_URL')) {
    const redisPort = await freePort();
    const redis = start(`${name}-redis`, 'redis-server', ['--port', String(redisPort), '--bind',
      '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]);
    started.push(redis);
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !(await listening(redisPort))) await sleep(50);
    assert.ok(await listening(redisPort), `redis-server did not start (apt-get install redis-server)`);
    env.LLMSERVE_REDIS_URL = `redis://127.0.0.1:${redisPort}`;
  }
  const gateway = start(`${name}-gateway`, gbin, gargs, env);
  started.push(gateway);

  const tls = flag(gc.args, 'tls_cert') !== undefined;
  const base = `${tls ? 'https' : 'http'}://127.0.0.1:${ports.http}`;
  const ca = certificate ? fs.readFileSync(certificate.cert) : undefined;
  let ready = null;
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && children.has(gateway)) {
    ready = await request(`${base}/readyz`, { ca }).catch((e) => ({ status: 0, body: e.message }));
    if (ready.status === 200) break;
    await sleep(200);
  }
  const flagError = FLAG_ERROR.exec(gateway.logText());
  assert.ok(!flagError, `the gateway refused its rendered flags: ${flagError?.[0]}\nargs: ${gargs.join(' ')}`);
  assert.equal(ready?.status, 200, `gateway /readyz: ${JSON.stringify(ready)}\n${gateway.logText()}`);
  assert.equal((await request(`${base}/healthz`, { ca })).status, 200, '/healthz');

  // Credentials the chart provisioned: the generated API key, or a JWT for the rendered key.
  let token;
  const secret = find(objects, 'Secret', `${gatewayWorkload.metadata.name}-auth`);
  if (secret?.data?.['api-key']) {
    token = Buffer.from(secret.data['api-key'], 'base64').toString();
  } else if (files.jwt_hs256_secret_file) {
    const now = Math.floor(Date.now() / 1000);
    token = hs256Jwt(files.jwt_hs256_secret_file, { sub: 'flags-test', iat: now, exp: now + 600,
      ...(flag(gc.args, 'jwt_issuer') ? { iss: flag(gc.args, 'jwt_issuer') } : {}),
      ...(flag(gc.args, 'jwt_audience') ? { aud: flag(gc.args, 'jwt_audience') } : {}) });
  } else {
    assert.equal(flag(gc.args, 'allow_unauthenticated'), 'true', `${name}: no credential to test with`);
  }
  const model = groups.find((g) => g.backend === 'cpu').model;
  const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 4, ignore_eos: true });
  const headers = { 'content-type': 'application/json' };
  const completion = await request(`${base}/v1/completions`, {
    method: 'POST', body, ca, headers: { ...headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
  });
  assert.equal(completion.status, 200, `/v1/completions: ${completion.status} ${completion.body}`);
  const parsed = JSON.parse(completion.body);
  assert.equal(parsed.usage?.completion_tokens, 4, completion.body);
  if (token) {
    const refused = await request(`${base}/v1/completions`, { method: 'POST', body, ca, headers });
    assert.equal(refused.status, 401, `an unauthenticated request: ${refused.status} ${refused.body}`);
  }
  if (flag(gc.args, 'metrics_port') !== undefined) {
    const m = await request(`http://127.0.0.1:${ports.metrics}/metrics`);
    assert.ok(m.status === 200 && m.body.includes('llmserve_gateway_'), `gateway metrics port: ${m.status}`);
  }
  for (const g of groups.filter((x) => x.backend === 'cpu')) {
    const m = await request(`http://127.0.0.1:${g.metricsPort}/metrics`);
    assert.ok(m.status === 200 && m.body.includes('llmserve_num_requests_waiting'),
      `${g.service} metrics: ${m.status}`);
  }
  assert.ok(await listening(ports.grpc), 'the gateway serves gRPC on --grpc_port');

  // SIGTERM: the gateway, then the workers, drain and exit 0.
  for (const child of [gateway, ...groups.map((g) => g.child)]) {
    if (!children.has(child)) continue;
    child.kill('SIGTERM');
    const result = await Promise.race([child.exited, sleep(40_000).then(() => null)]);
    assert.ok(result, `${child.label} did not exit within 40 s of SIGTERM`);
    assert.equal(result.code, 0, `${child.label} exited with ${JSON.stringify(result)} after SIGTERM:\n` +
      child.logText().split('\n').slice(-10).join('\n'));
  }
  // Every request above is a line of the request log once the gateway has exited.
  if (subs.request_log) {
    const records = fs.readFileSync(requestLog, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const completed = records.filter((r) => r.endpoint === '/v1/completions' && r.status === 'OK');
    assert.equal(completed.length, 1, `request log: ${JSON.stringify(records)}`);
    assert.equal(completed[0].completion_tokens, 4, 'request log: the completion\'s tokens');
    if (flag(gc.args, 'request_log_content') === 'true') {
      assert.match(completed[0].prompt, /Once upon a time/, 'request log: the prompt (content on)');
    }
    if (token) {
      assert.ok(records.some((r) => r.status === 'UNAUTHENTICATED'), 'request log: the refused request');
    }
  }
  return `${groups.length} worker group(s), ${tls ? 'TLS, ' : ''}${token ? 'auth' : 'no auth'}`;
}

let failures = 0;
for (const file of ['cpu-demo-values.yaml', 'everything-on-values.yaml']) {
  try {
    const what = await runScenario(path.join(chart, 'ci', file));
    console.log(`ok   ci/${file}: rendered flags run (${what})`);
  } catch (e) {
    failures++;
    console.log(`FAIL ci/${file}\n     ${String(e.message).replaceAll('\n', '\n     ')}`);
  }
  killAll();
}
console.log(failures ? `${failures} scenario(s) failed` : 'all scenarios passed');
process.exit(failures ? 1 : 0);
