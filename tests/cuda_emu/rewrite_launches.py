#!/usr/bin/env python3
"""Rewrites a CUDA source so that it compiles as host C++ for the CUDA emulator.

Usage: rewrite_launches.py INPUT.cu OUTPUT.cc [NAME]
NAME: the file name for #line (default INPUT.cu); the build passes the path relative to the
source root, so that the output is the same in every clone and ccache hits across them.

Two constructs of the kernel language are not C++ and no macro can express them:
  kernel<<<grid, block[, shared_bytes[, stream]]>>>(args...);
      -> ::llmserve::cuda_emu::Launch("kernel", kernel, grid, block, shared_bytes, stream, args...);
  extern __shared__ [__align__(n)] type name[];
      -> type* const name = static_cast<type*>(::llmserve::cuda_emu::DynamicShared());
Everything else is left as written, on the same lines (a #line directive names the original
file), so compiler messages and debuggers point at the real source.
"""

import re
import sys

EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?"
    r"([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)\s+(\w+)\s*\[\s*\]\s*;")


def kernel_start(text, end):
    """Start of the kernel expression (a name with :: and <...>) that ends before `end`."""
    i = end
    while True:
        while i > 0 and text[i - 1].isspace():
            i -= 1
        if i > 0 and text[i - 1] == ">":
            depth = 0
            while i > 0:
                i -= 1
                if text[i] == ">":
                    depth += 1
                elif text[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            continue
        if i > 1 and text[i - 2:i] == "::":
            i -= 2
            continue
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
            j -= 1
        if j == i:
            return i
        i = j
        k = i
        while k > 0 and text[k - 1].isspace():
            k -= 1
        if not (k > 1 and text[k - 2:k] == "::"):
            return i


def split_top_level(text):
    """Splits on commas outside (), [], {} and <>."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def matching_paren(text, open_index):
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses after a kernel launch")


def rewrite(text, path):
    out, pos = [], 0
    while True:
        launch = text.find("<<<", pos)
        if launch < 0:
            out.append(text[pos:])
            break
        start = kernel_start(text, launch)
        kernel = text[start:launch].strip()
        config_end = text.index(">>>", launch)
        config = split_top_level(text[launch + 3:config_end])
        if not kernel or not 2 <= len(config) <= 4:
            raise ValueError(f"{path}: cannot parse the launch at offset {launch}")
        config += ["0", "0"][len(config) - 2:]
        open_paren = text.index("(", config_end)
        close_paren = matching_paren(text, open_paren)
        args = text[open_paren + 1:close_paren]
        # Newlines inside the launch are kept so that the lines after it keep their numbers.
        newlines = text[start:close_paren + 1].count("\n")
        call = (f"::llmserve::cuda_emu::Launch(\"{' '.join(kernel.split())}\", {kernel}, "
                f"{', '.join(config)}{', ' if args.strip() else ''}{' '.join(args.split())})")
        out.append(text[pos:start] + call + "\n" * newlines)
        pos = close_paren + 1
    result = "".join(out)
    return EXTERN_SHARED.sub(
        lambda m: (f"{m.group(1)}* const {m.group(2)} = "
                   f"static_cast<{m.group(1)}*>(::llmserve::cuda_emu::DynamicShared());"),
        result)


def main():
    source, target = sys.argv[1], sys.argv[2]
    name = sys.argv[3] if len(sys.argv) > 3 else source
    with open(source, encoding="utf-8") as f:
        text = f.read()
    rewritten = f'#line 1 "{name}"\n' + rewrite(text, name)
    with open(target, "w", encoding="utf-8") as f:
        f.write(rewritten)


if __name__ == "__main__":
    main()
