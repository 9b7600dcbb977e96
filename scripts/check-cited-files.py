#!/usr/bin/env python3
"""Every file a comment names exists.

  scripts/check-cited-files.py [PATH ...]

Reads the C++, proto, Python, shell and CMake files git tracks (or the PATHs
given) and, in their comments, every path that starts at one of the
repository's top folders (core/memory/parallel.cc, docs/verdicts.md,
data/memory-runs.jsonl ...) or names a top-level document (README.md,
DESIGN.md). A path with a wildcard or a placeholder (<...>, {...}, $...) is
a pattern, not a citation, and is skipped. Exits 1 naming each file and line
whose citation does not exist, so a move or a rename that leaves a comment
behind fails the check.
"""
import os
import re
import subprocess
import sys

TOP = ("base", "core", "io", "pages", "server", "client", "worker", "common",
       "tests", "bench", "docs", "scripts", "deploy", "proto", "models", "data",
       ".ci")
SUFFIXES = (".cc", ".h", ".cu", ".proto", ".py", ".sh", ".txt", ".cmake")
COMMENT = {".py": "#", ".sh": "#", ".txt": "#", ".cmake": "#"}
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\w|[A-Z]+\.md)" %
                  "|".join(re.escape(t) for t in TOP))
PATTERN = re.compile(r"[*<>{}$]")


def comments(path, text):
    """Yields (line number, comment text) for each commented line."""
    marker = COMMENT.get(os.path.splitext(path)[1], "//")
    for number, line in enumerate(text.split("\n"), 1):
        at = line.find(marker)
        if at >= 0 and line[:at].count('"') % 2 == 0:
            yield number, line[at + len(marker):]


def main(argv):
    if argv:
        files = argv
    else:
        files = subprocess.check_output(["git", "ls-files"], text=True).split()
    files = [f for f in files if f.endswith(SUFFIXES)
             and not f.startswith(("data/", "tests/data/"))]
    missing = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for number, comment in comments(path, text):
            for match in PATH.finditer(comment):
                cited = match.group(1).rstrip(".")
                end = match.end()
                if PATTERN.search(cited) or PATTERN.search(comment[end:end + 2]):
                    continue
                if not os.path.exists(cited):
                    missing.append(f"{path}:{number}: cites {cited}, which "
                                   "does not exist")
    for line in missing:
        print(line)
    if missing:
        print(f"check-cited-files: {len(missing)} comments cite files that "
              "do not exist", file=sys.stderr)
        return 1
    print(f"check-cited-files: every file cited in the comments of "
          f"{len(files)} files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
