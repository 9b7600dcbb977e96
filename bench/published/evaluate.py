#!/usr/bin/python3
"""Published runs held out by publication vs the planner (issue 30, item 4).

For each publication p of the published runs file (data/published-runs.jsonl,
one headroom.v1.PublishedRun a line), it starts a planner on loopback whose
--runs are the measured runs files and the published file WITHOUT p's rows
(a temporary copy, its published-configs/ linked beside it), asks
`headroom fit --json` for each of p's rows (the model by its config file or
catalog template, the setup translated to flags, the row's GPU or its memory
in GB, its batch), and compares the row's figure in its metric with the
answer's figure of that metric (TargetResult.batches[0].figures: allocated ->
allocated_gb, reserved -> reserved_gb, device and unstated -> device_gb) and
its upper bound. OOM rows are scored on the verdict (an OOM the planner
called FITS is a miss). Statistics per kind of setup (1gpu full / lora /
qlora, multi fsdp / zero / ddp, offload) and per framework, over the rows
with setup_clear; the others are listed.

With --old-planner/--old-client (the build before this round, which knows
only the allocator peak) the same rows are asked of it too, with the
measured runs only, and its peak_gb / upper_gb set side by side.

Stdlib only. Each planner is started with a throw-away SQLite file and
stopped by its own PID. Output: a JSON document (--json_out, or --json to
print it) and a markdown table on stdout.
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
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CLIENT = os.path.join(REPO, "build/client/headroom")
DEFAULT_PLANNER = os.path.join(REPO, "build/server/headroom-planner")
DEFAULT_RUNS = ["data/memory-runs.jsonl", "data/harness-runs.jsonl"]
DEFAULT_PUBLISHED = "data/published-runs.jsonl"
CONFIGS_DIR = "published-configs"
MAX_ROWS = 100000
MAX_OUTPUT = 4 << 20  # bytes read back from one command

PRECISION = {"FP32": "fp32", "BF16_MIXED": "bf16", "FP16_MIXED": "fp16",
             "BF16_TRUE": "bf16-true", "FP16_TRUE": "fp16-true"}
OPTIMIZER = {"ADAMW": "adamw", "SGD": "sgd", "SGD_MOMENTUM": "sgd-momentum",
             "ADAMW_FUSED": "adamw-fused", "ADAMW_LOOP": "adamw-loop",
             "ADAM8BIT": "adam8bit", "PAGED_ADAMW8BIT": "paged-adamw8bit",
             "ADAFACTOR": "adafactor", "LION": "lion"}
PARALLEL = {"DDP": "ddp", "FSDP_FULL": "fsdp-full",
            "FSDP_GRAD_OP": "fsdp-grad-op", "FSDP_HYBRID": "fsdp-hybrid",
            "ZERO1": "zero1", "ZERO2": "zero2", "ZERO3": "zero3"}
METRIC_FIGURE = {"allocated": "allocated", "reserved": "reserved",
                 "device": "device", "unstated": "device"}


def camel(key):
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def snake(key):
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def normalized(obj):
    """protobuf JSON accepts snake_case and camelCase: camelCase throughout."""
    if isinstance(obj, dict):
        return {camel(k): normalized(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [normalized(v) for v in obj]
    return obj


def setup_flags(setup):
    """`headroom fit` flags for a TrainingSetup (camelCase JSON); ValueError
    naming a key no flag says."""
    s = dict(normalized(setup))
    flags = []

    def enum(key, table, flag):
        if key in s:
            value = s.pop(key)
            if value not in table:
                raise ValueError("setup.%s = %r; allowed %s" %
                                 (key, value, ", ".join(table)))
            flags.extend([flag, table[value]])

    enum("precision", PRECISION, "--precision")
    enum("optimizer", OPTIMIZER, "--optimizer")
    enum("parallel", PARALLEL, "--parallel")
    lower = lambda allowed: {v: v.lower() for v in allowed}
    enum("attention", lower(["EAGER", "SDPA", "FLASH"]), "--attention")
    enum("quantBase", lower(["NF4", "INT8"]), "--quant_base")
    enum("offload", lower(["OPTIMIZER", "PARAMS", "BOTH"]), "--offload")
    for key, flag in (("activationCheckpointing", "--checkpointing"),
                      ("compile", "--compile"),
                      ("optimizerInBackward", "--optimizer_in_backward")):
        if s.pop(key, False):
            flags.append(flag)
    for key, flag in (("positions", "--positions"), ("gradAccum", "--grad_accum"),
                      ("gpus", "--gpus"), ("tensorParallel", "--tensor_parallel"),
                      ("nodes", "--nodes"), ("gpusPerNode", "--gpus_per_node"),
                      ("trainLastBlocks", "--train_last_blocks")):
        if key in s:
            flags.extend([flag, str(int(s.pop(key)))])
    if "freeze" in s:
        flags.extend(["--freeze", ",".join(s.pop("freeze"))])
    lora = s.pop("lora", None)
    if lora:
        extra = set(lora) - {"rank", "targets", "dropout"}
        if extra:
            raise ValueError("setup.lora.%s has no flag" % sorted(extra)[0])
        flags.extend(["--lora_rank", str(int(lora.get("rank", 0)))])
        if lora.get("targets"):
            flags.extend(["--lora_targets", ",".join(lora["targets"])])
        if lora.get("dropout"):
            flags.extend(["--lora_dropout", str(lora["dropout"])])
    if s:
        raise ValueError("setup.%s has no `headroom fit` flag" % sorted(s)[0])
    return flags


def kind_of(setup):
    """1gpu full/lora/qlora, multi fsdp/zero/ddp, offload."""
    s = normalized(setup)
    if s.get("offload"):
        return "offload"
    parallel = s.get("parallel", "")
    if int(s.get("gpus", 1) or 1) > 1 or parallel:
        if parallel.startswith("FSDP"):
            return "multi fsdp"
        if parallel.startswith("ZERO"):
            return "multi zero"
        return "multi ddp"
    if s.get("quantBase"):
        return "1gpu qlora"
    if s.get("lora", {}).get("rank"):
        return "1gpu lora"
    return "1gpu full"


def run(cmd, timeout, cwd=None):
    """Runs cmd; returns (rc, stdout, stderr), rc None when it timed out."""
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %ss" % timeout
    return (p.returncode, p.stdout[:MAX_OUTPUT].decode("utf-8", "replace"),
            p.stderr[:MAX_OUTPUT].decode("utf-8", "replace"))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Planner:
    """A planner this script started on loopback, stopped by its own PID."""

    def __init__(self, binary, client, runs, timeout):
        self.binary, self.client, self.runs = binary, client, runs
        self.timeout = timeout
        self.proc, self.dir, self.addr = None, None, None

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="published-evaluate-")
        grpc, http = free_port(), free_port()
        self.addr = "127.0.0.1:%d" % grpc
        self.log = os.path.join(self.dir, "planner.log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--listen", self.addr, "--http_listen",
                 "127.0.0.1:%d" % http, "--db",
                 os.path.join(self.dir, "db.sqlite"), "--runs",
                 ",".join(self.runs), "--log_level", "warn"],
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.log, "rb") as f:
                    tail = f.read()[-600:].decode("utf-8", "replace")
                self.__exit__()
                raise RuntimeError("planner exited: %s" % tail.strip())
            # /healthz answers once the factor set is fitted and the
            # gRPC port serves.
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/healthz" % http, timeout=2) as r:
                    if r.status == 200:
                        return self
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError("planner did not answer within %ss" % self.timeout)

    def __exit__(self, *exc):
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


# The framework profile a publication's framework runs under (`headroom fit
# --framework`): axolotl runs transformers' Trainer; the others have no
# profile and are asked as `generic` in both columns.
PROFILE_OF = {"hf-trainer": "hf-trainer", "axolotl": "hf-trainer",
              "litgpt": "litgpt", "torchtune": "torchtune",
              "deepspeed": "deepspeed", "torch": "torch"}


def profile_flags(row):
    """--framework (and --framework_version) for a row, [] for none."""
    name = PROFILE_OF.get(row.get("framework", ""))
    if name is None:
        return []
    flags = ["--framework", name]
    version = str(row.get("framework_version") or "")
    if version and all(p.isdigit() for p in version.split(".")):
        flags.extend(["--framework_version", version])
    return flags


def fit_command(row, configs, client, server, timeout, extra=()):
    """The `headroom fit` command for a row, or raises ValueError."""
    if row.get("config"):
        model = os.path.join(configs, row["config"])
    elif row.get("template"):
        model = row["template"]
    else:
        raise ValueError("no config and no template")
    gpu = row["gpu"]
    if row.get("gpu_memory_gb"):
        gpu = "%g" % row["gpu_memory_gb"]
    # The row's batch is the per-GPU micro-batch; --batch is the step's,
    # which --grad_accum divides into microbatches.
    setup = row.get("setup", {})
    accum = max(1, int(setup.get("gradAccum", setup.get("grad_accum", 1)) or 1))
    return ([client, "fit", "--server", server, "--deadline_ms",
             str(int(timeout * 1000)), "--model", model, "--gpu", gpu,
             "--batch", str(int(row["batch"]) * accum), "--json"] +
            setup_flags(row.get("setup", {})) + list(extra))


def ask(row, configs, client, server, timeout, extra=()):
    """The planner's answer for a row: figure, upper bound, verdict."""
    try:
        cmd = fit_command(row, configs, client, server, timeout, extra)
    except (ValueError, TypeError) as e:
        return {"error": str(e)}
    rc, out, err = run(cmd, timeout + 5)
    if rc is None:
        return {"error": "fit did not answer within %ss" % timeout}
    if rc != 0:
        return {"error": "fit: rc %d: %s" % (rc, (err or out).strip()[:300])}
    try:
        answer = json.loads(out)
        est = answer["estimates"][0]
        target = answer["targets"][0]
        got = {"peak_gb": float(est.get("peakGb", 0)),
               "upper_gb": float(est.get("upperGb", 0)),
               "verdict": target["verdicts"][0],
               "basis": est.get("basis", {}).get("kind", "PRIOR")}
        batches = target.get("batches", [])
        if batches and batches[0].get("figures"):
            got["figures"] = batches[0]["figures"]
        kind = answer.get("bound", {}).get("kind")
        if kind:
            got["planner_kind"] = kind
        return got
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return {"error": "fit: unreadable answer (%s)" % e}


