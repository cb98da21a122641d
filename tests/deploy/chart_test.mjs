// The Helm chart, checked with the real helm: lint and render every ci values file, validate
// every rendered object against the Kubernetes / CRD OpenAPI schemas (kubernetes-models), assert
// the properties the chart promises, check the monitoring files are carried (and nothing is
// rendered without them), and that every ci/bad values file is refused with the right message.
// Usage: node chart_test.mjs HELM CHART_DIR DEPLOY_DIR TMP_DIR
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import {
  NAMESPACE, RELEASE, component, durationSeconds, find, flag, helm, ofKind, podLabels, render,
  selects, workloads,
} from './render.mjs';

const [helmBin, chart, deployDir, tmp] = process.argv.slice(2);
fs.rmSync(tmp, { recursive: true, force: true });
fs.mkdirSync(tmp, { recursive: true });

let failures = 0;
function check(name, fn) {
  try {
    fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n     ${String(e.message).replaceAll('\n', '\n     ')}`);
  }
}
async function checkAsync(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n     ${String(e.message).replaceAll('\n', '\n     ')}`);
  }
}

// ---- schema validation: every kind the chart may render, and nothing else -----------------------
const MODELS = {
  'v1/ConfigMap': 'kubernetes-models/v1/ConfigMap',
  'v1/PersistentVolumeClaim': 'kubernetes-models/v1/PersistentVolumeClaim',
  'v1/Secret': 'kubernetes-models/v1/Secret',
  'v1/Service': 'kubernetes-models/v1/Service',
  'v1/ServiceAccount': 'kubernetes-models/v1/ServiceAccount',
  'apps/v1/Deployment': 'kubernetes-models/apps/v1/Deployment',
  'apps/v1/StatefulSet': 'kubernetes-models/apps/v1/StatefulSet',
  'autoscaling/v2/HorizontalPodAutoscaler': 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler',
  'policy/v1/PodDisruptionBudget': 'kubernetes-models/policy/v1/PodDisruptionBudget',
  'networking.k8s.io/v1/Ingress': 'kubernetes-models/networking.k8s.io/v1/Ingress',
  'networking.k8s.io/v1/NetworkPolicy': 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy',
  'gateway.networking.k8s.io/v1/HTTPRoute':
    '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute',
  'keda.sh/v1alpha1/ScaledObject': '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject',
  'monitoring.coreos.com/v1/ServiceMonitor':
    '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor',
  'monitoring.coreos.com/v1/PodMonitor':
    '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor',
  'monitoring.coreos.com/v1/PrometheusRule':
    '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule',
};
const modelClasses = {};
for (const [key, module] of Object.entries(MODELS)) {
  modelClasses[key] = (await import(module))[key.split('/').pop()];
  assert.ok(modelClasses[key], `${module} exports ${key}`);
}

// The OpenAPI schemas allow unknown fields (the API server drops or, with strict field
// validation, refuses them), so a misspelled field would pass validate(). The models' TypeScript
// declarations list every field: walk an object along them and report fields they do not name.
// Fields typed inline (maps, unions) are not descended into.
const nodeModules = path.join(path.dirname(new URL(import.meta.url).pathname), 'node_modules');
const declarations = new Map();
function declaration(file) {
  if (declarations.has(file)) return declarations.get(file);
  const text = fs.readFileSync(file, 'utf8');
  const imports = {};
  for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    const spec = m[2].replace(/\.js$/, '');
    imports[m[1]] = (spec.startsWith('.') ? path.join(path.dirname(file), spec)
      : path.join(nodeModules, spec)) + '.d.ts';
  }
  const m = /^export interface \w+(?: extends ([^{]*?))? ?\{\n([\s\S]*?)^\}/m.exec(text);
  const body = m?.[2] ?? '';
  let fields = {};
  for (const base of (m?.[1] ?? '').split(',').map((x) => x.trim()).filter((x) => x && x !== 'TypeMeta')) {
    if (!imports[base] || !fs.existsSync(imports[base])) {
      // Fields from a declaration this walker cannot read: do not judge this type.
      declarations.set(file, { fields: {} });
      return declarations.get(file);
    }
    fields = { ...fields, ...declaration(imports[base]).fields };
  }
  for (const m of body.matchAll(/^ {4}"([^"]+)"\??: (.*)$/gm)) {
    const type = m[2].replace(/;$/, '');
    const ref = /^(?:Array<)?(I\w+)>?$/.exec(type)?.[1];
    fields[m[1]] = ref && imports[ref] && fs.existsSync(imports[ref]) ? imports[ref] : null;
  }
  const result = { fields };
  declarations.set(file, result);
  return result;
}
function unknownFields(value, file, where, problems) {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, file, `${where}[${i}]`, problems));
    return;
  }
  const { fields } = declaration(file);
  if (Object.keys(fields).length === 0) return;
  for (const [k, v] of Object.entries(value)) {
    if (!(k in fields)) problems.push(`${where}.${k}: no such field`);
    else if (fields[k]) unknownFields(v, fields[k], `${where}.${k}`, problems);
  }
}

function validateAll(objects) {
  const problems = [];
  const seen = new Set();
  for (const o of objects) {
    const id = `${o.apiVersion}/${o.kind} ${o.metadata?.name}`;
    if (seen.has(id)) problems.push(`${id}: rendered twice`);
    seen.add(id);
    const Model = modelClasses[`${o.apiVersion}/${o.kind}`];
    if (!Model) {
      problems.push(`${id}: no schema for this kind (add it to MODELS in chart_test.mjs)`);
      continue;
    }
    try {
      new Model(o).validate();
    } catch (e) {
      problems.push(`${id}: ${e.message}`);
    }
    unknownFields(o, path.join(nodeModules, `${MODELS[`${o.apiVersion}/${o.kind}`]}.d.ts`), id, problems);
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(o.metadata?.name ?? '') || o.metadata.name.length > 63) {
      problems.push(`${id}: name is not a DNS-1123 label of at most 63 characters`);
    }
    for (const label of ['helm.sh/chart', 'app.kubernetes.io/name', 'app.kubernetes.io/instance',
      'app.kubernetes.io/managed-by']) {
      if (!o.metadata?.labels?.[label]) problems.push(`${id}: no ${label} label`);
    }
  }
  if (problems.length) throw new Error(problems.join('\n'));
}

