#!/usr/bin/python3
"""Predicted vs published training memory for the rows of setups.jsonl.

For each row it runs `headroom model inspect` (local, no server) with the row's
flags under a timeout first, so a setup the client cannot describe in bounded
time is reported as such instead of tying up a planner thread, then
`headroom fit --json` against a planner, and compares the answer's peak and
upper bound with the published figure. Statistics are per setup (QLoRA, LoRA,
full bf16-true, ...) and kept apart for allocator-peak rows
(torch.cuda.max_memory_allocated) and reserved / nvidia-smi rows; rows marked
setup_clear=false are listed but left out of the statistics.

Stdlib only. Without --server it starts its own planner on a free loopback
port (with a throw-away SQLite file) and stops it, by its own PID, at the end.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CLIENT = "/work/main/build/client/headroom"
DEFAULT_PLANNER = "/work/main/build/server/headroom-planner"
MAX_ROWS = 1000
MAX_OUTPUT = 4 << 20  # bytes read back from one command


def setup_of(flags):
    """The setup a row exercises, named from its flags."""
    f = {}
    for i, token in enumerate(flags):
        if token.startswith("--"):
            has_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
            f[token] = flags[i + 1] if has_value else ""
    parallel = ""
    if "--parallel" in f:
        parallel = f["--parallel"] + ("+offload " if "--offload" in f else " ")
    if "--quant_base" in f:
        return parallel + "qlora-" + f["--quant_base"]
    if "--lora_rank" in f and f["--lora_rank"] != "0":
        return parallel + "lora"
    opt = f.get("--optimizer", "adamw")
    prec = f.get("--precision", "fp32")
    name = parallel + "full " + prec
    if opt != "adamw":
        name += " " + opt
    if "--optimizer_in_backward" in flags:
        name += " in-backward"
    if "--compile" in flags:
        name += " compile"
    if "--attention" in f:
        name += " attention=" + f["--attention"]
    return name


def kind_class(kind):
    return "allocator" if kind == "allocator_peak" else "reserved/smi/other"


def run(cmd, timeout, cwd=None):
    """Runs cmd; returns (rc, stdout, stderr), rc None when it timed out."""
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %ss" % timeout
    return (p.returncode, p.stdout[:MAX_OUTPUT].decode("utf-8", "replace"),
            p.stderr[:MAX_OUTPUT].decode("utf-8", "replace"))


class Planner:
    """A planner this script started, stopped by its own PID."""

    def __init__(self, binary, client, timeout):
        self.binary, self.client, self.timeout = binary, client, timeout
        self.proc, self.dir, self.addr = None, None, None

    @staticmethod
    def free_port():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="published-compare-")
        grpc, http = self.free_port(), self.free_port()
        self.addr = "127.0.0.1:%d" % grpc
        log = open(os.path.join(self.dir, "planner.log"), "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--listen", self.addr, "--http_listen",
             "127.0.0.1:%d" % http, "--db", os.path.join(self.dir, "db.sqlite"),
             "--import_threads", "8", "--log_level", "warn"],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("planner exited with %s (log %s)" %
                                   (self.proc.returncode, log.name))
            rc, _, _ = run([self.client, "gpus", "--server", self.addr,
                            "--deadline_ms", "2000"], 5)
            if rc == 0:
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("planner did not answer within %ss" % self.timeout)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def predict(row, client, server, timeout):
    """Returns a dict with peak_gb/upper_gb, or error."""
    config = row["config"]
    model = config if os.path.isabs(config) else os.path.join(REPO, config)
    if not os.path.exists(model) and not config.endswith(".json"):
        model = config  # a catalog or models/hf name
    flags = [str(x) for x in row["flags"]]
    rc, out, err = run([client, "model", "inspect", model] + flags + ["--json"],
                       timeout)
    if rc is None:
        return {"error": "model inspect did not return within %ss (the client "
                         "hangs on this setup; fit not asked)" % timeout}
    if rc != 0:
        return {"error": "model inspect: rc %d: %s" % (rc, err.strip()[:300])}
    cmd = [client, "fit", "--server", server, "--deadline_ms",
           str(int(timeout * 1000)), "--model", model, "--gpu", row["gpu"],
           "--json"] + flags
    rc, out, err = run(cmd, timeout + 5)
    if rc is None or rc == 3:
        return {"error": "fit did not answer within %ss" % timeout,
                "server_stuck": True}
    if rc != 0:
        return {"error": "fit: rc %d: %s" % (rc, err.strip()[:300])}
    try:
        answer = json.loads(out)
        est = answer["estimates"][0]
        return {"peak_gb": float(est["peakGb"]), "upper_gb": float(est["upperGb"]),
                "basis": est.get("basis", {}).get("kind", ""),
                "params": int(answer.get("params", 0))}
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return {"error": "fit: unreadable answer (%s)" % e}


def summarize(results):
    groups = {}
    for r in results:
        if not r["setup_clear"]:
            continue
        key = (kind_class(r["kind"]), r["setup"])
        groups.setdefault(key, []).append(r)
    out = []
    for (kc, setup), rs in sorted(groups.items()):
        done = [r for r in rs if "peak_gb" in r]
        errs = [abs(r["err"]) for r in done]
        worst = max(done, key=lambda r: abs(r["err"])) if done else None
        out.append({
            "kind": kc, "setup": setup, "rows": len(rs), "predicted": len(done),
            "median_abs_pct": round(100 * statistics.median(errs), 1) if errs else None,
            "worst_row": worst["row"] if worst else None,
            "worst_pct": round(100 * worst["err"], 1) if worst else None,
            "covered": sum(1 for r in done if r["measured_gb"] <= r["upper_gb"]),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=os.path.join(HERE, "setups.jsonl"))
    ap.add_argument("--client", default=os.environ.get("HEADROOM", DEFAULT_CLIENT))
    ap.add_argument("--planner", default=DEFAULT_PLANNER)
    ap.add_argument("--server", help="a running planner (default: start one)")
    ap.add_argument("--timeout", type=float, default=60,
                    help="seconds per inspect or fit call (1..600)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--json_out", help="also write the JSON to this file")
    args = ap.parse_args()
    if not 1 <= args.timeout <= 600:
        ap.error("--timeout must be within 1..600")

    rows = []
    with open(args.rows) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) > MAX_ROWS:
                ap.error("more than %d rows in %s" % (MAX_ROWS, args.rows))

    planner = None
    server = args.server
    if not server:
        planner = Planner(args.planner, args.client, 120)
        planner.start()
        server = planner.addr
    results = []
    try:
        for row in rows:
            r = dict(row)
            r["setup"] = setup_of([str(x) for x in row["flags"]])
            p = predict(row, args.client, server, args.timeout)
            if p.get("server_stuck") and planner is not None:
                # a stuck request holds a planner thread for good: start afresh
                planner.stop()
                planner.start()
                server = planner.addr
            p.pop("server_stuck", None)
            r.update(p)
            if "peak_gb" in r:
                r["err"] = (r["peak_gb"] - r["measured_gb"]) / r["measured_gb"]
                r["covered"] = r["measured_gb"] <= r["upper_gb"]
            results.append(r)
    finally:
        if planner is not None:
            planner.stop()

    summary = summarize(results)
    keep = ("row", "model", "config", "gpu", "setup", "kind", "setup_clear",
            "measured_gb", "peak_gb", "upper_gb", "err", "covered", "basis", "error")
    doc = json.dumps({"rows": [{k: r[k] for k in keep if k in r} for r in results],
                      "summary": summary}, indent=1)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(doc + "\n")
    if args.json:
        print(doc)
        return 0

    print("%-34s %-10s %-16s %8s %8s %8s %8s  %s" % (
        "row", "gpu", "setup", "measured", "peak", "upper", "err %", "covered"))
    for r in results:
        tag = "" if r["setup_clear"] else "  (setup unclear: not in the statistics)"
        if "peak_gb" in r:
            print("%-34s %-10s %-16s %8.2f %8.2f %8.2f %+8.1f  %s%s" % (
                r["row"][:34], r["gpu"], r["setup"], r["measured_gb"], r["peak_gb"],
                r["upper_gb"], 100 * r["err"], "yes" if r["covered"] else "NO", tag))
        else:
            print("%-34s %-10s %-16s %8.2f %8s %8s %8s  %s%s" % (
                r["row"][:34], r["gpu"], r["setup"], r["measured_gb"], "-", "-", "-",
                r["error"], tag))
    print()
    print("%-18s %-18s %5s %9s %11s %8s  %s" % (
        "kind", "setup", "rows", "predicted", "median|e|%", "covered", "worst"))
    for s in summary:
        med = "-" if s["median_abs_pct"] is None else "%.1f" % s["median_abs_pct"]
        worst = "-" if s["worst_row"] is None else "%s %+.1f%%" % (s["worst_row"], s["worst_pct"])
        print("%-18s %-18s %5d %9d %11s %4d/%-3d  %s" % (
            s["kind"], s["setup"], s["rows"], s["predicted"], med, s["covered"],
            s["predicted"], worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
