#!/usr/bin/env python3
"""Runs clang's thread-safety analysis over the server, worker, client and
common sources, as the build compiles them.

Usage: check-thread-safety.py BUILD_DIR [--clang clang++-14] [--jobs N]

Reads BUILD_DIR/compile_commands.json (the build exports it), replays each
command of a file under server/, worker/, client/ or common/ with clang in
syntax-only mode (the analysis runs in Sema, so no code is generated) and
-Wthread-safety -Werror, and exits 1 naming every warning. Generated files
and third-party code are not checked; their headers are system headers.
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

CHECKED_ROOTS = ("base/", "core/", "io/", "pages/", "server/", "worker/",
                 "client/", "common/")
# Flags g++ accepts and clang 14 does not (or that change what is checked).
DROPPED_PREFIXES = ("-o", "-MD", "-MT", "-MF", "-fdiagnostics-color",
                    "-Werror", "-W")
ANALYSIS_FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                  "-Wno-unknown-warning-option"]


def clang_command(entry, clang, source_root):
    args = (entry["arguments"] if "arguments" in entry else
            shlex.split(entry["command"]))
    out = [clang]
    skip_next = False
    for arg in args[1:]:
        if skip_next:
            skip_next = False
            continue
        if arg in ("-o", "-MT", "-MF"):
            skip_next = True
            continue
        if arg.startswith(DROPPED_PREFIXES) and not arg.startswith("-Wl"):
            continue
        if arg == "-c":
            continue
        # Our own headers are checked; everything else is a system header
        # (gRPC's and absl's own annotations are not ours to fix).
        if arg.startswith("-I") and not arg[2:].startswith(source_root):
            arg = "-isystem" + arg[2:]
        out.append(arg)
    return out + ANALYSIS_FLAGS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--clang", default="clang++-14")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()

    with open(os.path.join(args.build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    source_root = os.path.dirname(os.path.abspath(__file__))
    source_root = os.path.dirname(source_root) + "/"
    checked = []
    for entry in entries:
        path = os.path.abspath(os.path.join(entry["directory"], entry["file"]))
        relative = path[len(source_root):] if path.startswith(source_root) else ""
        if relative.startswith(CHECKED_ROOTS) and path.endswith(".cc"):
            checked.append((relative, entry))
    if not checked:
        print(f"no server/worker/client/common sources in "
              f"{args.build_dir}/compile_commands.json", file=sys.stderr)
        return 2

    def run(item):
        relative, entry = item
        command = clang_command(entry, args.clang, source_root)
        done = subprocess.run(command, cwd=entry["directory"],
                              capture_output=True, text=True, timeout=600)
        return relative, done.returncode, done.stderr

    failures = 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for relative, rc, stderr in pool.map(run, sorted(checked)):
            if rc != 0:
                failures += 1
                print(f"--- {relative}\n{stderr}", end="")
    print(f"thread-safety: {len(checked)} sources checked, "
          f"{failures} with warnings")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
