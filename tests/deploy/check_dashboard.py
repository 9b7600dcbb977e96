#!/usr/bin/env python3
"""Checks deploy/grafana/headroom-dashboard.json against the real planner.

  check_dashboard.py --dashboard JSON --planner BIN --client BIN --root REPO

Structure: schemaVersion, a DS_PROMETHEUS input and datasource variable,
every non-row panel on ${DS_PROMETHEUS} with at least one target whose expr
is set. Metrics: starts headroom-planner on loopback (free ports, a
throwaway SQLite file), makes a few calls with the headroom CLI, scrapes
/metrics, and requires every metric name in every expr to be a family the
planner exported with its # HELP and # TYPE lines (a histogram's _bucket,
_sum and _count included) and registered in server/service/metrics.cc. A
family without series yet (the DCGM_* gauges before a worker reports) is
exported as those two lines alone, so every family is checked the same
way. Exit 0 when all hold.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset",
    "bool", "and", "or", "unless", "inf", "nan",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric_names(expr):
    """Metric names an expr reads: identifiers that are not functions,
    keywords, label names, durations or Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)        # label values
    text = re.sub(r"\{[^}]*\}", "", text)                 # matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)                     # $__range
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        after = text[m.end():].lstrip()
        if after.startswith("("):  # a function
            continue
        if m.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def all_panels(panels):
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def check_structure(dashboard, errors):
    if not 36 <= dashboard.get("schemaVersion", 0) <= 41:
        errors.append(f"schemaVersion {dashboard.get('schemaVersion')}: expected ~39")
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus"
               for i in dashboard.get("__inputs", [])):
        errors.append("no __inputs entry DS_PROMETHEUS of plugin prometheus")
    if not any(v.get("name") == "DS_PROMETHEUS" and v.get("type") == "datasource"
               for v in dashboard.get("templating", {}).get("list", [])):
        errors.append("no datasource variable DS_PROMETHEUS")
    exprs, ids = [], set()
    for panel in all_panels(dashboard.get("panels", [])):
        title = panel.get("title", "?")
        if panel.get("id") in ids:
            errors.append(f"panel {title}: duplicate id {panel.get('id')}")
        ids.add(panel.get("id"))
        if panel.get("type") == "row":
            continue
        if (panel.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
            errors.append(f"panel {title}: datasource is not ${{DS_PROMETHEUS}}")
        if "gridPos" not in panel:
            errors.append(f"panel {title}: no gridPos")
        targets = panel.get("targets", [])
        if not targets:
            errors.append(f"panel {title}: no targets")
        for target in targets:
            if not target.get("expr", "").strip():
                errors.append(f"panel {title}: target {target.get('refId')} has no expr")
            elif (target.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
                errors.append(f"panel {title}: target {target.get('refId')} datasource "
                              f"is not ${{DS_PROMETHEUS}}")
            else:
                exprs.append((title, target["expr"]))
    return exprs


def http_get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def scrape_planner(args, errors):
    """Families the real planner exports, after a few calls."""
    grpc_port, http_port = free_port(), free_port()
    server = f"127.0.0.1:{grpc_port}"
    with tempfile.TemporaryDirectory() as tmp:
        planner = subprocess.Popen(
            [args.planner, f"--listen={server}", f"--http_listen=127.0.0.1:{http_port}",
             f"--db={tmp}/headroom.db", f"--models_dir={args.root}/models",
             f"--runs={args.root}/data/memory-runs.jsonl",
             f"--energy_curves={args.root}/data/energy-curves.json"],
            stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/planner.log", "w"))
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                if planner.poll() is not None:
                    errors.append(f"planner exited with {planner.returncode}: "
                                  + open(f"{tmp}/planner.log").read()[-2000:])
                    return set()
                if subprocess.run([args.client, "health", "--server", server],
                                  capture_output=True).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                errors.append("planner did not become healthy in 120 s")
                return set()
            for call in (["fit", "--model", "bert-base", "--batch", "32,512", "--gpu", "L4"],
                         ["fit", "--model", "no-such-model", "--batch", "32", "--gpu", "L4"]):
                subprocess.run([args.client, *call, "--server", server], capture_output=True)
            text = http_get(f"http://127.0.0.1:{http_port}/metrics")
        finally:
            planner.terminate()
            planner.wait(timeout=30)
    names = exported_names(text)
    for required in ("grpc_server_handled_total", "headroom_fit_verdicts_total"):
        if not re.search(rf"^{required}\{{.*\}} [1-9]", text, flags=re.M):
            errors.append(f"/metrics has no nonzero {required} series after the calls")
    return names


def exported_names(text):
    """Names of the families in a /metrics text that have both a # HELP and
    a # TYPE line (with a histogram's _bucket, _sum and _count)."""
    helped = set(re.findall(r"^# HELP (\S+) ", text, flags=re.M))
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)", text, flags=re.M):
        if name not in helped:
            continue
        names.add(name)
        if kind in ("histogram", "summary"):
            names.update({name + "_bucket", name + "_sum", name + "_count"})
    return names


def registered_names(root):
    """Family names server/service/metrics.cc registers."""
    with open(os.path.join(root, "server/service/metrics.cc")) as f:
        return set(re.findall(r'New(?:Counter|Gauge|Histogram)\(\s*"([^"]+)"',
                              f.read()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--planner", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    errors = []
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    exprs = check_structure(dashboard, errors)
    exported = scrape_planner(args, errors)
    registered = registered_names(args.root)
    used = set()
    for title, expr in exprs:
        names = metric_names(expr)
        if not names:
            errors.append(f"panel {title}: no metric in {expr!r}")
        for name in sorted(names):
            used.add(name)
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if base not in registered and name not in registered:
                errors.append(f"panel {title}: {name} is not registered in metrics.cc")
            elif name not in exported:
                errors.append(f"panel {title}: {name} is not in the planner's /metrics "
                              "with # HELP and # TYPE lines")
    for error in errors:
        print(error)
    if errors:
        return 1
    print(f"check_dashboard: {len(exprs)} queries over {len(used)} metrics, all in the "
          f"planner's /metrics and metrics.cc: {', '.join(sorted(used))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
