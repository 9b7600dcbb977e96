#!/usr/bin/env python3
"""Sizes of the hand-written C++ and Python: files over a line count, and
C++ functions over a line count.

  scripts/code-sizes.py [--file-lines N] [--function-lines N] [--check]
                        [DIR ...]

A C++ function is a definition at namespace scope as clang-format (Google
style) lays it out: its body opens with a line ending in "{" at column 0's
statement level and closes with "}" in column 0. Its size is the lines from
its signature's first line to that "}". Lambdas and local classes count in
the function that holds them. With --check, exits 1 when anything is over
and names each; tests/ and bench/ are not hand-written product code and are
left out unless named.
"""
import argparse
import os
import re
import sys

DEFAULT_DIRS = ("base", "core", "io", "pages", "server", "client", "worker",
                "common")
SOURCE_SUFFIXES = (".cc", ".h", ".py", ".cu")
GENERATED = re.compile(r"(_pb2(_grpc)?\.py|\.pb\.(h|cc))$")
# The first line of a definition: not a comment, preprocessor line, closing
# brace or label, starting in column 0.
SIGNATURE_START = re.compile(r"^[A-Za-z_~:<]")
NOT_FUNCTION = re.compile(
    r"^(namespace|class|struct|enum|union|extern|using|typedef|template\s*<>?\s*$)")


def functions(lines):
    """Yields (name, first_line, last_line), 1-based, for each definition."""
    start = None
    for i, line in enumerate(lines):
        if start is None:
            # "x = ..." before any "(" is a variable's initializer.
            if (SIGNATURE_START.match(line) and not NOT_FUNCTION.match(line)
                    and "=" not in line.split("(")[0]):
                start = i
            continue
        if line.startswith("}"):
            header = " ".join(l.strip() for l in lines[start:start + 4])
            name = header.split("(")[0].split()[-1] if "(" in header else ""
            yield name, start + 1, i + 1
            start = None
        elif line and not line[0].isspace() and not line.startswith(
                ("//", "#", ")", "{", "}")) and ";" in line and "{" not in line:
            # A declaration at namespace scope ended: no body followed.
            start = None
        elif line.startswith(("//", "#")) or not line.strip():
            # A blank or comment line before any body opened: not a function.
            if not any("{" in l for l in lines[start:i]):
                start = None


def walk(dirs):
    for root in dirs:
        for path, subdirs, files in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs
                                if d not in ("__pycache__", "build"))
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES) and not GENERATED.search(name):
                    yield os.path.join(path, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="*", default=list(DEFAULT_DIRS))
    parser.add_argument("--file-lines", type=int, default=900)
    parser.add_argument("--function-lines", type=int, default=100)
    parser.add_argument("--function-dirs", nargs="*", default=["core"],
                        help="where functions are measured (default: core)")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    over = []
    for path in walk(args.dirs):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if count > args.file_lines:
            over.append(f"{path}: {count} lines (file limit {args.file_lines})")
        if not path.endswith((".cc", ".h")):
            continue
        if not any(path == d or path.startswith(d.rstrip("/") + "/")
                   for d in args.function_dirs):
            continue
        for name, first, last in functions(lines):
            size = last - first + 1
            if size > args.function_lines:
                over.append(f"{path}:{first}: {name}: {size} lines "
                            f"(function limit {args.function_lines})")
    for line in over:
        print(line)
    if not over:
        print(f"code sizes: no file over {args.file_lines} lines, no function "
              f"in {' '.join(args.function_dirs)} over {args.function_lines}")
    return 1 if (args.check and over) else 0


if __name__ == "__main__":
    sys.exit(main())