check('the field check sees misspelled fields', () => {
  const problems = [];
  const deployment = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x', labelz: {} },
    spec: { selector: {}, template: { spec: { containers: [{ name: 'c', readinesProbe: {},
      livenessProbe: { grpc: { port: 1, servce: '' } }, securityContext: { readOnlyRootFileSystem: true } }] } } } };
  unknownFields(deployment, path.join(nodeModules, `${MODELS['apps/v1/Deployment']}.d.ts`), 'd', problems);
  const route = { spec: { parentRefs: [{ name: 'g', sectionNam: 'x' }], rules: [{ backendRef: [] }] } };
  unknownFields(route, path.join(nodeModules, `${MODELS['gateway.networking.k8s.io/v1/HTTPRoute']}.d.ts`), 'r', problems);
  const monitor = { spec: { endpoints: [{ prot: 'metrics' }] } };
  unknownFields(monitor, path.join(nodeModules, `${MODELS['monitoring.coreos.com/v1/ServiceMonitor']}.d.ts`), 's', problems);
  const scaled = { spec: { scaleTargetRef: { nam: 'x' }, triggers: [{ type: 'prometheus', metdata: {} }] } };
  unknownFields(scaled, path.join(nodeModules, `${MODELS['keda.sh/v1alpha1/ScaledObject']}.d.ts`), 'k', problems);
  assert.deepEqual(problems, [
    'd.metadata.labelz: no such field',
    'd.spec.template.spec.containers[0].readinesProbe: no such field',
    'd.spec.template.spec.containers[0].livenessProbe.grpc.servce: no such field',
    'd.spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem: no such field',
    'r.spec.parentRefs[0].sectionNam: no such field',
    'r.spec.rules[0].backendRef: no such field',
    's.spec.endpoints[0].prot: no such field',
    'k.spec.scaleTargetRef.nam: no such field',
    'k.spec.triggers[0].metdata: no such field',
  ]);
});

// ---- properties ----------------------------------------------------------------------------------
const containersOf = (w) => [...(w.spec.template.spec.initContainers ?? []),
  ...w.spec.template.spec.containers];
const mainContainer = (w) => w.spec.template.spec.containers[0];

function checkSecurity(objects) {
  for (const w of workloads(objects)) {
    const spec = w.spec.template.spec;
    const where = `${w.kind} ${w.metadata.name}`;
    assert.equal(spec.automountServiceAccountToken, false, `${where}: automountServiceAccountToken`);
    assert.equal(spec.securityContext?.runAsNonRoot, true, `${where}: pod runAsNonRoot`);
    assert.equal(spec.securityContext?.runAsUser, 10001, `${where}: pod runAsUser`);
    assert.equal(spec.securityContext?.seccompProfile?.type, 'RuntimeDefault', `${where}: seccomp`);
    const tmpVolume = (spec.volumes ?? []).find((v) => v.name === 'tmp');
    assert.ok(tmpVolume?.emptyDir, `${where}: an emptyDir volume "tmp"`);
    for (const c of containersOf(w)) {
      const sc = c.securityContext ?? {};
      const cw = `${where} container ${c.name}`;
      assert.equal(sc.readOnlyRootFilesystem, true, `${cw}: readOnlyRootFilesystem`);
      assert.equal(sc.allowPrivilegeEscalation, false, `${cw}: allowPrivilegeEscalation`);
      assert.equal(sc.runAsNonRoot, true, `${cw}: runAsNonRoot`);
      assert.ok((sc.capabilities?.drop ?? []).includes('ALL'), `${cw}: capabilities.drop ALL`);
      assert.ok((c.volumeMounts ?? []).some((m) => m.name === 'tmp' && m.mountPath === '/tmp'),
        `${cw}: /tmp is the tmp emptyDir`);
    }
  }
}

// preStop sleeps N, then SIGTERM; the grace period must cover N + --drain_timeout + a margin.
function checkDrain(w) {
  const c = mainContainer(w);
  const where = `${w.kind} ${w.metadata.name}`;
  const sleep = c.lifecycle?.preStop?.exec?.command;
  assert.ok(Array.isArray(sleep) && sleep[0] === '/bin/sleep' && /^\d+$/.test(sleep[1]),
    `${where}: preStop is exec /bin/sleep N (got ${JSON.stringify(sleep)})`);
  const drain = durationSeconds(flag(c.args, 'drain_timeout'));
  const grace = w.spec.template.spec.terminationGracePeriodSeconds;
  assert.ok(grace >= Number(sleep[1]) + drain + 5,
    `${where}: terminationGracePeriodSeconds ${grace} < preStop ${sleep[1]} + drain ${drain} + 5`);
}

function servicePortsResolve(objects) {
  for (const svc of ofKind(objects, 'Service')) {
    const pods = workloads(objects).filter((w) => selects(svc.spec.selector, podLabels(w)));
    assert.ok(pods.length > 0, `Service ${svc.metadata.name} selects no workload`);
    for (const p of svc.spec.ports) {
      for (const w of pods) {
        const ok = w.spec.template.spec.containers.some((c) => (c.ports ?? []).some(
          (cp) => cp.name === p.targetPort || cp.containerPort === p.targetPort));
        assert.ok(ok, `Service ${svc.metadata.name} port ${p.name}: targetPort ${p.targetPort} ` +
          `is no container port of ${w.metadata.name}`);
      }
    }
  }
}