def score(row, got):
    """Adds the row's predicted figure in its metric, error and coverage."""
    out = dict(got)
    if "error" in got:
        return out
    figure = METRIC_FIGURE[row["metric"]]
    figures = got.get("figures")
    if figures is not None:
        out["predicted_gb"] = float(figures.get(figure + "Gb", 0))
        out["predicted_upper_gb"] = float(figures.get(figure + "UpperGb", 0))
        out["figure"] = figure
    else:
        # A planner without the three figures: its allocator peak.
        out["predicted_gb"], out["predicted_upper_gb"] = (got["peak_gb"],
                                                          got["upper_gb"])
        out["figure"] = "allocated (the planner gives no other)"
    if row.get("oom"):
        out["oom_said_fits"] = got["verdict"] == "FITS"
    else:
        m = float(row["measured_gb"])
        out["err"] = (out["predicted_gb"] - m) / m
        out["under"] = out["predicted_gb"] < m
        out["covered"] = m <= out["predicted_upper_gb"]
    out.pop("figures", None)
    return out


def summarize(rows, prefix, key):
    groups = {}
    for r in rows:
        if r["setup_clear"]:
            groups.setdefault(r[key], []).append(r)
    out = []
    for name, rs in sorted(groups.items()):
        scored = [r[prefix] for r in rs if "err" in r.get(prefix, {})]
        ooms = [r[prefix] for r in rs if "oom_said_fits" in r.get(prefix, {})]
        errs = [abs(s["err"]) for s in scored]
        out.append({
            key: name, "rows": len(rs), "scored": len(scored),
            "median_abs_err": round(statistics.median(errs), 4) if errs else None,
            "under": sum(1 for s in scored if s["under"]),
            "covered": sum(1 for s in scored if s["covered"]),
            "oom_rows": len(ooms),
            "oom_said_fits": sum(1 for s in ooms if s["oom_said_fits"]),
            "errors": sum(1 for r in rs if "error" in r.get(prefix, {})),
        })
    return out


