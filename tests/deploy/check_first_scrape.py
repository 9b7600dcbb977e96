#!/usr/bin/env python3
"""Scrapes a just-started planner once and requires every metric family.

  check_first_scrape.py --planner BIN --root REPO

Starts headroom-planner on loopback (free ports, a :memory: store), waits for
/healthz (HTTP: no RPC, so no gRPC series), scrapes /metrics once, and
requires, with its # HELP and # TYPE lines, every family that
deploy/grafana/headroom-dashboard.json queries, that README.md, docs/ and
deploy/ name, and that server/service/metrics.cc registers; and the families
whose labels are a fixed set with every label value at 0. Exit 0 when all
hold.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_dashboard  # noqa: E402

# Families whose labels are a fixed set: label -> every value, at 0.
FIXED = {
    "headroom_fit_verdicts_total": ("verdict", {"FITS", "BORDERLINE", "DOES_NOT_FIT"}),
    "headroom_probe_results_total": ("outcome", {"measured", "oom", "error", "duplicate"}),
    "headroom_probes": ("state", {"QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}),
    "headroom_worker_messages_rejected_total": ("reason", {
        "not_leased", "unknown_batch", "implausible_value", "malformed", "handback_limit",
        "duplicate_hello", "identity_mismatch", "inventory_too_large",
        "already_connected"}),
    "headroom_extender_calls_total": ("outcome", {
        "answered", "untouched", "bad_request", "bad_annotation", "fail_open"}),
}
UNLABELLED = ("headroom_workers_connected", "headroom_fleet_samples_total",
              "headroom_extender_nodes_filtered_total")

METRIC_IN_DOCS = re.compile(
    r"\b((?:headroom|grpc_server|DCGM_FI_DEV)_[A-Za-z0-9_]*[A-Za-z0-9])\b(?![./\w])")


def doc_names(root):
    """Metric names README.md, docs/ and deploy/ mention (a name followed by
    a dot, such as headroom_torch_probe.py, is a file; one followed by a
    slash, such as headroom_harness/, a folder)."""
    names = set()
    paths = [os.path.join(root, "README.md")]
    paths += glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
    paths += glob.glob(os.path.join(root, "deploy", "**", "*.md"), recursive=True)
    for path in paths:
        with open(path) as f:
            names.update(METRIC_IN_DOCS.findall(f.read()))
    return names


def scrape_fresh(planner_bin, root):
    grpc_port = check_dashboard.free_port()
    http_port = check_dashboard.free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = open(f"{tmp}/planner.log", "w")
        planner = subprocess.Popen(
            [planner_bin, f"--listen=127.0.0.1:{grpc_port}",
             f"--http_listen=127.0.0.1:{http_port}", "--db=:memory:",
             f"--models_dir={root}/models",
             f"--runs={root}/data/memory-runs.jsonl"],
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.time() + 60
            while True:
                if planner.poll() is not None:
                    raise SystemExit(f"planner exited with {planner.returncode}: "
                                     + open(f"{tmp}/planner.log").read()[-2000:])
                try:
                    check_dashboard.http_get(f"http://127.0.0.1:{http_port}/healthz")
                    break
                except OSError:
                    if time.time() > deadline:
                        raise SystemExit("planner did not become healthy in 60 s")
                    time.sleep(0.1)
            return check_dashboard.http_get(f"http://127.0.0.1:{http_port}/metrics")
        finally:
            planner.terminate()
            planner.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--planner", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    with open(os.path.join(args.root, "deploy/grafana/headroom-dashboard.json")) as f:
        dashboard = json.load(f)
    wanted = {}
    for title, expr in check_dashboard.check_structure(dashboard, []):
        for name in check_dashboard.metric_names(expr):
            wanted.setdefault(name, f"dashboard panel {title}")
    for name in doc_names(args.root):
        wanted.setdefault(name, "the docs")
    for name in check_dashboard.registered_names(args.root):
        wanted.setdefault(name, "server/service/metrics.cc")

    text = scrape_fresh(args.planner, args.root)
    exported = check_dashboard.exported_names(text)
    errors = [f"{name} (named by {where}) is not on the first scrape with # HELP and # TYPE"
              for name, where in sorted(wanted.items()) if name not in exported]
    for family, (label, values) in FIXED.items():
        got = set(re.findall(rf'^{family}\{{[^}}]*{label}="([^"]+)"[^}}]*\}} 0$', text,
                             flags=re.M))
        if got != values:
            errors.append(f"{family}: {label} values at 0 on the first scrape are "
                          f"{sorted(got)}, expected {sorted(values)}")
    for family in UNLABELLED:
        if not re.search(rf"^{family} 0$", text, flags=re.M):
            errors.append(f"{family}: no series at 0 on the first scrape")
    for error in errors:
        print(error)
    if errors:
        return 1
    print(f"check_first_scrape: {len(wanted)} families on the first scrape "
          f"({', '.join(sorted(wanted))}); fixed label sets at 0: {', '.join(FIXED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
