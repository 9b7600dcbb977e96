#!/usr/bin/env python3
"""headroom_client (client/python) against the real planner on loopback.

  test_client.py --planner BIN --package DIR [unittest arguments]

DIR is where client/python/build.sh (or the headroom_python target) put the
package. Starts headroom-planner once on a free loopback port with the
shipped models and runs and a throwaway SQLite file, waits (at most 60 s)
until Ping answers, and stops it at the end. Exits 77 (skipped) only when
grpcio cannot be imported.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERDICTS = {"FITS", "BORDERLINE", "DOES_NOT_FIT"}

parser = argparse.ArgumentParser()
parser.add_argument("--planner", required=True)
parser.add_argument("--package", required=True)
ARGS, UNITTEST_ARGS = parser.parse_known_args()

try:
    import grpc  # noqa: F401  (only to skip without it)
except ImportError as e:
    print(f"test_client: skipped: cannot import grpc ({e}); install python3-grpcio")
    sys.exit(77)

sys.path.insert(0, ARGS.package)
sys.path.insert(0, os.path.join(ROOT, "client/python/examples"))
# Importing the example must leave no __pycache__ in the source tree.
sys.dont_write_bytecode = True
from headroom_client import Client, HeadroomError  # noqa: E402
import placement_hook  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(tmp.cleanup)
        cls.address = f"127.0.0.1:{free_port()}"
        log = open(os.path.join(tmp.name, "planner.log"), "w+")
        cls.addClassCleanup(log.close)
        cls.planner = subprocess.Popen(
            [ARGS.planner, f"--listen={cls.address}", "--http_listen=",
             f"--models_dir={ROOT}/models", f"--runs={ROOT}/data/memory-runs.jsonl",
             f"--energy_curves={ROOT}/data/energy-curves.json",
             f"--db={tmp.name}/t.db", "--log_level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        cls.addClassCleanup(cls.stop_planner)
        deadline = time.monotonic() + 60
        while True:
            if cls.planner.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"planner exited with {cls.planner.returncode}:\n"
                                   + log.read()[-2000:])
            # A fresh channel each time: one that saw refused connections
            # backs off for seconds before it tries again.
            try:
                with Client(cls.address, timeout_s=1) as planner:
                    planner.ping()
                break
            except HeadroomError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"planner on {cls.address} did not answer "
                                       "Ping in 60 s") from None
            time.sleep(0.05)
        cls.client = Client(cls.address, token="test-token")
        cls.addClassCleanup(cls.client.close)

    @classmethod
    def stop_planner(cls):
        cls.planner.kill()
        cls.planner.wait(timeout=30)

    def test_check_fit_template(self):
        answer = self.client.check_fit("bert-base", [32, 512], ["L4", "H100", 16])
        self.assertEqual(answer.model, "bert-base")
        self.assertEqual(answer.params, 31120896)
        self.assertTrue(answer.factor_set_version)
        self.assertEqual([e.batch for e in answer.estimates], [32, 512])
        for estimate in answer.estimates:
            self.assertGreater(estimate.peak_gb, 0)
            self.assertGreaterEqual(estimate.upper_gb, estimate.peak_gb)
            # The store holds bert-base's own runs.
            self.assertEqual(estimate.basis.kind, "ANCHORED")
            self.assertGreater(estimate.basis.runs, 0)
        self.assertEqual([t.name for t in answer.targets], ["L4", "H100", "16 GB"])
        for target in answer.targets:
            self.assertEqual(set(target.verdicts), {32, 512})
            self.assertLessEqual(set(target.verdicts.values()), VERDICTS)
            self.assertEqual(set(target.peaks_gb), {32, 512})
        l4 = answer.targets[0]
        # The shipped runs have bert-base going OOM on an L4 at batch 512.
        self.assertNotEqual(l4.verdicts[512], "FITS")
        self.assertEqual(l4.memory_gb, 24)
        self.assertTrue(self.client.fits("bert-base", 32, "H100"))
        self.assertFalse(self.client.fits("bert-base", 512, "L4"))

    def test_inline_spec(self):
        with open(os.path.join(ROOT, "models/simple-cnn.json")) as f:
            spec = json.load(f)
        answer = self.client.check_fit(spec, 64, "L4")
        self.assertEqual(answer.model, "simple-cnn")
        self.assertGreater(answer.params, 0)
        self.assertEqual(answer.estimates[0].basis.kind, "ANCHORED")
        self.assertIn(answer.targets[0].verdicts[64], VERDICTS)
        from_file = self.client.check_fit(os.path.join(ROOT, "models/simple-cnn.json"),
                                          64, "L4")
        self.assertEqual(from_file.params, answer.params)

    def test_errors(self):
        with self.assertRaises(HeadroomError) as caught:
            self.client.check_fit("no-such-model", 32, "L4")
        self.assertEqual(caught.exception.code, "NOT_FOUND")
        self.assertTrue(caught.exception.message)
        with self.assertRaises(HeadroomError) as caught:
            self.client.check_fit("bert-base", 0, "L4")
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        with self.assertRaises(HeadroomError) as caught:
            self.client.check_fit("bert-base", 32, "L4", precision="fp8")
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")

    def test_placement_hook(self):
        candidates = ["L4", "H100", "16"]
        kinds = placement_hook.fitting_gpus(self.client, "bert-base", 32, candidates)
        self.assertTrue(kinds)
        self.assertLessEqual(set(kinds), set(candidates))
        for kind in kinds:
            self.assertTrue(self.client.fits("bert-base", 32, kind), kind)
        answer = self.client.check_fit("bert-base", 32, kinds)
        left_over = [t.memory_gb - t.peaks_gb[32] for t in answer.targets]
        self.assertEqual(left_over, sorted(left_over))
        # L4 at batch 512 is not FITS, so it cannot be offered.
        self.assertNotIn("L4", placement_hook.fitting_gpus(
            self.client, "bert-base", 512, ["L4", "H100"]))

    def test_calibration_and_probes(self):
        factor_set = self.client.calibration()
        self.assertTrue(factor_set["version"].startswith("fs-"))
        self.assertIn("optimizer", factor_set["factors"])
        self.assertEqual(self.client.calibration(factor_set["version"])["version"],
                         factor_set["version"])
        # No worker is connected: the probe stays queued.
        probe_id = self.client.submit_probe("bert-base", [8], gpu="L4", executor="sim")
        probe = self.client.probe(probe_id)
        self.assertEqual(probe["id"], probe_id)
        self.assertEqual(probe["state"], "QUEUED")
        queued = self.client.list_probes("QUEUED")
        self.assertIn(probe_id, [p["id"] for p in queued])
        with self.assertRaises(HeadroomError) as caught:
            self.client.probe("p-no-such")
        self.assertEqual(caught.exception.code, "NOT_FOUND")

    def test_unreachable(self):
        with Client(f"127.0.0.1:{free_port()}", timeout_s=5) as closed:
            with self.assertRaises(HeadroomError) as caught:
                closed.check_fit("bert-base", 32, "L4")
        self.assertEqual(caught.exception.code, "UNAVAILABLE")



class SecureClientTest(unittest.TestCase):
    """The client over TLS with a client certificate and tokens of each role."""

    @classmethod
    def setUpClass(cls):
        tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(tmp.cleanup)
        cls.certs = os.path.join(tmp.name, "certs")
        subprocess.run([os.path.join(ROOT, "scripts/dev-certs.sh"), cls.certs],
                       check=True, stderr=subprocess.DEVNULL)
        cls.address = f"localhost:{free_port()}"
        log = open(os.path.join(tmp.name, "planner.log"), "w+")
        cls.addClassCleanup(log.close)
        cls.planner = subprocess.Popen(
            [ARGS.planner, f"--listen=127.0.0.1:{cls.address.split(':')[1]}",
             "--http_listen=", f"--models_dir={ROOT}/models",
             f"--runs={ROOT}/data/memory-runs.jsonl",
             f"--energy_curves={ROOT}/data/energy-curves.json",
             f"--db={tmp.name}/t.db", "--log_level=warn",
             f"--tls_cert={cls.certs}/planner.pem",
             f"--tls_key={cls.certs}/planner-key.pem",
             f"--tls_client_ca={cls.certs}/ca.pem",
             f"--tokens_file={cls.certs}/tokens"],
            stdout=log, stderr=subprocess.STDOUT)
        cls.addClassCleanup(cls.stop_planner)
        deadline = time.monotonic() + 60
        while True:
            if cls.planner.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"planner exited with {cls.planner.returncode}:\n"
                                   + log.read()[-2000:])
            try:
                with cls.connect("reader", timeout_s=1) as planner:
                    planner.ping()
                break
            except HeadroomError:
                if time.monotonic() > deadline:
                    raise RuntimeError("TLS planner did not answer Ping in 60 s") from None
            time.sleep(0.05)

    @classmethod
    def stop_planner(cls):
        cls.planner.kill()
        cls.planner.wait(timeout=30)

    @classmethod
    def connect(cls, role, timeout_s=5, certificate=True):
        with open(os.path.join(cls.certs, f"token-{role}")) as f:
            token = f.read().strip()
        extra = {}
        if certificate:
            extra = {"cert": os.path.join(cls.certs, "operator.pem"),
                     "key": os.path.join(cls.certs, "operator-key.pem")}
        return Client(cls.address, token=token, ca=os.path.join(cls.certs, "ca.pem"),
                      timeout_s=timeout_s, **extra)

    def test_roles(self):
        with self.connect("reader") as reader:
            answer = reader.check_fit("bert-base", [32], ["L4"])
            self.assertEqual(answer.params, 31120896)
            with self.assertRaises(HeadroomError) as refused:
                reader.submit_probe("bert-base", [8], gpu="L4")
            self.assertEqual(refused.exception.code, "PERMISSION_DENIED")
            self.assertIn("needs role operator", str(refused.exception))
        with self.connect("operator") as operator:
            probe_id = operator.submit_probe("bert-base", [8], gpu="L4")
            self.assertTrue(probe_id)

    def test_a_client_without_certificate_is_not_served(self):
        with self.connect("admin", timeout_s=2, certificate=False) as bare:
            with self.assertRaises(HeadroomError) as refused:
                bare.ping()
            self.assertEqual(refused.exception.code, "UNAVAILABLE")
        with self.assertRaises(ValueError):
            Client(self.address, cert="a.pem", key="a-key.pem")

if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *UNITTEST_ARGS])
