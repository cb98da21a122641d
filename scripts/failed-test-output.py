#!/usr/bin/env python3
"""Prints the last lines of output of each test that failed in a build tree's last ctest run.

    scripts/failed-test-output.py BUILD_DIR [LINES]

ctest prints a failed test's output where it fails, in the middle of a log of thousands of
lines; CI shows only the end of its log. scripts/run-tests.sh keeps this excerpt in
BUILD_DIR/failed-tests.txt and .ci/run prints it last, so the reason for a red run is in view.
Reads Testing/Temporary/LastTestsFailed.log (the names) and LastTest.log (the outputs).
"""
import pathlib
import sys


def failed_names(temporary):
    path = temporary / "LastTestsFailed.log"
    if not path.exists():
        return []
    # Lines are "NUMBER:NAME".
    return [line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if ":" in line]


def outputs(temporary):
    """Maps each test name in LastTest.log to its output lines."""
    path = temporary / "LastTest.log"
    if not path.exists():
        return {}
    result = {}
    name = None
    lines = None
    for line in path.read_text(errors="replace").splitlines():
        if lines is not None:
            if line == "<end of output>":
                result[name] = lines
                lines = None
            elif line != "----------------------------------------------------------" or lines:
                lines.append(line)
        elif " Test: " in line and line.split(" ", 1)[0].count("/") == 1:
            name = line.split(" Test: ", 1)[1].strip()
        elif line == "Output:" and name is not None:
            lines = []
    return result


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: failed-test-output.py BUILD_DIR [LINES]")
    temporary = pathlib.Path(sys.argv[1]) / "Testing" / "Temporary"
    keep = int(sys.argv[2]) if len(sys.argv) == 3 else 25
    by_name = outputs(temporary)
    for name in failed_names(temporary):
        lines = by_name.get(name)
        if lines is None:
            print(f"--- {name}: no output recorded")
            continue
        shown = lines[-keep:]
        print(f"--- {name}: the last {len(shown)} of {len(lines)} output lines")
        for line in shown:
            print(f"  {line[:300]}")


if __name__ == "__main__":
    main()