def read_rows(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            # Top-level keys snake_case (the setup is read camelCase).
            row = {snake(k): v for k, v in json.loads(line).items()}
            # An unclear row may lack its batch: it is listed, not asked.
            if not row.get("setup_clear"):
                row.setdefault("batch", 0)
            for field in ("publication", "row", "metric", "batch", "gpu"):
                if field not in row:
                    raise SystemExit("%s:%d: %s is missing" % (path, n, field))
            if row["metric"] not in METRIC_FIGURE:
                raise SystemExit("%s:%d: metric %r; allowed %s" % (
                    path, n, row["metric"], ", ".join(METRIC_FIGURE)))
            row["line"] = line
            row.setdefault("setup_clear", False)
            row.setdefault("framework", "other")
            rows.append(row)
            if len(rows) > MAX_ROWS:
                raise SystemExit("more than %d rows in %s" % (MAX_ROWS, path))
    return rows


def held_out_file(rows, publication, configs, directory):
    """published-runs.jsonl without `publication`'s rows, its configs linked
    beside it."""
    path = os.path.join(directory, "published-runs.jsonl")
    with open(path, "w") as f:
        for r in rows:
            if r["publication"] != publication:
                f.write(r["line"].rstrip("\n") + "\n")
    link = os.path.join(directory, CONFIGS_DIR)
    if not os.path.exists(link):
        os.symlink(os.path.abspath(configs), link)
    return path


def evaluate(args, rows, configs, publications):
    """Each row of `publications` asked of a planner without its
    publication's rows (and of the old planner); the others are not asked."""
    runs = [os.path.join(REPO, r) if not os.path.isabs(r) else r
            for r in args.runs.split(",") if r]
    results = [dict(publication=r["publication"], row=r["row"],
                    framework=r["framework"], kind=kind_of(r.get("setup", {})),
                    metric=r["metric"], gpu=r["gpu"], batch=r["batch"],
                    setup_clear=r["setup_clear"], oom=bool(r.get("oom")),
                    measured_gb=r.get("measured_gb"),
                    unmodelled=r.get("unmodelled", []))
               for r in rows]
    tmp = tempfile.mkdtemp(prefix="published-heldout-")
    try:
        for publication in sorted(publications):
            published = held_out_file(rows, publication, configs, tmp)
            index = [i for i, r in enumerate(rows)
                     if r["publication"] == publication]
            try:
                with Planner(args.planner, args.client, runs + [published],
                             args.start_timeout) as planner:
                    for i in index:
                        results[i]["new"] = score(rows[i], ask(
                            rows[i], configs, args.client, planner.addr,
                            args.timeout))
                        if not args.profiles:
                            continue
                        flags = profile_flags(rows[i])
                        results[i]["profile"] = (
                            score(rows[i], ask(rows[i], configs, args.client,
                                               planner.addr, args.timeout,
                                               flags))
                            if flags else dict(results[i]["new"]))
            except RuntimeError as e:
                for i in index:
                    results[i]["new"] = {"error": "planner: %s" % e}
            print("held out %s: %d rows" % (publication, len(index)),
                  file=sys.stderr)
        if args.old_planner:
            # It reads no published file: the measured runs only, once.
            with Planner(args.old_planner, args.old_client, runs,
                         args.start_timeout) as planner:
                for i, row in enumerate(rows):
                    if row["publication"] not in publications:
                        continue
                    got = ask(row, configs, args.old_client, planner.addr,
                              args.timeout)
                    got.pop("figures", None)
                    results[i]["old"] = score(row, got)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def fmt(value, pattern="%.2f"):
    return "-" if value is None else pattern % value


def markdown(doc, prefixes):
    lines = []
    for key, title in (("kind", "kind of setup"), ("framework", "framework")):
        lines.append("| %s | planner | rows | scored | median abs err | under |"
                     " upper covers | OOM rows | OOM said FITS | errors |" % title)
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for prefix in prefixes:
            for s in doc["summary"][prefix][key]:
                lines.append("| %s | %s | %d | %d | %s | %d | %d | %d | %d | %d |" % (
                    s[key], prefix, s["rows"], s["scored"],
                    fmt(s["median_abs_err"] and 100 * s["median_abs_err"], "%.1f %%"),
                    s["under"], s["covered"], s["oom_rows"], s["oom_said_fits"],
                    s["errors"]))
        lines.append("")
    lines.append("| publication | row | metric | measured | planner | predicted"
                 " | upper | err | verdict | note |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        for prefix in prefixes:
            p = r.get(prefix, {})
            note = p.get("error", "") or ("" if r["setup_clear"]
                                          else "setup unclear: not in the statistics")
            if p.get("figure", "").startswith("allocated ("):
                note = ("%s; %s" % (note, p["figure"])).strip("; ")
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["publication"], r["row"], r["metric"],
                "OOM" if r["oom"] else fmt(r["measured_gb"]), prefix,
                fmt(p.get("predicted_gb")), fmt(p.get("predicted_upper_gb")),
                fmt(p.get("err") and 100 * p["err"], "%+.1f %%"),
                p.get("verdict", "-"), note.replace("|", "/")[:160]))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--published", default=os.path.join(REPO, DEFAULT_PUBLISHED),
                    help="the published runs file; its configs in "
                         "published-configs/ beside it")
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                    help="measured runs files, comma-separated")
    ap.add_argument("--client", default=os.environ.get("HEADROOM", DEFAULT_CLIENT))
    ap.add_argument("--planner", default=DEFAULT_PLANNER)
    ap.add_argument("--old-planner", dest="old_planner")
    ap.add_argument("--old-client", dest="old_client")
    ap.add_argument("--publication", action="append",
                    help="only these publications (repeatable)")
    ap.add_argument("--timeout", type=float, default=60,
                    help="seconds per fit call (1..600)")
    ap.add_argument("--start_timeout", type=float, default=300,
                    help="seconds a planner may take to start (1..3600)")
    ap.add_argument("--profiles", action="store_true",
                    help="also ask each row under its framework's profile "
                         "(--framework; column 'profile' beside 'new', the "
                         "generic answer)")
    ap.add_argument("--json", action="store_true", help="print the JSON")
    ap.add_argument("--json_out", help="write the JSON to this file")
    args = ap.parse_args()
    if not 1 <= args.timeout <= 600 or not 1 <= args.start_timeout <= 3600:
        ap.error("--timeout must be within 1..600, --start_timeout 1..3600")
    if bool(args.old_planner) != bool(args.old_client):
        ap.error("--old-planner and --old-client go together")
    rows = read_rows(args.published)
    configs = os.path.join(os.path.dirname(os.path.abspath(args.published)),
                           CONFIGS_DIR)
    publications = {r["publication"] for r in rows}
    if args.publication:
        unknown = set(args.publication) - publications
        if unknown:
            ap.error("--publication %s is not in %s" % (sorted(unknown)[0],
                                                         args.published))
        publications = set(args.publication)
    # Held out against every other publication's rows, asked only for these.
    results = [r for r in evaluate(args, rows, configs, publications)
               if r["publication"] in publications]
    prefixes = (["new"] + (["profile"] if args.profiles else []) +
                (["old"] if args.old_planner else []))
    doc = {"published": args.published, "runs": args.runs,
           "rows": results,
           "summary": {p: {"kind": summarize(results, p, "kind"),
                           "framework": summarize(results, p, "framework")}
                       for p in prefixes}}
    text = json.dumps(doc, indent=1)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    if args.json:
        print(text)
    else:
        print(markdown(doc, prefixes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
