#!/usr/bin/env python3
"""Checks the images' Dockerfiles against the repository and CI.

  check_dockerfiles.py REPO_ROOT

For Dockerfile and Dockerfile.worker: the build stage runs the same
dependency and build scripts, with the same arguments, as scripts/test.sh
(what CI runs); the final stage runs as a named non-root USER and has a
HEALTHCHECK; every COPY/ADD source from the build context exists; every
shared library a binary copied from the build stage links against directly
(readelf NEEDED, resolved by ldd on the binary built here, owner by dpkg -S)
comes from a package the final stage installs, or one those depend on, or
the base image's libc6/libgcc-s1/libstdc++6. Exit 0 when all hold, 1 with one
line per problem.
"""

import glob
import os
import re
import shlex
import subprocess
import sys

DOCKERFILES = ("Dockerfile", "Dockerfile.worker")
BUILD_SCRIPT = "scripts/build-release.sh"
DEPS_SCRIPT = "scripts/install-deps.sh"


def instructions(path):
    """[(line number, INSTRUCTION, arguments)], continuations joined."""
    result, pending, start = [], "", 0
    with open(path) as f:
        for number, line in enumerate(f, 1):
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if pending and stripped.startswith("#"):
                continue
            if not pending:
                start = number
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            text = pending + stripped
            pending = ""
            keyword, _, rest = text.partition(" ")
            result.append((start, keyword.upper(), rest.strip()))
    return result


def stages(path):
    """[(name, [instructions])] per FROM."""
    result = []
    for number, keyword, rest in instructions(path):
        if keyword == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, flags=re.I)
            result.append((m.group(1) if m else "", []))
        elif result:
            result[-1][1].append((number, keyword, rest))
    return result


def commands(shell_text):
    """The simple commands of a RUN line: split at &&, ||, ; and |."""
    text = re.sub(r"--mount=\S+\s*", "", shell_text)
    return [shlex.split(c) for c in re.split(r"&&|\|\||;|\|", text) if c.strip()]


def script_calls(commands_list, script):
    return [c for c in commands_list if c and c[0] in (script, "./" + script)]


def ci_calls(root, script):
    with open(os.path.join(root, "scripts/test.sh")) as f:
        lines = [l.split("#")[0].strip() for l in f]
    return [shlex.split(l) for l in lines if l.split(" ")[0] in (script, "./" + script)]


# In every debian:12 image (apt needs them).
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def installed_packages(final):
    """Packages the stage's RUN lines apt-get install."""
    packages = set()
    for _, keyword, rest in final:
        if keyword != "RUN":
            continue
        for command in commands(rest):
            if "apt-get" in command and "install" in command:
                after = command[command.index("install") + 1:]
                packages.update(w for w in after if not w.startswith("-"))
    return packages


def dependency_closure(packages):
    """`packages` and everything they depend on, from the dependencies of the
    packages installed here (dpkg-query; a package not installed here counts
    as itself only)."""
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Depends}, ${Pre-Depends}\n"],
        capture_output=True, text=True).stdout
    depends = {}
    for line in out.splitlines():
        package, _, deps = line.partition("\t")
        # "a (>= 1) | b, c:any" -> a, c: the first alternative of each.
        depends[package] = [d.split("|")[0].split("(")[0].split(":")[0].strip()
                            for d in deps.split(",") if d.strip()]
    closure, todo = set(), list(packages)
    while todo:
        package = todo.pop()
        if package in closure:
            continue
        closure.add(package)
        todo.extend(depends.get(package, []))
    return closure


