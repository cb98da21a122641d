// What the chart's tests share: running helm, parsing its output, finding objects.
import { spawnSync } from 'node:child_process';
import { parseAllDocuments } from 'yaml';

export const RELEASE = 'rel';
export const NAMESPACE = 'llm';

// Runs helm; helm v4 logs an INFO line per symlink it follows, which is dropped from stderr.
export function helm(helmBin, args) {
  const r = spawnSync(helmBin, args, { encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw r.error;
  const stderr = r.stderr.split('\n').filter((l) => !l.includes('found symbolic link')).join('\n');
  return { code: r.status, stdout: r.stdout, stderr: stderr.trim() };
}

// `helm template` with the given values files; returns the parsed objects (throws on failure).
export function render(helmBin, chart, valuesFiles, extra = []) {
  const args = ['template', RELEASE, chart, '--namespace', NAMESPACE];
  for (const f of valuesFiles) args.push('-f', f);
  const r = helm(helmBin, [...args, ...extra]);
  if (r.code !== 0) throw new Error(`helm template ${valuesFiles.join(' ')} failed:\n${r.stderr}`);
  const objects = [];
  for (const doc of parseAllDocuments(r.stdout)) {
    if (doc.errors.length) throw new Error(`helm rendered bad YAML: ${doc.errors[0].message}`);
    const obj = doc.toJS();
    if (obj !== null && obj !== undefined) objects.push(obj);
  }
  return objects;
}

export const find = (objects, kind, name) =>
  objects.find((o) => o.kind === kind && o.metadata?.name === name);
export const ofKind = (objects, ...kinds) => objects.filter((o) => kinds.includes(o.kind));

// Whether matchLabels (a selector) selects an object with these labels.
export function selects(matchLabels, labels) {
  const entries = Object.entries(matchLabels ?? {});
  return entries.length > 0 && entries.every(([k, v]) => (labels ?? {})[k] === v);
}

export const component = (o) => o.metadata?.labels?.['app.kubernetes.io/component'];
export const workloads = (objects) => ofKind(objects, 'Deployment', 'StatefulSet');
export const podLabels = (w) => w.spec.template.metadata.labels;

// "--name=value" arguments as [name, value] pairs (every rendered flag must have that form).
export function parseFlags(args) {
  return args.map((a) => {
    const m = /^--([a-z0-9_]+)=(.*)$/s.exec(a);
    if (!m) throw new Error(`argument ${JSON.stringify(a)} is not of the form --name=value`);
    return [m[1], m[2]];
  });
}

export const flag = (args, name) => {
  const hit = parseFlags(args).filter(([n]) => n === name);
  return hit.length ? hit[hit.length - 1][1] : undefined;
};

// Seconds of a flag duration as the chart renders it ("30s").
export function durationSeconds(text) {
  const m = /^(\d+)s$/.exec(text ?? '');
  if (!m) throw new Error(`duration ${text} is not N s`);
  return Number(m[1]);
}
