#!/usr/bin/python3
"""Adds the reserved and device figures of the 2026-11-30 H200 runs to data/harness-runs.jsonl.

Issue 30 item 2 fits reserved-over-allocated and the per-GPU fixed costs from
measured runs that carry them. The H200 session measured both and kept them in
its raw files, which this script copies, never computes:

- bench/device/2026-11-30-h200/harness-fp32.json: the harness's own result
  events of the runs already in data/harness-runs.jsonl. Each row gains
  `peak_reserved_gb` = peak_reserved_bytes / 1e9 of the event with its template
  and batch (the row's measured_peak_gb is that event's peak_allocated_bytes, a
  check this script makes).
- bench/device/2026-11-30-h200/probes.json: the probes run through the fleet
  (a planner and a worker on the node), whose results carry the allocator,
  reserved and NVML device peaks. Each completed batch result becomes a row
  (source "... probes.json p-N"); an OOM result a row with oom_on_gb, the card's
  size as the worker reported it (workers.txt).

Idempotent: rows it added before are replaced, not doubled. Usage:
  scripts/harness-device-figures.py [--check]   (--check: exit 1 if the file would change)
"""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = os.path.join(REPO, "bench/device/2026-11-30-h200")
RUNS = os.path.join(REPO, "data/harness-runs.jsonl")
PROBE_SOURCE = "bench/device/2026-11-30-h200/probes.json "
H200_GB = 150.1  # workers.txt: "gpu 0: NVIDIA H200, 150.1 GB (catalog H200)"


def main():
    check = "--check" in sys.argv[1:]
    with open(os.path.join(DEVICE, "harness-fp32.json")) as f:
        events = json.load(f)
    with open(os.path.join(DEVICE, "probes.json")) as f:
        probes = json.load(f)["probes"]
    with open(RUNS) as f:
        original = f.read()
    rows = [json.loads(line) for line in original.splitlines() if line.strip()]
    rows = [r for r in rows if not r.get("source", "").startswith(PROBE_SOURCE)]
    template_rows = {}
    for r in rows:
        template_rows.setdefault(r["template"], r)

    out = []
    for r in rows:
        found = [e for e in events.get(r["template"], [])
                 if e.get("event") == "result" and e["batch"] == r["batch"]]
        if len(found) != 1:
            sys.exit("no single harness event for %s batch %d" % (r["template"], r["batch"]))
        e = found[0]
        if "measured_peak_gb" in r and not e["oom"]:
            if abs(e["peak_allocated_bytes"] / 1e9 - r["measured_peak_gb"]) > 1e-4:
                sys.exit("allocated differs for %s batch %d" % (r["template"], r["batch"]))
            r["peak_reserved_gb"] = round(e["peak_reserved_bytes"] / 1e9, 4)
        out.append(r)

    for p in probes:
        if p["state"] != "SUCCEEDED" or p["request"].get("executor") != "torch":
            continue
        base = template_rows.get(p["template"])
        if base is None:
            continue  # a template without harness rows: no family / params to copy
        for res in p["results"]:
            row = {"template": p["template"], "family": base["family"], "gpu": "H200",
                   "batch": res["batch"], "params": base["params"]}
            if res.get("oom"):
                row["oom_on_gb"] = H200_GB
            elif "peakAllocatedGb" in res:
                row["measured_peak_gb"] = round(res["peakAllocatedGb"], 4)
                row["peak_reserved_gb"] = round(res["peakReservedGb"], 4)
                row["device_peak_gb"] = round(res["devicePeakGb"], 4)
            else:
                continue
            row.update({"measured_by": "TORCH_HARNESS", "framework": base["framework"],
                        "attention_backend": base["attention_backend"],
                        "source": PROBE_SOURCE + p["id"] + " (the fleet's torch probe, fp32, AdamW)"})
            out.append(row)

    text = "".join(json.dumps(r) + "\n" for r in out)
    if check:
        sys.exit(0 if text == original else 1)
    with open(RUNS, "w") as f:
        f.write(text)
    print("%d rows (%d from probes.json)" % (len(out), len(out) - len(rows)))


if __name__ == "__main__":
    main()