def needed_packages(binary):
    """{package: [library]} for the libraries `binary` links directly."""
    dynamic = subprocess.run(["readelf", "-d", binary], capture_output=True,
                             text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    resolved = {}
    for line in subprocess.run(["ldd", binary], capture_output=True,
                               text=True).stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m:
            resolved[m.group(1)] = m.group(2)
        m = re.match(r"\s*(/\S+) \(0x", line)  # the dynamic loader
        if m:
            resolved[os.path.basename(m.group(1))] = m.group(1)
    owners, paths = {}, {}
    for library in needed:
        if library in resolved:
            paths[os.path.realpath(resolved[library])] = library
            paths[resolved[library]] = library
        else:
            owners.setdefault("(not found by ldd)", []).append(library)
    # One dpkg -S for all of them; a path no package owns (a CUDA toolkit
    # file, say) is left out.
    out = subprocess.run(["dpkg", "-S", *paths], capture_output=True,
                         text=True).stdout
    seen = set()
    for line in out.splitlines():
        packages, _, path = line.partition(": ")
        library = paths.get(path.strip())
        if library is None or library in seen:
            continue
        seen.add(library)
        package = packages.split(",")[0].split(":")[0].strip()
        owners.setdefault(package, []).append(library)
    return owners


def check_runtime_libraries(root, name, final, errors):
    binaries = []
    for _, keyword, rest in final:
        words = shlex.split(rest)
        if keyword != "COPY" or "--from=build" not in words:
            continue
        for source in [w for w in words if not w.startswith("--")][:-1]:
            if source.startswith("/src/build/"):
                local = os.path.join(root, source[len("/src/"):])
                if os.path.isfile(local):
                    binaries.append(local)
    if not binaries:
        print(f"{name}: runtime libraries not checked: nothing built under "
              f"{os.path.join(root, 'build')}")
        return
    available = dependency_closure(installed_packages(final)) | BASE_PACKAGES
    for binary in binaries:
        for package, libraries in sorted(needed_packages(binary).items()):
            if package not in available:
                errors.append(
                    f"{name}: {os.path.relpath(binary, root)} links "
                    f"{', '.join(libraries)} from {package}, which the final "
                    f"stage does not install")


def check(root, name, errors):
    path = os.path.join(root, name)
    all_stages = stages(path)
    if len(all_stages) < 2:
        errors.append(f"{name}: expected a build stage and a runtime stage")
        return
    build = dict(all_stages).get("build")
    if build is None:
        errors.append(f"{name}: no stage named 'build'")
        return
    run_commands = [c for _, k, rest in build if k == "RUN" for c in commands(rest)]
    for script in (DEPS_SCRIPT, BUILD_SCRIPT):
        in_image = script_calls(run_commands, script)
        in_ci = ci_calls(root, script)
        if not in_ci:
            errors.append(f"scripts/test.sh: does not run {script}")
        if not in_image:
            errors.append(f"{name}: the build stage does not run {script}")
        for call in in_image:
            if call not in in_ci:
                errors.append(f"{name}: build stage runs {shlex.join(call)}, CI runs "
                              f"{' or '.join(shlex.join(c) for c in in_ci) or 'nothing'}")

    final = all_stages[-1][1]
    users = [rest for _, k, rest in final if k == "USER"]
    if not users:
        errors.append(f"{name}: the final stage has no USER (it would run as root)")
    elif users[-1].split(":")[0] in ("root", "0"):
        errors.append(f"{name}: the final stage runs as {users[-1]}")
    healthchecks = [rest for _, k, rest in final if k == "HEALTHCHECK"]
    if not healthchecks or healthchecks[-1].upper().startswith("NONE"):
        errors.append(f"{name}: the final stage has no HEALTHCHECK")
    check_runtime_libraries(root, name, final, errors)

    for stage_name, body in all_stages:
        for number, keyword, rest in body:
            if keyword not in ("COPY", "ADD"):
                continue
            words = shlex.split(rest)
            if any(w.startswith("--from=") for w in words):
                continue
            sources = [w for w in words if not w.startswith("--")][:-1]
            for source in sources:
                if "://" in source or "$" in source:  # a URL or a build ARG
                    continue
                if not glob.glob(os.path.join(root, source)):
                    errors.append(f"{name}:{number}: {keyword} source {source} "
                                  f"does not exist in the repository")


def main(argv):
    root = argv[1] if len(argv) > 1 else "."
    names = argv[2:] or DOCKERFILES
    errors = []
    for name in names:
        if not os.path.isfile(os.path.join(root, name)):
            errors.append(f"{name}: missing")
            continue
        check(root, name, errors)
    for error in errors:
        print(error)
    if errors:
        return 1
    print(f"check_dockerfiles: {', '.join(names)} OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