function checkGateway(objects, ctx) {
  const gw = workloads(objects).filter((w) => component(w) === 'gateway');
  assert.equal(gw.length, 1, 'one gateway Deployment');
  const [dep] = gw;
  assert.equal(dep.kind, 'Deployment');
  const c = mainContainer(dep);
  assert.deepEqual(c.command, ['/usr/local/bin/llmserve-gateway'], 'gateway command');
  assert.equal(flag(c.args, 'host'), '0.0.0.0', 'the gateway listens on every address in its pod');
  const auth = ['api_keys_file', 'jwt_hs256_secret_file', 'jwt_public_key_file', 'jwt_jwks_file']
    .some((f) => flag(c.args, f));
  assert.ok(auth || flag(c.args, 'allow_unauthenticated') === 'true',
    'the gateway has auth or an explicit --allow_unauthenticated');
  const tls = flag(c.args, 'tls_cert') !== undefined;
  const scheme = tls ? 'HTTPS' : 'HTTP';
  assert.equal(c.readinessProbe?.httpGet?.path, '/readyz', 'gateway readiness /readyz');
  assert.equal(c.readinessProbe.httpGet.scheme, scheme, 'gateway readiness scheme');
  assert.equal(c.livenessProbe?.httpGet?.path, '/healthz', 'gateway liveness /healthz');
  assert.equal(c.livenessProbe.httpGet.scheme, scheme, 'gateway liveness scheme');
  const httpPort = c.ports.find((p) => p.name === 'http');
  assert.equal(Number(flag(c.args, 'http_port')), httpPort.containerPort, '--http_port = port http');
  assert.equal(Number(flag(c.args, 'grpc_port')),
    c.ports.find((p) => p.name === 'grpc').containerPort, '--grpc_port = port grpc');
  const metricsPort = c.ports.find((p) => p.name === 'metrics');
  assert.equal(flag(c.args, 'metrics_port'), metricsPort ? String(metricsPort.containerPort) : undefined,
    '--metrics_port = port metrics');
  checkDrain(dep);
  // Every file flag points into a read-only mount of a Secret that holds that file.
  const spec = dep.spec.template.spec;
  for (const [name, value] of c.args.map((a) => a.slice(2).split('='))) {
    if (!/(_file|^tls_cert|^tls_key)$/.test(name)) continue;
    const mount = c.volumeMounts.find((m) => value.startsWith(`${m.mountPath}/`));
    assert.ok(mount?.readOnly, `--${name}=${value} is in a read-only mount`);
    const vol = spec.volumes.find((v) => v.name === mount.name);
    assert.ok(vol.secret, `--${name} comes from a Secret`);
    const file = value.slice(mount.mountPath.length + 1);
    const item = vol.secret.items?.find((i) => i.path === file);
    const key = item ? item.key : file;
    const secret = find(objects, 'Secret', vol.secret.secretName);
    if (secret) {
      assert.ok(secret.data?.[key] !== undefined, `Secret ${secret.metadata.name} holds ${key}`);
    } else {
      assert.ok(ctx.existingSecrets.has(vol.secret.secretName),
        `--${name}: Secret ${vol.secret.secretName} is neither rendered nor an existingSecret in values`);
    }
  }
  // The request log: a file in a writable volume of its own; a database URL and password only
  // from Secrets, in the environment (never on the command line, which `ps` shows).
  const logFile = flag(c.args, 'request_log');
  if (logFile !== undefined) {
    const mount = c.volumeMounts.find((m) => m.mountPath === path.dirname(logFile));
    assert.ok(mount && !mount.readOnly, `--request_log=${logFile} is in a writable mount of its folder`);
    const vol = spec.volumes.find((v) => v.name === mount.name);
    assert.ok(vol.emptyDir || vol.persistentVolumeClaim, '--request_log: an emptyDir or a PVC');
  }
  assert.ok(!c.args.some((a) => /postgres(ql)?:\/\//.test(a)), 'no database URL in the arguments');
  for (const name of ['LLMSERVE_REQUEST_LOG', 'PGPASSWORD', 'LLMSERVE_REDIS_URL']) {
    const env = (c.env ?? []).find((e) => e.name === name);
    if (!env) continue;
    const ref = env.valueFrom?.secretKeyRef;
    assert.ok(ref && env.value === undefined, `${name} comes from a Secret`);
    assert.ok(find(objects, 'Secret', ref.name) || ctx.existingSecrets.has(ref.name),
      `${name}: Secret ${ref.name} is neither rendered nor an existingSecret in values`);
  }
  if ((c.env ?? []).some((e) => e.name === 'LLMSERVE_REQUEST_LOG') || logFile !== undefined) {
    assert.match(flag(c.args, 'request_log_queue') ?? '', /^\d+$/, '--request_log_queue with a request log');
  }
  const svc = find(objects, 'Service', dep.metadata.name);
  assert.ok(svc && selects(svc.spec.selector, podLabels(dep)), 'the gateway Service selects it');
  return dep;
}

function checkWorkers(objects, values) {
  const groups = workloads(objects).filter((w) => component(w) === 'worker');
  assert.equal(groups.length, values.workers.length, 'one workload per worker group');
  const gateway = workloads(objects).find((w) => component(w) === 'gateway');
  const dns = flag(mainContainer(gateway).args, 'worker_dns').split(',');
  const domain = values.clusterDomain ?? 'cluster.local';
  assert.equal(dns.length, groups.length, `--worker_dns has one entry per group: ${dns}`);
  for (const w of groups) {
    const where = `${w.kind} ${w.metadata.name}`;
    const group = w.metadata.labels['llmserve.io/worker-group'];
    const entry = values.workers.find((g) => g.name === group);
    assert.ok(entry, `${where}: group ${group} is in values`);
    assert.equal(w.kind, entry.kind ?? values.workerDefaults?.kind ?? 'Deployment', `${where}: kind`);
    const c = mainContainer(w);
    assert.deepEqual(c.command, ['/usr/local/bin/llmserve-worker'], `${where}: command`);
    const grpc = c.ports.find((p) => p.name === 'grpc').containerPort;
    assert.equal(Number(flag(c.args, 'port')), grpc, `${where}: --port = port grpc`);
    assert.equal(Number(flag(c.args, 'metrics_port')),
      c.ports.find((p) => p.name === 'metrics').containerPort, `${where}: --metrics_port`);
    // Probes: gRPC health, readiness on the Worker service, liveness on "".
    assert.equal(c.readinessProbe?.grpc?.service, 'llmserve.worker.v1.Worker', `${where}: readiness service`);
    assert.equal(c.readinessProbe.grpc.port, grpc, `${where}: readiness port`);
    assert.ok(c.livenessProbe?.grpc && c.livenessProbe.grpc.service === '', `${where}: liveness service ""`);
    assert.equal(c.livenessProbe.grpc.port, grpc, `${where}: liveness port`);
    assert.ok(c.startupProbe?.grpc, `${where}: gRPC startup probe`);
    assert.equal(c.startupProbe.grpc.port, grpc, `${where}: startup port`);
    const budget = c.startupProbe.periodSeconds * c.startupProbe.failureThreshold;
    assert.ok(budget >= 60, `${where}: startup probe allows ${budget}s for the model load`);
    checkDrain(w);
    // The headless Service the gateway resolves.
    const svc = find(objects, 'Service', w.metadata.name);
    assert.ok(svc, `${where}: a Service of the same name`);
    assert.equal(svc.spec.clusterIP, 'None', `${where}: the Service is headless`);
    assert.equal(svc.spec.publishNotReadyAddresses, false, `${where}: only ready pods in DNS`);
    assert.ok(selects(svc.spec.selector, podLabels(w)), `${where}: the Service selects the pods`);
    assert.ok(!workloads(objects).some((o) => o !== w && selects(svc.spec.selector, podLabels(o))),
      `${where}: the Service selects no other group`);
    const svcGrpc = svc.spec.ports.find((p) => p.name === 'grpc');
    assert.ok(dns.includes(`${svc.metadata.name}.${NAMESPACE}.svc.${domain}:${svcGrpc.port}`),
      `--worker_dns names ${svc.metadata.name}.${NAMESPACE}.svc.${domain}:${svcGrpc.port} (got ${dns})`);
    if (w.kind === 'StatefulSet') assert.equal(w.spec.serviceName, svc.metadata.name, `${where}: serviceName`);
    // Model volume mounted read-only at /models, --model inside it.
    assert.ok(flag(c.args, 'model').startsWith('/models'), `${where}: --model under /models`);
    const modelMount = c.volumeMounts.find((m) => m.mountPath === '/models');
    assert.ok(modelMount?.readOnly, `${where}: the model is mounted read-only`);
    const hasVolume = w.spec.template.spec.volumes.some((v) => v.name === modelMount.name) ||
      (w.spec.volumeClaimTemplates ?? []).some((t) => t.metadata.name === modelMount.name);
    assert.ok(hasVolume, `${where}: the model volume exists`);
    const shm = c.volumeMounts.find((m) => m.mountPath === '/dev/shm');
    if (shm) {
      const v = w.spec.template.spec.volumes.find((x) => x.name === shm.name);
      assert.equal(v.emptyDir?.medium, 'Memory', `${where}: /dev/shm is memory-backed`);
    }
    // Backend, image and GPU resources agree.
    const backend = flag(c.args, 'backend');
    const gpu = Object.keys(c.resources?.limits ?? {}).filter((k) => k.startsWith('nvidia.com/'));
    if (backend === 'cuda') {
      assert.ok(gpu.length > 0 && Number(c.resources.limits[gpu[0]]) >= 1, `${where}: cuda asks for a GPU`);
      assert.match(c.image, /-cuda$/, `${where}: the CUDA image`);
      assert.ok((w.spec.template.spec.tolerations ?? []).some((t) => t.key === 'nvidia.com/gpu'),
        `${where}: tolerates the GPU nodes' taint`);
    } else {
      assert.equal(backend, 'cpu', `${where}: backend`);
      assert.equal(gpu.length, 0, `${where}: a cpu group asks for no GPU`);
      assert.doesNotMatch(c.image, /-cuda$/, `${where}: not the CUDA image`);
    }
    // NetworkPolicy: gRPC only from the gateway's pods; metrics only from metricsFrom.
    if (values.networkPolicy?.enabled !== false) {
      const policies = ofKind(objects, 'NetworkPolicy')
        .filter((p) => selects(p.spec.podSelector.matchLabels, podLabels(w)));
      assert.ok(policies.length > 0, `${where}: a NetworkPolicy selects the pods`);
      const rules = policies.flatMap((p) => p.spec.ingress ?? []);
      const grpcRules = rules.filter((r) => (r.ports ?? []).some((p) => p.port === 'grpc' || p.port === grpc) ||
        !r.ports);
      assert.ok(grpcRules.length > 0, `${where}: a rule admits gRPC`);
      for (const r of grpcRules) {
        assert.ok(r.from?.length === 1 && r.from[0].podSelector && !r.from[0].namespaceSelector &&
          selects(r.from[0].podSelector.matchLabels, podLabels(gateway)) &&
          !selects(r.from[0].podSelector.matchLabels, podLabels(w)),
        `${where}: gRPC is admitted only from the gateway's pods: ${JSON.stringify(r.from)}`);
      }
      const metricsRules = rules.filter((r) => (r.ports ?? []).some((p) => p.port === 'metrics'));
      const metricsFrom = values.networkPolicy?.metricsFrom ?? [];
      if (metricsFrom.length === 0) {
        assert.equal(metricsRules.length, 0, `${where}: no metrics rule without networkPolicy.metricsFrom`);
      } else {
        assert.deepEqual(metricsRules.map((r) => r.from), [metricsFrom], `${where}: metrics from metricsFrom`);
      }
    }
  }
}

function checkPdbs(objects) {
  for (const pdb of ofKind(objects, 'PodDisruptionBudget')) {
    const targets = workloads(objects).filter((w) => selects(pdb.spec.selector.matchLabels, podLabels(w)));
    assert.equal(targets.length, 1, `PDB ${pdb.metadata.name} selects exactly one workload`);
  }
}

function checkScaling(objects) {
  for (const hpa of ofKind(objects, 'HorizontalPodAutoscaler')) {
    const t = find(objects, hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name);
    assert.ok(t, `HPA ${hpa.metadata.name} targets a rendered workload`);
    assert.equal(t.spec.replicas, undefined, `${t.metadata.name}: no replicas while the HPA owns them`);
  }
  for (const so of ofKind(objects, 'ScaledObject')) {
    const t = find(objects, so.spec.scaleTargetRef.kind, so.spec.scaleTargetRef.name);
    assert.ok(t && component(t) === 'worker', `ScaledObject ${so.metadata.name} targets a worker group`);
    assert.equal(t.spec.replicas, undefined, `${t.metadata.name}: no replicas while KEDA owns them`);
    const [trigger] = so.spec.triggers;
    assert.equal(trigger.type, 'prometheus', `${so.metadata.name}: a Prometheus trigger`);
    assert.match(trigger.metadata.serverAddress, /^https?:\/\//, `${so.metadata.name}: serverAddress`);
    assert.match(trigger.metadata.query, /llmserve_num_requests_waiting/, `${so.metadata.name}: query`);
    const model = flag(mainContainer(t).args, 'served_model_name');
    assert.ok(trigger.metadata.query.includes(`model="${model}"`),
      `${so.metadata.name}: the query selects the group's model ${model}: ${trigger.metadata.query}`);
    assert.match(trigger.metadata.threshold, /^\d+(\.\d+)?$/, `${so.metadata.name}: threshold`);
  }
}

function checkRoutes(objects) {
  const gateway = workloads(objects).find((w) => component(w) === 'gateway');
  for (const ing of ofKind(objects, 'Ingress')) {
    for (const rule of ing.spec.rules) {
      for (const p of rule.http.paths) {
        const svc = find(objects, 'Service', p.backend.service.name);
        assert.ok(svc && selects(svc.spec.selector, podLabels(gateway)), `Ingress backend is the gateway`);
        assert.ok(svc.spec.ports.some((sp) => sp.name === p.backend.service.port.name), 'Ingress port exists');
      }
    }
  }
  for (const route of ofKind(objects, 'HTTPRoute')) {
    assert.ok(route.spec.parentRefs.length > 0, 'HTTPRoute has parentRefs');
    for (const r of route.spec.rules) {
      for (const b of r.backendRefs) {
        const svc = find(objects, 'Service', b.name);
        assert.ok(svc && selects(svc.spec.selector, podLabels(gateway)), 'HTTPRoute backend is the gateway');
        assert.ok(svc.spec.ports.some((sp) => sp.port === b.port && sp.name === 'http'),
          `HTTPRoute port ${b.port} is the Service's http port`);
      }
    }
  }
}

function checkMonitoring(objects, values) {
  const mon = values.monitoring ?? {};
  const serviceMonitors = ofKind(objects, 'ServiceMonitor');
  const podMonitors = ofKind(objects, 'PodMonitor');
  assert.equal(serviceMonitors.length > 0, !!mon.serviceMonitor?.enabled, 'ServiceMonitors iff enabled');
  assert.equal(podMonitors.length > 0, !!mon.podMonitor?.enabled, 'PodMonitors iff enabled');
  for (const sm of serviceMonitors) {
    const svcs = ofKind(objects, 'Service').filter((s) => selects(sm.spec.selector.matchLabels, s.metadata.labels));
    assert.ok(svcs.length > 0, `ServiceMonitor ${sm.metadata.name} selects a Service`);
    for (const ep of sm.spec.endpoints) {
      for (const s of svcs) {
        assert.ok(s.spec.ports.some((p) => p.name === ep.port),
          `ServiceMonitor ${sm.metadata.name}: port ${ep.port} exists on Service ${s.metadata.name}`);
      }
    }
  }
  for (const pm of podMonitors) {
    const pods = workloads(objects).filter((w) => selects(pm.spec.selector.matchLabels, podLabels(w)));
    assert.ok(pods.length > 0, `PodMonitor ${pm.metadata.name} selects pods`);
    for (const ep of pm.spec.podMetricsEndpoints) {
      for (const w of pods) {
        assert.ok(mainContainer(w).ports.some((p) => p.name === ep.port),
          `PodMonitor ${pm.metadata.name}: port ${ep.port} exists on ${w.metadata.name}`);
      }
    }
  }
  const annotated = !mon.serviceMonitor?.enabled && !mon.podMonitor?.enabled && mon.scrapeAnnotations !== false;
  for (const w of workloads(objects)) {
    const a = w.spec.template.metadata.annotations ?? {};
    assert.equal(a['prometheus.io/scrape'], annotated ? 'true' : undefined,
      `${w.metadata.name}: prometheus.io/scrape annotation iff no monitor`);
    if (annotated) {
      assert.ok(mainContainer(w).ports.some((p) => String(p.containerPort) === a['prometheus.io/port']),
        `${w.metadata.name}: prometheus.io/port is a container port`);
    }
  }
}

// ---- the runs ---------------------------------------------------------------------------------------
const ciDir = path.join(chart, 'ci');
const ciFiles = fs.readdirSync(ciDir).filter((f) => f.endsWith('-values.yaml')).sort();
check('the ci folder has the promised values files', () => {
  for (const f of ['cpu-demo-values.yaml', 'gpu-values.yaml', 'two-models-values.yaml',
    'everything-on-values.yaml']) {
    assert.ok(ciFiles.includes(f), `ci/${f}`);
  }
});

const defaults = parseYaml(fs.readFileSync(path.join(chart, 'values.yaml'), 'utf8'));
function mergedValues(file) {
  // Enough of Helm's merge for the checks: the file's top-level keys over the defaults'.
  const v = structuredClone(defaults);
  const user = file ? parseYaml(fs.readFileSync(file, 'utf8')) ?? {} : {};
  for (const [k, val] of Object.entries(user)) {
    v[k] = (val && typeof val === 'object' && !Array.isArray(val) && v[k]) ? { ...v[k], ...val } : val;
  }
  v.workerDefaults = { ...defaults.workerDefaults, ...(user.workerDefaults ?? {}) };
  return { values: v, user };
}
function existingSecrets(user) {
  const s = new Set();
  const walk = (o) => {
    if (o && typeof o === 'object') {
      for (const [k, v] of Object.entries(o)) {
        if ((k === 'existingSecret' || k === 'passwordSecret' || k === 'headersSecret') && v) s.add(v);
        else walk(v);
      }
    }
  };
  walk(user);
  return s;
}

const rendered = {};
for (const name of [null, ...ciFiles]) {
  const label = name ? `ci/${name}` : 'default values';
  const file = name ? path.join(ciDir, name) : null;
  check(`${label}: helm lint --strict`, () => {
    const r = helm(helmBin, ['lint', '--strict', chart, ...(file ? ['-f', file] : [])]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
  });
  check(`${label}: helm install --dry-run=client renders NOTES.txt`, () => {
    const r = helm(helmBin, ['install', RELEASE, chart, '--namespace', NAMESPACE, '--dry-run=client',
      ...(file ? ['-f', file] : [])]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /NOTES:\n.*is installed as release/, 'NOTES.txt');
  });
  let objects;
  check(`${label}: helm template`, () => {
    objects = render(helmBin, chart, file ? [file] : []);
    rendered[label] = objects;
  });
  if (!objects) continue;
  const { values, user } = mergedValues(file);
  const ctx = { existingSecrets: existingSecrets(user) };
  check(`${label}: every object passes its OpenAPI schema`, () => validateAll(objects));
  check(`${label}: pods are non-root, read-only, no escalation, no capabilities, no token`,
    () => checkSecurity(objects));
  check(`${label}: gateway probes, flags, drain, secrets`, () => checkGateway(objects, ctx));
  check(`${label}: worker probes, headless Services, --worker_dns, GPUs, NetworkPolicy`,
    () => checkWorkers(objects, values));
  check(`${label}: Services reach container ports`, () => servicePortsResolve(objects));
  check(`${label}: PodDisruptionBudgets`, () => checkPdbs(objects));
  check(`${label}: HPA and KEDA`, () => checkScaling(objects));
  check(`${label}: Ingress and HTTPRoute`, () => checkRoutes(objects));
  check(`${label}: monitors and scrape annotations`, () => checkMonitoring(objects, values));
}

check('ci files turn on what they promise', () => {
  const gpu = rendered['ci/gpu-values.yaml'];
  const w = workloads(gpu).find((o) => component(o) === 'worker');
  assert.equal(Number(mainContainer(w).resources.limits['nvidia.com/gpu']), 1, 'GPU group: nvidia.com/gpu 1');
  assert.equal(flag(mainContainer(w).args, 'backend'), 'cuda');
  assert.equal(flag(mainContainer(w).args, 'allow_runtime_lora_updating'), 'true', 'GPU group: LoRA at run time');
  const groups = workloads(rendered['ci/two-models-values.yaml']).filter((o) => component(o) === 'worker');
  assert.equal(groups.length, 3);
  // The embedding group gets its task and pooling; the others generate.
  const tasks = groups.map((g) => [flag(mainContainer(g).args, 'task'), flag(mainContainer(g).args, 'pooling')]);
  assert.deepEqual(tasks.filter(([task]) => task === 'embed'), [['embed', 'last']]);
  assert.equal(tasks.filter(([task, pooling]) => task === 'generate' && pooling === undefined).length, 2);
  // The Qwen group's adapters, from the model volume; the others have none.
  const loras = groups.map((g) => flag(mainContainer(g).args, 'lora_modules')).filter(Boolean);
  assert.deepEqual(loras, ['qwen-sql=/models/adapters/qwen-sql,qwen-chat=/models/adapters/qwen-chat']);
  const qwen = groups.find((g) => flag(mainContainer(g).args, 'lora_modules'));
  assert.equal(flag(mainContainer(qwen).args, 'max_loras'), '4');
  assert.equal(flag(mainContainer(qwen).args, 'max_lora_rank'), '32');
  const all = rendered['ci/everything-on-values.yaml'];
  for (const kind of ['ServiceMonitor', 'ScaledObject', 'Ingress', 'HTTPRoute', 'HorizontalPodAutoscaler',
    'NetworkPolicy', 'PodDisruptionBudget']) {
    assert.ok(ofKind(all, kind).length > 0, `everything-on renders a ${kind}`);
  }
  const gw = mainContainer(workloads(all).find((o) => component(o) === 'gateway'));
  for (const f of ['tls_cert', 'jwt_hs256_secret_file', 'api_keys_file', 'metrics_port']) {
    assert.ok(flag(gw.args, f), `everything-on: the gateway gets --${f}`);
  }
  assert.ok(gw.env.some((e) => e.name === 'LLMSERVE_REQUEST_LOG'), 'everything-on: a PostgreSQL request log');
  assert.ok(gw.env.some((e) => e.name === 'PGPASSWORD'), 'everything-on: its password');
  assert.equal(gw.env.find((e) => e.name === 'LLMSERVE_REDIS_URL')?.valueFrom?.secretKeyRef?.name,
    'llmserve-redis', 'everything-on: the Redis URL from its Secret');
  assert.equal(flag(gw.args, 'redis_failure_policy'), 'closed');
  assert.equal(flag(gw.args, 'token_quota_daily'), '5000000');
  // Traces from the gateway and every worker, to the same endpoint, headers from the Secret.
  for (const w of workloads(all)) {
    const c = mainContainer(w);
    assert.equal(flag(c.args, 'otlp_traces_endpoint'), 'http://otel-collector.observability:4318/v1/traces',
      `${w.metadata.name}: --otlp_traces_endpoint`);
    assert.equal(flag(c.args, 'trace_sample_ratio'), '0.5', `${w.metadata.name}: --trace_sample_ratio`);
    const headers = c.env.find((e) => e.name === 'OTEL_EXPORTER_OTLP_TRACES_HEADERS');
    assert.equal(headers?.valueFrom?.secretKeyRef?.name, 'llmserve-otlp-headers', `${w.metadata.name}: headers from the Secret`);
  }
  assert.ok(!workloads(rendered['default values']).some((w) => flag(mainContainer(w).args, 'otlp_traces_endpoint')),
    'no tracing by default');
  // quantizeLmHead: auto (the default) leaves the flag to the worker, which then quantizes the
  // head exactly when the projections are; everything-on says true.
  const defaultWorker = mainContainer(workloads(rendered['default values']).find((o) => component(o) === 'worker'));
  assert.equal(flag(defaultWorker.args, 'quantize_lm_head'), undefined, 'auto: no --quantize_lm_head');
  const allWorker = mainContainer(workloads(all).find((o) => component(o) === 'worker'));
  assert.equal(flag(allWorker.args, 'quantize_lm_head'), 'true', 'everything-on: --quantize_lm_head=true');
  const demo = mainContainer(workloads(rendered['ci/cpu-demo-values.yaml']).find((o) => component(o) === 'gateway'));
  assert.equal(flag(demo.args, 'request_log'), '/var/log/llmserve/requests.jsonl', 'cpu-demo: a JSON-lines request log');
});

check('the generated API key survives as a Secret whose keys file holds its hash', () => {
  const objects = rendered['ci/cpu-demo-values.yaml'];
  const secret = ofKind(objects, 'Secret').find((s) => s.data?.['api-key']);
  const key = Buffer.from(secret.data['api-key'], 'base64').toString();
  const file = Buffer.from(secret.data['api-keys'], 'base64').toString();
  const hash = spawnSync('sha256sum', { input: key, encoding: 'utf8' }).stdout.slice(0, 64);
  assert.match(key, /^sk-[A-Za-z0-9]{40}$/);
  assert.ok(file.split('\n').includes(`generated ${hash}`), file);
});

check('keys listed with models and admin reach the keys file in the gateway\'s format', () => {
  const secret = ofKind(rendered['ci/everything-on-values.yaml'], 'Secret').find((s) => s.data?.['api-keys']);
  const lines = Buffer.from(secret.data['api-keys'], 'base64').toString().split('\n');
  assert.ok(lines.includes('ci 78ff0edbdc5c749878da674b2c0400b3cf38edf76cf19cba3ad3023a8c0d6f8d'), lines.join('\n'));
  assert.ok(lines.includes('ci-admin 1e8ce61d93da928de9e00126a9902ab3c01953bd081a64851dfbd9e045b10bb6 models=sql-lora,tiny admin'),
    lines.join('\n'));
  const gateway = mainContainer(workloads(rendered['ci/everything-on-values.yaml']).find((o) => component(o) === 'gateway'));
  assert.equal(flag(gateway.args, 'lora_load_timeout'), '30s', '--lora_load_timeout from loraLoadTimeoutSeconds');
});

// ---- monitoring files: carried from deploy/ through the symlinks, nothing without them -------------
check('files/ links to deploy/prometheus/rules and deploy/grafana/dashboards', () => {
  for (const [link, target] of [['prometheus-rules', 'prometheus/rules'], ['dashboards', 'grafana/dashboards']]) {
    const p = path.join(chart, 'files', link);
    assert.ok(fs.lstatSync(p).isSymbolicLink(), `${p} is a symlink`);
    assert.equal(fs.realpathSync(p), fs.realpathSync(path.join(deployDir, target)), `${p} -> deploy/${target}`);
  }
});

const everythingOn = path.join(ciDir, 'everything-on-values.yaml');
const ruleFiles = fs.readdirSync(path.join(deployDir, 'prometheus/rules')).filter((f) => /\.ya?ml$/.test(f));
const dashboardFiles = fs.readdirSync(path.join(deployDir, 'grafana/dashboards')).filter((f) => f.endsWith('.json'));
check(`the chart carries deploy/'s ${ruleFiles.length} rule file(s) and ${dashboardFiles.length} dashboard(s)`, () => {
  const objects = rendered['ci/everything-on-values.yaml'];
  const groups = ruleFiles.flatMap((f) => parseYaml(fs.readFileSync(path.join(deployDir, 'prometheus/rules', f), 'utf8'))?.groups ?? []);
  const rules = ofKind(objects, 'PrometheusRule');
  if (groups.length === 0) assert.equal(rules.length, 0, 'no PrometheusRule without rule files');
  else assert.deepEqual(rules[0].spec.groups, groups, 'PrometheusRule groups = the rule files\' groups');
  const dashboards = ofKind(objects, 'ConfigMap').filter((c) => c.metadata.labels?.grafana_dashboard === '1');
  assert.equal(dashboards.length, dashboardFiles.length, 'one ConfigMap per dashboard');
});

check('a copy of the chart with a rule file and a dashboard renders them; emptied, it renders none', () => {
  const copy = path.join(tmp, 'llmserve');
  fs.cpSync(chart, copy, { recursive: true, dereference: true });
  const rulesDir = path.join(copy, 'files/prometheus-rules');
  const dashDir = path.join(copy, 'files/dashboards');
  for (const d of [rulesDir, dashDir]) {
    fs.rmSync(d, { recursive: true, force: true });
    fs.mkdirSync(d);
  }
  const none = render(helmBin, copy, [everythingOn]);
  assert.equal(ofKind(none, 'PrometheusRule').length, 0, 'no PrometheusRule without rule files');
  assert.equal(ofKind(none, 'ConfigMap').length, 0, 'no ConfigMap without dashboards');
  const group = { name: 'llmserve-test', rules: [{ alert: 'LlmserveTest', expr: 'vector(1) > 2', for: '5m',
    labels: { severity: 'warning' }, annotations: { summary: 'test' } }] };
  fs.writeFileSync(path.join(rulesDir, 'test.yml'), `groups:\n  - name: ${group.name}\n    rules:\n` +
    "      - alert: LlmserveTest\n        expr: vector(1) > 2\n        for: 5m\n" +
    '        labels: {severity: warning}\n        annotations: {summary: test}\n');
  const dashboard = { title: 'llmserve test', uid: 'llmserve-test', panels: [] };
  fs.writeFileSync(path.join(dashDir, 'llmserve_test.json'), JSON.stringify(dashboard, null, 2));
  fs.writeFileSync(path.join(dashDir, 'README.md'), 'not a dashboard');
  const some = render(helmBin, copy, [everythingOn]);
  validateAll(some);
  const [rule] = ofKind(some, 'PrometheusRule');
  assert.deepEqual(rule.spec.groups, [group], 'the rule file\'s groups');
  assert.equal(rule.metadata.labels.release, 'kube-prometheus-stack', 'prometheusRule.labels');
  const cms = ofKind(some, 'ConfigMap');
  assert.equal(cms.length, 1, 'one dashboard ConfigMap');
  assert.equal(cms[0].metadata.labels.grafana_dashboard, '1');
  assert.deepEqual(JSON.parse(cms[0].data['llmserve_test.json']), dashboard, 'the dashboard JSON, intact');
  const off = render(helmBin, copy, [everythingOn], ['--set', 'monitoring.prometheusRule.enabled=false',
    '--set', 'monitoring.grafanaDashboards.enabled=false']);
  assert.equal(ofKind(off, 'PrometheusRule').length + ofKind(off, 'ConfigMap').length, 0, 'nothing when off');
});

check('helm package follows the links (the packaged chart holds deploy/\'s files)', () => {
  const out = path.join(tmp, 'package');
  const r = helm(helmBin, ['package', chart, '--destination', out]);
  assert.equal(r.code, 0, r.stderr);
  const tgz = path.join(out, fs.readdirSync(out).find((f) => f.endsWith('.tgz')));
  const list = spawnSync('tar', ['tzf', tgz], { encoding: 'utf8' }).stdout.split('\n');
  for (const f of ruleFiles) assert.ok(list.includes(`llmserve/files/prometheus-rules/${f}`), `package has ${f}`);
  for (const f of dashboardFiles) assert.ok(list.includes(`llmserve/files/dashboards/${f}`), `package has ${f}`);
  assert.ok(!list.some((f) => f.startsWith('llmserve/ci/')), 'ci/ is not packaged');
  const objects = render(helmBin, tgz, [path.join(ciDir, 'cpu-demo-values.yaml')]);
  validateAll(objects);
});

check('README.md documents every value of values.yaml', () => {
  const readme = fs.readFileSync(path.join(chart, 'README.md'), 'utf8');
  const missing = [];
  const walk = (v, p) => {
    if (p && readme.includes(`| \`${p}\` |`)) return;
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
      for (const [k, x] of Object.entries(v)) walk(x, p ? `${p}.${k}` : k);
    } else {
      missing.push(p);
    }
  };
  walk(defaults, '');
  assert.deepEqual(missing, [], 'values without a row in the README table');
});

// ---- bad values ------------------------------------------------------------------------------------
const badDir = path.join(ciDir, 'bad');
const badFiles = fs.readdirSync(badDir).filter((f) => f.endsWith('.yaml')).sort();
check('there are bad values files', () => assert.ok(badFiles.length >= 10, `${badFiles.length} files`));
for (const name of badFiles) {
  check(`ci/bad/${name} is refused with the expected message`, () => {
    const text = fs.readFileSync(path.join(badDir, name), 'utf8');
    const m = /^# expect: (.+)$/m.exec(text);
    assert.ok(m, 'the file says what to expect in a "# expect: REGEX" line');
    const r = helm(helmBin, ['template', RELEASE, chart, '-f', path.join(badDir, name)]);
    assert.notEqual(r.code, 0, 'helm template accepted it');
    assert.match(r.stderr, new RegExp(m[1]), 'the error names the problem');
    // helm v4's lint runs templates with `fail` turned into a log line, so only schema errors
    // fail the lint; `helm template` and `helm install` stop at either.
    if (r.stderr.includes("don't meet the specifications of the schema")) {
      const lint = helm(helmBin, ['lint', '--strict', chart, '-f', path.join(badDir, name)]);
      assert.notEqual(lint.code, 0, 'helm lint accepted it');
    }
  });
}

console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
