#!/usr/bin/env python3
"""Renders every template of corpus/ with every conversation of corpus/conversations.json twice:
with python3-jinja2 set up exactly as transformers' apply_chat_template sets it up
(transformers/utils/chat_template_utils.py, _compile_jinja_template), and with our renderer
through the chat_template_render driver; the two must agree byte for byte, and where jinja2
raises (a template refusing a conversation), ours must fail too.

Usage: jinja2_corpus_test.py <chat_template_render binary> <corpus dir>
Exits 77 (skipped) when jinja2 is not importable.
"""

import copy
import datetime
import difflib
import functools
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: python3-jinja2 is not installed")
    sys.exit(77)

MAX_DIFFS = 5


class GenerationTag(Extension):
    """transformers' AssistantTracker with tracking off: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(
            lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


@functools.lru_cache(maxsize=None)  # as transformers caches _compile_jinja_template
def compile_template(source, now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def template_messages(messages):
    """What the template sees: tool-call arguments that are a JSON object become a dict (vLLM
    does this before rendering; our ChatTemplate::Render does the same)."""
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls", []):
            try:
                parsed = json.loads(call["function"]["arguments"])
            except ValueError:
                continue
            if isinstance(parsed, dict):
                call["function"]["arguments"] = parsed
    return out


def render_jinja2(source, corpus, conversation, now):
    try:
        template = compile_template(source, now)
        text = template.render(
            messages=template_messages(conversation["messages"]),
            tools=corpus["tools"] if conversation.get("with_tools") else None,
            documents=None,
            add_generation_prompt=conversation["add_generation_prompt"],
            bos_token=corpus["bos_token"],
            eos_token=corpus["eos_token"])
        return True, text
    except Exception as e:  # a template refusing a conversation, as transformers would raise
        return False, "%s: %s" % (type(e).__name__, e)


def render_ours(driver, template_path, context_paths, out_dir):
    """Our renderings of one template with every context, from one driver process."""
    for name in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, name))
    proc = subprocess.run([driver, "--out_dir=" + out_dir, template_path] + context_paths,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if proc.returncode != 0:
        message = (proc.stdout + proc.stderr).decode("utf-8", errors="replace").strip()
        return [(False, "the driver failed: " + message)] * len(context_paths)
    results = []
    for i in range(len(context_paths)):
        for suffix, ok in ((".ok", True), (".err", False)):
            path = os.path.join(out_dir, str(i) + suffix)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", errors="replace")
                results.append((ok, text if ok else text.strip()))
                break
        else:
            results.append((False, "the driver wrote nothing for context %d" % i))
    return results


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    driver, corpus_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(corpus_dir, "conversations.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    now = datetime.datetime.strptime(corpus["now"], "%Y-%m-%dT%H:%M:%SZ")
    templates = sorted(n for n in os.listdir(corpus_dir) if n.endswith(".jinja"))
    conversations = corpus["conversations"]
    if len(templates) < 40 or len(conversations) < 5:
        print("FAIL: the corpus needs at least 40 templates and 5 conversations")
        return 1

    mismatches = []
    refused = 0
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, "out")
        os.mkdir(out_dir)
        for conversation in conversations:
            context = {
                "messages": conversation["messages"],
                "add_generation_prompt": conversation["add_generation_prompt"],
                "bos_token": corpus["bos_token"],
                "eos_token": corpus["eos_token"],
                "now": corpus["now"],
            }
            if conversation.get("with_tools"):
                context["tools"] = corpus["tools"]
            context_path = os.path.join(tmp, conversation["name"] + ".json")
            with open(context_path, "w", encoding="utf-8") as f:
                json.dump(context, f, ensure_ascii=False)
            conversation["context_path"] = context_path

        for name in templates:
            path = os.path.join(corpus_dir, name)
            with open(path, encoding="utf-8") as f:
                source = f.read()
            ours = render_ours(driver, path, [c["context_path"] for c in conversations], out_dir)
            for conversation, (got_ok, got) in zip(conversations, ours):
                want_ok, want = render_jinja2(source, corpus, conversation, now)
                label = "%s x %s" % (name, conversation["name"])
                if not want_ok:
                    refused += 1
                    if got_ok:
                        mismatches.append((label, "jinja2 raised " + want,
                                           "ours rendered:\n" + got, None))
                elif not got_ok:
                    mismatches.append((label, "jinja2 rendered", "ours failed: " + got, None))
                elif want != got:
                    mismatches.append((label, want, got, True))

    total = len(templates) * len(conversations)
    print("%d templates x %d conversations = %d renderings; %d refused by the template "
          "(ours refused them too where equal)" % (len(templates), len(conversations), total,
                                                    refused))
    if not mismatches:
        print("PASS: all %d equal to jinja2" % total)
        return 0
    print("FAIL: %d of %d differ from jinja2" % (len(mismatches), total))
    for label, want, got, is_diff in mismatches:
        print("  " + label)
    for label, want, got, is_diff in mismatches[:MAX_DIFFS]:
        print("\n==== " + label)
        if is_diff:
            sys.stdout.writelines(difflib.unified_diff(
                want.splitlines(True), got.splitlines(True), "jinja2", "ours"))
            print()
        else:
            print(want[:2000])
            print(got[:2000])
    return 1


if __name__ == "__main__":
    sys.exit(main())
