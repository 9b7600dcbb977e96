#!/usr/bin/python3
"""The outside client's trust checks (issue 32), run again with counts.

Starts a planner from BUILD on loopback twice -- once with TLS, client
certificates and tokens (reads need a token), once with tokens only and open
reads -- makes the development CA and tokens with scripts/dev-certs.sh, and
tries each attack the outside client reported. Every attack is tried a
bounded number of times; each line says how many tries did harm (the planner
accepted what it should have refused, or stopped answering) out of how many.

  /usr/bin/python3 bench/trust/attacks.py --build build   (Debian python3-grpcio) [--json OUT]

Run it on two builds side by side (today's main and the change) to compare.
Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Planner:
    """A planner process on loopback; stderr kept for counting log lines."""

    def __init__(self, build: str, workdir: str, args: list[str]):
        self.port = free_port()
        self.http_port = free_port()
        self.log_path = os.path.join(workdir, f"planner-{self.port}.log")
        self.log = open(self.log_path, "w")
        cmd = [os.path.join(build, "server", "headroom-planner"),
               f"--listen=127.0.0.1:{self.port}",
               f"--http_listen=127.0.0.1:{self.http_port}",
               f"--db={os.path.join(workdir, f'db-{self.port}.sqlite')}",
               "--log_level=info"] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log,
                                     cwd=ROOT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"planner exited: {open(self.log_path).read()[-2000:]}")
            if "event=serving" in open(self.log_path).read():
                return
            time.sleep(0.1)
        raise RuntimeError("planner did not serve within 60 s")

    def log_lines(self) -> int:
        self.log.flush()
        with open(self.log_path) as f:
            return sum(1 for _ in f)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--json", default="")
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "client", "python", "package"))
    import grpc  # noqa: E402
    from headroom.v1 import fleet_pb2, fleet_pb2_grpc  # noqa: E402
    from headroom.v1 import model_pb2, planner_pb2, planner_pb2_grpc  # noqa: E402

    work = tempfile.mkdtemp(prefix="headroom-attacks-")
    certs = os.path.join(work, "certs")
    subprocess.run([os.path.join(ROOT, "scripts", "dev-certs.sh"), certs,
                    "--workers", "w1"], check=True, capture_output=True)
    tokens = {r: read(os.path.join(certs, f"token-{r}")).decode().strip()
              for r in ("reader", "operator", "admin")}
    rows: list[dict] = []

    def row(attack: str, harmed: int, tries: int, detail: str):
        rows.append({"attack": attack, "harmed": harmed, "tries": tries,
                     "detail": detail})
        print(f"{attack:<58} harm {harmed:>4} of {tries:<5} {detail}",
              flush=True)

    def code_of(call) -> str:
        try:
            call()
            return "OK"
        except grpc.RpcError as e:  # noqa: PERF203
            return e.code().name

    def tls_channel(port, cert=None):
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(os.path.join(certs, "ca.pem")),
            private_key=read(os.path.join(certs, f"{cert}-key.pem")) if cert else None,
            certificate_chain=read(os.path.join(certs, f"{cert}.pem")) if cert else None)
        return grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[
            ("grpc.ssl_target_name_override", "localhost")])

    def hello(worker_id, gpu_name, memory_gb, simulated):
        h = fleet_pb2.WorkerHello(worker_id=worker_id, hostname="attacker",
                                  executors=["sim"], version="attack")
        g = h.gpus.add()
        g.index = 0
        g.name = gpu_name
        g.uuid = "GPU-attack-0"
        g.memory_bytes = int(memory_gb * 1e9)
        g.simulated = simulated
        return fleet_pb2.WorkerMessage(hello=h)

    def connect_outcome(channel, message, metadata=()):
        """'welcome', 'rejected', or a status code name."""
        stub = fleet_pb2_grpc.FleetStub(channel)
        done = threading.Event()

        def requests():
            yield message
            done.wait(5)

        try:
            responses = stub.Connect(requests(), metadata=metadata, timeout=5)
            for reply in responses:
                kind = reply.WhichOneof("kind")
                done.set()
                return "welcome" if kind == "welcome" else kind
            return "closed"
        except grpc.RpcError as e:
            done.set()
            return e.code().name

    # ---- A: TLS, client certificates, tokens, reads need a token --------
    a = Planner(build, work, [
        f"--tls_cert={certs}/planner.pem", f"--tls_key={certs}/planner-key.pem",
        f"--tls_client_ca={certs}/ca.pem", f"--tokens_file={certs}/tokens",
        "--require_token_for_reads"])
    try:
        n = min(args.tries, 5)
        outcomes = [connect_outcome(tls_channel(a.port, "operator"),
                                    hello("operator", "L4", 24, False))
                    for _ in range(n)]
        row("operator client certificate connects as a worker",
            outcomes.count("welcome"), n, ",".join(sorted(set(outcomes))))
        outcomes = [connect_outcome(tls_channel(a.port, "worker-w1"),
                                    hello("w1", "L4", 1024, True))
                    for _ in range(n)]
        row("worker hello: an L4 of 1024 GB", outcomes.count("welcome"), n,
            ",".join(sorted(set(outcomes))))

        # An inline Linear 2^32 -> 2^32 counted as parameters.
        spec = model_pb2.ModelSpec(name="huge", family="mlp", positions=1)
        layer = spec.layers.add(name="fc", repeat=1)
        layer.linear.in_features = 1 << 32
        layer.linear.out_features = 1 << 32
        request = planner_pb2.CheckFitRequest(batches=[1])
        request.model.spec.CopyFrom(spec)
        request.targets.add(gpu="H200")
        fit = planner_pb2_grpc.FitStub(tls_channel(a.port, "operator"))
        reader = (("authorization", f"Bearer {tokens['reader']}"),)
        operator = (("authorization", f"Bearer {tokens['operator']}"),)
        verdicts = []
        for _ in range(n):
            try:
                answer = fit.CheckFit(request, metadata=reader, timeout=10)
                verdicts.append(model_pb2.Verdict.Name(
                    answer.targets[0].verdicts[0])
                    if answer.targets and answer.targets[0].verdicts else "OK")
            except grpc.RpcError as e:
                verdicts.append(e.code().name)
        harmed = sum(v not in ("INVALID_ARGUMENT",) for v in verdicts)
        row("inline Linear 2^32 x 2^32 in CheckFit", harmed, n,
            ",".join(sorted(set(verdicts))))
        fleet = fleet_pb2_grpc.FleetStub(tls_channel(a.port, "operator"))
        probe = fleet_pb2.SubmitProbeRequest(batches=[1], gpu="L4")
        probe.model.spec.CopyFrom(spec)
        codes = [code_of(lambda: fleet.SubmitProbe(probe, metadata=operator,
                                                   timeout=10))
                 for _ in range(n)]
        row("inline Linear 2^32 x 2^32 in SubmitProbe",
            sum(c == "OK" for c in codes), n, ",".join(sorted(set(codes))))

        # HTTP(S): pages and extender without a token or certificate.
        ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
        ctx.check_hostname = False
        harmed, seen = 0, []
        for path in ("/calibration", "/energy", "/metrics"):
            try:
                with urllib.request.urlopen(
                        f"https://127.0.0.1:{a.http_port}{path}", context=ctx,
                        timeout=5) as r:
                    seen.append(f"{path}:{r.status}")
                    harmed += path != "/metrics"
            except Exception as e:  # noqa: BLE001
                seen.append(f"{path}:{getattr(e, 'code', type(e).__name__)}")
        row("HTTPS pages without certificate or token", harmed, 2,
            " ".join(seen))

        # Reflection without a token when reads need one.
        channel = tls_channel(a.port, "operator")
        reflect = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        # ServerReflectionRequest{list_services: "*"} = field 7, "*".
        code = code_of(lambda: list(reflect(iter([b"\x3a\x01*"]), timeout=5)))
        row("gRPC reflection without a token (reads need one)",
            int(code == "OK"), 1, code)

        # Refused calls and the log: how many lines do 2,000 refusals write?
        before = a.log_lines()
        anon = planner_pb2_grpc.FitStub(tls_channel(a.port, "operator"))
        unknown = (("authorization", "Bearer not-a-token"),)
        refused = 0
        for _ in range(2000):
            try:
                anon.CheckFit(request, metadata=unknown, timeout=5)
            except grpc.RpcError:
                refused += 1
        time.sleep(0.5)
        lines = a.log_lines() - before
        row("2,000 refused calls: log lines written", int(lines > 200), 1,
            f"{refused} refused, {lines} log lines")
    finally:
        a.stop()

    # ---- B: tokens only, reads open --------------------------------------
    b = Planner(build, work, [f"--tokens_file={certs}/tokens"])
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{b.port}")
        operator = (("authorization", f"Bearer {tokens['operator']}"),)
        n = min(args.tries, 5)
        outcomes = [connect_outcome(channel, hello("w9", "L4", 24, True),
                                    operator) for _ in range(n)]
        row("operator token connects as a worker", outcomes.count("welcome"),
            n, ",".join(sorted(set(outcomes))))

        # Reads that queue probes: a simulated worker is connected, and an
        # anonymous reader asks with learn for 20 distinct models, each
        # BORDERLINE on a card sized between its peak and its upper bound.
        worker_token = os.path.join(certs, "token-worker-w1")
        if not os.path.exists(worker_token):
            worker_token = os.path.join(certs, "token-operator")
        worker_log = open(os.path.join(work, "worker.log"), "w")
        worker = subprocess.Popen([
            os.path.join(build, "worker", "headroom-worker"),
            f"--planner=127.0.0.1:{b.port}", f"--token_file={worker_token}",
            "--worker_id=w1", "--node_name=w1", "--sim_gpu=L4"],
            stdout=worker_log, stderr=worker_log, cwd=ROOT)
        try:
            listing = fleet_pb2_grpc.FleetStub(channel)
            deadline = time.time() + 30
            while time.time() < deadline:
                workers = listing.ListWorkers(fleet_pb2.ListWorkersRequest(),
                                              timeout=5)
                if any(w.connected for w in workers.workers):
                    break
                time.sleep(0.2)
            with open(os.path.join(ROOT, "models", "bert-base.json")) as f:
                base = json.load(f)
            from google.protobuf import json_format  # noqa: E402
            fit = planner_pb2_grpc.FitStub(channel)
            queued, said = 0, set()
            n_learn = 20
            for i in range(n_learn):
                spec = json_format.ParseDict(
                    dict(base, name=f"learn-{i}", positions=100 + i),
                    model_pb2.ModelSpec())
                ask = planner_pb2.CheckFitRequest(batches=[4],
                                                  include_simulated=True)
                ask.model.spec.CopyFrom(spec)
                ask.targets.add(gpu="L4")
                first = fit.CheckFit(ask, timeout=10)
                e = first.estimates[0]
                ask.ClearField("targets")
                ask.targets.add(memory_gb=(e.peak_gb + e.upper_gb) / 2 *
                                first.headroom)
                ask.learn = True
                answer = fit.CheckFit(ask, timeout=30)
                if answer.learning.startswith("probe p-") and "queued" in answer.learning:
                    queued += 1
                said.add(re.sub(r"probe p-\d+ .*", "probe p-N queued",
                                answer.learning)[:70])
            row("anonymous CheckFit learn queues probes (reads open)", queued,
                n_learn, "; ".join(sorted(said))[:120])
        finally:
            worker.terminate()
            worker.wait(10)
            worker_log.close()

        # Undecodable requests: invalid UTF-8 in a string field, nesting.
        raw = channel.unary_unary("/headroom.v1.Fit/CheckFit",
                                  request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
        bad_utf8 = b"\x0a\x04\x0a\x02\xff\xfe"  # model{template: "\xff\xfe"}
        code_utf8 = code_of(lambda: raw(bad_utf8, timeout=5))
        # Layer.block -> Block.layers -> Layer ... 75 times: past protobuf's
        # recursion limit of 100.
        layer = b""
        for _ in range(75):
            block = b"\x0a" + _varint(len(layer)) + layer
            layer = b"\xa2\x01" + _varint(len(block)) + block
        spec_bytes = b"\x32" + _varint(len(layer)) + layer
        model_bytes = b"\x12" + _varint(len(spec_bytes)) + spec_bytes
        deep = b"\x0a" + _varint(len(model_bytes)) + model_bytes
        code_deep = code_of(lambda: raw(deep, timeout=5))
        row("undecodable CheckFit (invalid UTF-8, nesting 150)",
            int(code_utf8 != "INVALID_ARGUMENT") + int(code_deep != "INVALID_ARGUMENT"),
            2, f"utf8={code_utf8} nesting={code_deep}")
    finally:
        b.stop()

    # ---- C: HTTP with idle connections (plain, open planner) --------------
    c = Planner(build, work, [])
    try:
        for idle in (0, 4, 100):
            socks = []
            for _ in range(idle):
                s = socket.create_connection(("127.0.0.1", c.http_port), 5)
                socks.append(s)
            time.sleep(0.2)
            start = time.monotonic()
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{c.http_port}/healthz", timeout=30) as r:
                    status = r.status
            except Exception as e:  # noqa: BLE001
                status = type(e).__name__
            ms = (time.monotonic() - start) * 1000
            for s in socks:
                s.close()
            row(f"/healthz with {idle} idle connections open",
                int(status != 200 or ms >= 100), 1, f"{status} in {ms:.0f} ms")
    finally:
        c.stop()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    print(f"total harm: {sum(r['harmed'] for r in rows)} of "
          f"{sum(r['tries'] for r in rows)} tries")
    return 0


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


if __name__ == "__main__":
    sys.exit(main())
