#!/usr/bin/env python3
"""Validates Kubernetes manifests against the vendored JSON Schemas in
tests/deploy/schemas/ (see schemas/README.md), offline.

  validate_manifests.py DIR_OR_FILE...

Every YAML document needs apiVersion and kind of a kind the schemas know;
unknown fields, wrong types and missing required fields are errors, as with
`kubectl apply --validate=strict`. A kustomization.yaml must list every other
manifest in its directory, and only files that exist, and none of them may
hold a Secret (the operator makes each Secret; one applied from here would
overwrite it on every `kubectl apply -k`). Every DaemonSet runs on the probe
pool only: its pods select the node label headroom.dev/probe-pool: "true" and
tolerate the taint headroom.dev/probe-pool=true:NoSchedule, and one that
takes nvidia.com/gpu takes the node's full count, the nvidia.com/gpu.count it
selects. Exit 0 when all pass, 1 with one line per error otherwise.
"""

import glob
import json
import os
import sys

import jsonschema
import yaml

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
PROBE_POOL = "headroom.dev/probe-pool"


def load_schemas():
    """{"apps/v1/Deployment": validator, ...} from every schemas/*.json."""
    validators = {}
    for path in sorted(glob.glob(os.path.join(SCHEMA_DIR, "*.json"))):
        with open(path) as f:
            document = json.load(f)
        for kind, ref in document["kinds"].items():
            schema = dict(ref, definitions=document["definitions"])
            validators[kind] = jsonschema.Draft7Validator(schema)
    return validators


def check_kustomization(path, errors):
    with open(path) as f:
        kustomization = yaml.safe_load(f)
    directory = os.path.dirname(path)
    listed = kustomization.get("resources", []) if isinstance(kustomization, dict) else []
    if not listed:
        errors.append(f"{path}: no resources listed")
    for resource in listed:
        if not os.path.isfile(os.path.join(directory, resource)):
            errors.append(f"{path}: resource {resource} does not exist")
    for manifest in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        name = os.path.basename(manifest)
        if name != "kustomization.yaml" and name not in listed:
            errors.append(f"{path}: {name} is not listed in resources")
    for resource in listed:
        try:
            with open(os.path.join(directory, resource)) as f:
                documents = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
        except (OSError, yaml.YAMLError):
            continue  # reported above, or by check_manifest
        for document in documents:
            if document.get("kind") == "Secret":
                name = (document.get("metadata") or {}).get("name", "?")
                errors.append(
                    f"{path}: resource {resource} is the Secret {name}: applying the "
                    f"kustomization would overwrite the operator's Secret with it; "
                    f"keep Secrets out of resources (an example belongs in "
                    f"deploy/k8s-examples/, as db-secret.example.yaml)")


def check_probe_pool(where, document, errors):
    """A DaemonSet's pods: on the probe pool only, and all of a node's GPUs."""
    spec = (((document.get("spec") or {}).get("template") or {}).get("spec") or {})
    selector = spec.get("nodeSelector") or {}
    if selector.get(PROBE_POOL) != "true":
        errors.append(f'{where}: spec/template/spec/nodeSelector must have '
                      f'{PROBE_POOL}: "true" (workers run on the probe pool only)')
    tolerated = any(
        t.get("key") == PROBE_POOL and t.get("effect") == "NoSchedule" and
        (t.get("operator") == "Exists" or
         (t.get("operator", "Equal") == "Equal" and t.get("value") == "true"))
        for t in spec.get("tolerations") or [])
    if not tolerated:
        errors.append(f"{where}: spec/template/spec/tolerations must tolerate "
                      f"{PROBE_POOL}=true:NoSchedule (the probe pool's taint)")
    count = selector.get("nvidia.com/gpu.count")
    for container in spec.get("containers") or []:
        limit = ((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if limit is None:
            continue
        if count is None or str(limit) != str(count):
            selects = ("selects no nvidia.com/gpu.count" if count is None else
                       f"selects nvidia.com/gpu.count: {count}")
            errors.append(
                f"{where}: container {container.get('name')} takes nvidia.com/gpu: {limit} "
                f"but {selects}: a worker takes all of its node's GPUs, so select "
                f"the count and take that many")


def check_manifest(path, validators, errors):
    with open(path) as f:
        try:
            documents = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            errors.append(f"{path}: not YAML: {e}")
            return 0
    for index, document in enumerate(documents):
        where = f"{path}[{index}]"
        if not isinstance(document, dict):
            errors.append(f"{where}: not a mapping")
            continue
        kind = f"{document.get('apiVersion')}/{document.get('kind')}"
        name = (document.get("metadata") or {}).get("name", "?")
        validator = validators.get(kind)
        if validator is None:
            errors.append(f"{where}: no schema for apiVersion/kind {kind}")
            continue
        for error in sorted(validator.iter_errors(document), key=lambda e: list(e.path)):
            field = "/".join(str(p) for p in error.absolute_path) or "(top)"
            errors.append(f"{where} {kind} {name}: {field}: {error.message}")
        if kind == "apps/v1/DaemonSet":
            check_probe_pool(f"{where} {kind} {name}", document, errors)
    return len(documents)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    validators = load_schemas()
    errors, count = [], 0
    for arg in argv[1:]:
        paths = sorted(glob.glob(os.path.join(arg, "*.yaml"))) if os.path.isdir(arg) else [arg]
        if not paths:
            errors.append(f"{arg}: no manifests")
        for path in paths:
            if os.path.basename(path) == "kustomization.yaml":
                check_kustomization(path, errors)
            else:
                count += check_manifest(path, validators, errors)
    for error in errors:
        print(error)
    if errors:
        print(f"validate_manifests: {len(errors)} error(s)")
        return 1
    print(f"validate_manifests: {count} manifest(s) valid ({len(validators)} kinds known)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
