#!/usr/bin/env python3
"""Checks the example training pods the scheduler extender places.

  check_example_pods.py --cli build/client/headroom FILE_OR_DIR...

Every Pod (each YAML document of kind Pod in the files, or in DIR/*.yaml)
must name in headroom.dev/model a model of the catalog (`headroom models
--json`) that is not a cut-down template (an example is a job a user runs,
not a reduced graph), use only headroom.dev/* annotations the extender reads,
and ask for GPUs with a whole nvidia.com/gpu limit. Exit 0 when all pass, 1
with one line per error otherwise, 2 when the catalog cannot be read.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

import yaml

# The pod annotations the scheduler extender reads (deploy/scheduler/README.md).
ANNOTATIONS = {
    "model", "batch", "precision", "optimizer", "positions", "attention",
    "lora-rank", "lora-targets", "quant-base", "parallel", "grad-accum",
    "checkpointing", "framework", "job", "world-size", "coverage",
}
PREFIX = "headroom.dev/"


def load_catalog(cli):
    """{name: cut-down note ("" for a full model)} from `headroom models --json`."""
    out = subprocess.run([cli, "models", "--json"], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    catalog = {}
    for entry in json.loads(out):
        cut = entry.get("cutDown", entry.get("cut_down", ""))
        catalog[entry["name"]] = cut or ""
    return catalog


def check_pod(where, pod, catalog, errors):
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for key in sorted(annotations):
        if key.startswith(PREFIX) and key[len(PREFIX):] not in ANNOTATIONS:
            errors.append(f"{where}: annotation {key} is not one the extender reads "
                          f"({', '.join(PREFIX + a for a in sorted(ANNOTATIONS))})")
    model = annotations.get(PREFIX + "model")
    if model is None:
        errors.append(f"{where}: no {PREFIX}model annotation")
    elif model not in catalog:
        errors.append(f"{where}: {PREFIX}model {model} is not in the catalog "
                      f"(headroom models)")
    elif catalog[model]:
        errors.append(f"{where}: {PREFIX}model {model} is a cut-down template "
                      f"({catalog[model]}); name a full model")
    gpus = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limit = ((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if limit is not None:
            try:
                gpus += int(str(limit))
            except ValueError:
                errors.append(f"{where}: container {container.get('name')} "
                              f"nvidia.com/gpu {limit!r} is not a whole number")
    if gpus < 1:
        errors.append(f"{where}: no container asks for nvidia.com/gpu")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the headroom CLI")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv[1:])
    try:
        catalog = load_catalog(args.cli)
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        print(f"check_example_pods: cannot read the catalog from {args.cli} models --json: {e}")
        return 2
    errors, pods = [], 0
    for arg in args.paths:
        files = sorted(glob.glob(os.path.join(arg, "*.yaml"))) if os.path.isdir(arg) else [arg]
        for path in files:
            with open(path) as f:
                documents = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
            for index, document in enumerate(documents):
                if document.get("kind") != "Pod":
                    continue
                pods += 1
                name = (document.get("metadata") or {}).get("name", "?")
                check_pod(f"{path}[{index}] Pod {name}", document, catalog, errors)
    if pods == 0:
        errors.append(f"no Pod in {', '.join(args.paths)}")
    for error in errors:
        print(error)
    if errors:
        print(f"check_example_pods: {len(errors)} error(s)")
        return 1
    print(f"check_example_pods: {pods} pod(s) name full catalog models")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
