#!/usr/bin/env bash
# `make lint`: the checks that need no build, so that CI reports them in its first minutes:
# clang-format (the house style, checked rather than applied: `make format` applies it), the
# syntax of every shell script and every Python file, and CMake's configure step (run by the
# Makefile before this script). Prints one line per check; fails when any failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
check() {  # check NAME COMMAND...: runs it, prints "lint: NAME ok" or its output and "FAILED"
  local name=$1 output
  shift
  if output=$("$@" 2>&1); then
    echo "lint: $name ok"
  else
    printf '%s\n' "$output" | head -n 60
    echo "lint: $name FAILED"
    status=1
  fi
}

format_check() {
  git ls-files -z '*.h' '*.cc' '*.cu' '*.cuh' | xargs -0 -r clang-format --dry-run -Werror
}
shell_syntax() {
  local file failed=0
  while IFS= read -r -d '' file; do
    bash -n "$file" || failed=1
  done < <(git ls-files -z '*.sh' .ci/run)
  return "$failed"
}
python_syntax() {
  # ast.parse, not py_compile: nothing is written into the tree.
  git ls-files -z '*.py' | xargs -0 -r python3 -c '
import ast, sys
failed = False
for path in sys.argv[1:]:
    try:
        ast.parse(open(path, encoding="utf-8").read(), path)
    except SyntaxError as e:
        print(f"{path}:{e.lineno}: {e.msg}")
        failed = True
sys.exit(1 if failed else 0)'
}

check "clang-format" format_check
check "shell syntax" shell_syntax
check "python syntax" python_syntax
exit "$status"
