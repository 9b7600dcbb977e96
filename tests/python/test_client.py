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
from headroom_client import answers  # noqa: E402
from headroom.v1 import calibration_pb2, model_pb2, planner_pb2  # noqa: E402
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
        left_over = [t.memory_gb - t.device_gb(32) for t in answer.targets]
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

    def test_phases_and_allocator_setup(self):
        answer = self.client.check_fit(
            "bert-base", 32, ["L4", "H100"], phases="load,step,eval",
            eval_batch=64, expandable_segments=True)
        for target in answer.targets:
            self.assertIn(target.verdicts[32], VERDICTS)
            # A planner with the device figures answers them per batch, in
            # order allocated <= reserved <= device, at one of the phases.
            for batch, answered in target.figures.items():
                self.assertEqual(batch, 32)
                f = answered.figures
                self.assertLessEqual(f.allocated_gb, f.reserved_gb)
                self.assertLessEqual(f.reserved_gb, f.device_gb)
                self.assertLessEqual(f.device_gb, f.device_upper_gb)
                self.assertIn(answered.phase, {"load", "step", "eval"})
                self.assertEqual(target.device_gb(32), f.device_gb)
        with self.assertRaises(HeadroomError) as caught:
            self.client.check_fit("bert-base", 32, "L4", phases=["step", "train"])
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("'train' is unknown; allowed load, first-step, step, eval, "
                      "generate, save", caught.exception.message)

    def test_unreachable(self):
        with Client(f"127.0.0.1:{free_port()}", timeout_s=5) as closed:
            with self.assertRaises(HeadroomError) as caught:
                closed.check_fit("bert-base", 32, "L4")
        self.assertEqual(caught.exception.code, "UNAVAILABLE")

    def test_setup_words_reach_the_planner(self):
        # Words the old client refused (issue 33): 16-bit weights, Lion,
        # QLoRA on four projections, SDPA.
        answer = self.client.check_fit(
            "llama-3.1-8b", 4, "L4", precision="bf16-true", optimizer="lion",
            lora_rank=16, lora_targets="q,k,v,o", quant_base="nf4", attention="sdpa")
        self.assertEqual(answer.bound.kind, "1gpu/qlora")
        self.assertIn("weights and gradients: 16-bit, activations 16-bit "
                      "(precision bf16_true) [setup]", answer.plan)
        self.assertTrue(any(line.startswith("LoRA rank 16 on k,o,q,v") for line in answer.plan),
                        answer.plan)
        with self.assertRaises(HeadroomError) as caught:
            self.client.check_fit("bert-base", 8, "L4", positions=-5)
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("positions '-5' is invalid; allowed 0..", caught.exception.message)

    def test_min_gpus_agrees_with_the_answer_at_that_count(self):
        strategies = {"ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op",
                      "fsdp-hybrid"}
        answer = self.client.check_fit("llama-3.1-8b", 8, ["H100", "L4"], gpus="auto",
                                       precision="bf16")
        self.assertEqual([m.target for m in answer.min_gpus], ["H100", "L4"])
        self.assertEqual(answer.min_gpus[0].memory_gb, 80)
        for target in answer.min_gpus:
            self.assertEqual({s.strategy for s in target.strategies}, strategies)
        zero3 = next(s for s in answer.min_gpus[0].strategies if s.strategy == "zero3")
        self.assertGreater(zero3.gpus_not_does_not_fit, 1)
        self.assertEqual(zero3.gpus, zero3.gpus_fits or zero3.gpus_not_does_not_fit)
        self.assertLessEqual(zero3.device_gb, zero3.device_upper_gb)
        # The smallest count that is not DOES_NOT_FIT is the count where the
        # plain answer stops saying DOES_NOT_FIT, with the same device figure.
        n = zero3.gpus_not_does_not_fit
        at_n = self.client.check_fit("llama-3.1-8b", 8, "H100", gpus=n, parallel="zero3",
                                     precision="bf16").targets[0]
        below = self.client.check_fit("llama-3.1-8b", 8, "H100", gpus=n - 1,
                                      parallel="zero3", precision="bf16").targets[0]
        self.assertNotEqual(at_n.verdicts[8], "DOES_NOT_FIT")
        self.assertEqual(below.verdicts[8], "DOES_NOT_FIT")
        self.assertAlmostEqual(at_n.figures[8].figures.device_gb, zero3.device_gb, places=6)
        # One strategy when the setup names it; min_gpus() is the same call.
        only = self.client.min_gpus("llama-3.1-8b", 8, "H100", parallel="zero3",
                                    precision="bf16")
        self.assertEqual([s.strategy for s in only[0].strategies], ["zero3"])
        self.assertEqual(only[0].strategies[0], zero3)

    def test_job_file(self):
        job = os.path.join(ROOT, "tests/data/jobs/litgpt-llama-2-7b-lora.yaml")
        answer = self.client.check_fit(gpu="H100", job=job)
        self.assertEqual(answer.model, "llama-2-7b")
        self.assertEqual(answer.job.kind, "LITGPT")
        self.assertEqual(answer.job.model_id, "meta-llama/Llama-2-7b-hf")
        self.assertEqual(answer.job.setup["lora"]["rank"], 32)
        self.assertEqual(list(answer.targets[0].verdicts), [answer.job.batch])
        self.assertTrue(answer.job.from_file)
        # A setup keyword beside the file overrides it, and the answer says so.
        # (job.setup stays what the file said; the plan is the answer's.)
        overridden = self.client.check_fit(gpu="H100", job=job, lora_rank=8)
        self.assertEqual(overridden.job.overridden, ["setup.lora.rank"])
        self.assertTrue(any(line.startswith("LoRA rank 8 on q,v") for line in overridden.plan),
                        overridden.plan)

    def test_energy(self):
        nf4 = self.client.estimate_energy(7, gpu="L4", quant="nf4")
        self.assertEqual((nf4["arch"], nf4["quant"], nf4["params_b"]), ("ada", "nf4", 7.0))
        self.assertLessEqual(nf4["de_low_pct"], nf4["de_pct"])
        self.assertLessEqual(nf4["de_pct"], nf4["de_high_pct"])
        # dE% is the change of the quantized energy against fp16's.
        self.assertAlmostEqual(nf4["quant_j_per_1k"],
                               nf4["fp16_j_per_1k"] * (1 + nf4["de_pct"] / 100), places=6)
        train = self.client.train_energy("bert-base", 8, "L4", precision="bf16")
        self.assertEqual((train["gpu"], train["batch"]), ("L4", 8))
        self.assertGreater(train["answer"]["joules_per_step"], 0)
        # J per 1k tokens = J per step / tokens per step x 1000.
        self.assertAlmostEqual(train["answer"]["joules_per_1k_tokens"],
                               train["answer"]["joules_per_step"]
                               / int(train["tokens_per_step"]) * 1000, places=9)
        sets = self.client.energy_curve_sets()
        self.assertEqual(sets["current_version"], "ec-1")
        self.assertEqual([s["version"] for s in sets["curve_sets"]], ["ec-1"])
        self.assertTrue(self.client.plot_energy("ada")["svg"].startswith("<svg"))
        with self.assertRaises(HeadroomError) as caught:
            self.client.refit_energy(stored=True)
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")
        with self.assertRaises(HeadroomError) as caught:
            self.client.promote_energy_curve_set("ec-99")
        self.assertEqual(caught.exception.code, "NOT_FOUND")

    def test_probe_cancel_and_watch(self):
        probe_id = self.client.submit_probe("bert-base", [8, 16], gpu="L4", executor="sim",
                                            precision="bf16", steps=2)
        self.assertEqual(self.client.probe(probe_id)["request"]["steps"], 2)
        self.assertEqual(self.client.cancel_probe(probe_id)["state"], "CANCELLED")
        # The watch ends when the probe is done: one snapshot, CANCELLED.
        events = list(self.client.watch_probe(probe_id, timeout_s=30))
        self.assertEqual([list(e) for e in events], [["probe"]])
        self.assertEqual(events[-1]["probe"]["state"], "CANCELLED")
        self.assertIn(probe_id, [p["id"] for p in self.client.list_probes("cancelled")])
        with self.assertRaises(HeadroomError) as caught:
            list(self.client.watch_probe("p-no-such", timeout_s=30))
        self.assertEqual(caught.exception.code, "NOT_FOUND")
        energy = self.client.submit_energy_probe("bert-base", gpu="L4", executor="sim",
                                                 quants="fp16,nf4")
        self.assertEqual(self.client.probe(energy)["request"]["energy"]["quants"],
                         ["fp16", "nf4"])
        self.client.cancel_probe(energy)



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
        with self.assertRaises(HeadroomError) as refused:
            Client(self.address, cert="a.pem", key="a-key.pem")
        self.assertEqual(refused.exception.code, "INVALID_ARGUMENT")
        self.assertIn("cert needs ca", refused.exception.message)

def _figures(allocated, reserved, device):
    return planner_pb2.MemoryFigures(
        allocated_gb=allocated, allocated_upper_gb=allocated * 1.2,
        reserved_gb=reserved, reserved_upper_gb=reserved * 1.2,
        device_gb=device, device_upper_gb=device * 1.2)


class FiguresTest(unittest.TestCase):
    """The three figures, phases, device costs and bound of a hand-built
    answer (no planner), and the setup fields of issue 30."""

    def answer(self):
        response = planner_pb2.CheckFitResponse(model="qwen2.5-7b", headroom=1.15)
        for batch, phase in ((4, "load"), (8, "step")):
            response.estimates.add(batch=batch, peak_gb=9.5, phase=phase)
        target = response.targets.add(
            name="L4", memory_gb=24, verdicts=[model_pb2.FITS, model_pb2.BORDERLINE],
            peaks_gb=[9.5, 12.0])
        target.device.CopyFrom(planner_pb2.DeviceCosts(
            reserved_ratio=1.125, context_gb=0.7, nccl_gb=0,
            reserved_basis="fitted on 12 torch-harness runs on H200"))
        first = target.batches.add(batch=4, phase="load",
                                   figures=_figures(15.2, 16, 16.5))
        first.phases.add(phase="load", figures=_figures(15.2, 16, 16.5),
                         holds="weights in bf16 before quantising")
        first.phases.add(phase="step", figures=_figures(9.5, 10.5, 11))
        target.batches.add(batch=8, phase="step", figures=_figures(12, 13.5, 14.2))
        response.bound.CopyFrom(calibration_pb2.SetupKindBound(
            kind="1gpu/qlora", k_allocated=1.19, k_reserved=1.22, k_device=1.25,
            measurements=14))
        return answers.fit_answer(response, [4, 8])

    def test_figures_phases_costs_and_bound(self):
        answer = self.answer()
        self.assertEqual([e.phase for e in answer.estimates], ["load", "step"])
        l4 = answer.targets[0]
        self.assertEqual(set(l4.figures), {4, 8})
        self.assertEqual(l4.figures[4].phase, "load")
        self.assertEqual(l4.figures[4].figures.device_gb, 16.5)
        self.assertAlmostEqual(l4.figures[4].figures.device_upper_gb, 19.8)
        self.assertEqual(l4.figures[8].figures.reserved_gb, 13.5)
        self.assertEqual([p.phase for p in l4.figures[4].phases], ["load", "step"])
        self.assertEqual(l4.figures[4].phases[0].holds,
                         "weights in bf16 before quantising")
        self.assertEqual(l4.figures[4].phases[1].figures.allocated_gb, 9.5)
        # The device figure, not the allocator's peak (9.5).
        self.assertEqual(l4.device_gb(4), 16.5)
        self.assertEqual(l4.device.reserved_ratio, 1.125)
        self.assertEqual(l4.device.context_gb, 0.7)
        self.assertEqual(l4.device.reserved_basis,
                         "fitted on 12 torch-harness runs on H200")
        self.assertEqual(answer.bound.kind, "1gpu/qlora")
        self.assertEqual(answer.bound.k_device, 1.25)
        self.assertEqual(answer.bound.measurements, 14)
        self.assertFalse(answer.bound.widest or answer.bound.untested)

    def test_min_gpus_and_job(self):
        response = planner_pb2.CheckFitResponse(model="llama-3.1-8b")
        target = response.min_gpus.add(target="H100", memory_gb=80, cheapest="zero3")
        target.strategies.add(strategy="zero3", gpus_fits=4, gpus_not_does_not_fit=3,
                              gpus=4, nodes=1, peak_gb=60.5, sharded_states_gb=12.25,
                              activations_gb=40, device_gb=62.0, device_upper_gb=70.0)
        response.job.kind = planner_pb2.JobFile.TORCHTUNE
        response.job.model_id = "meta-llama/Meta-Llama-3.1-8B-Instruct"
        response.job.setup.lora.rank = 8
        response.job.batch = 2
        response.job.from_file.append("batch_size = 2 -> batch")
        answer = answers.fit_answer(response, [2])
        (h100,) = answer.min_gpus
        self.assertEqual((h100.target, h100.memory_gb, h100.cheapest), ("H100", 80, "zero3"))
        zero3 = h100.strategies[0]
        self.assertEqual((zero3.gpus_fits, zero3.gpus_not_does_not_fit, zero3.gpus), (4, 3, 4))
        self.assertEqual((zero3.sharded_states_gb, zero3.activations_gb), (12.25, 40))
        self.assertEqual((zero3.device_gb, zero3.device_upper_gb), (62.0, 70.0))
        self.assertEqual(answer.job.kind, "TORCHTUNE")
        self.assertEqual(answer.job.setup["lora"]["rank"], 8)
        self.assertEqual(answer.job.from_file, ["batch_size = 2 -> batch"])
        self.assertIsNone(answers.fit_answer(planner_pb2.CheckFitResponse(), []).job)

    def test_without_device_figures(self):
        response = planner_pb2.CheckFitResponse(model="bert-base")
        response.estimates.add(batch=32, peak_gb=2.3)
        response.targets.add(name="L4", memory_gb=24, verdicts=[model_pb2.FITS],
                             peaks_gb=[2.3])
        answer = answers.fit_answer(response, [32])
        self.assertEqual(answer.targets[0].figures, {})
        self.assertIsNone(answer.targets[0].device)
        self.assertIsNone(answer.bound)
        self.assertEqual(answer.estimates[0].phase, "")
        # Then the allocator's peak is all there is.
        self.assertEqual(answer.targets[0].device_gb(32), 2.3)

    def setup(self, **setup):
        with Client("127.0.0.1:1") as nowhere:
            return nowhere.fit_request("bert-base", 8, "L4", **setup).setup

    def test_setup_fields(self):
        setup = self.setup(
            expandable_segments=True, phases="load, first-step,step,eval,generate,save",
            eval_batch=16, generate_tokens=256)
        self.assertTrue(setup.expandable_segments)
        self.assertEqual(list(setup.phases),
                         [model_pb2.LOAD, model_pb2.FIRST_STEP, model_pb2.STEP,
                          model_pb2.EVAL, model_pb2.GENERATE, model_pb2.SAVE])
        self.assertEqual((setup.eval_batch, setup.generate_tokens), (16, 256))
        self.assertEqual(list(self.setup(phases=["step"]).phases), [model_pb2.STEP])
        for bad, words in ((dict(phases=["train"]), "'train' is unknown; allowed load"),
                           (dict(phases="step,step"), "'step' twice"),
                           (dict(eval_batch=-1), "eval_batch '-1' is invalid; allowed 0.."),
                           (dict(generate_tokens=2**32), "generate_tokens")):
            with self.assertRaises(HeadroomError) as caught:
                self.setup(**bad)
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
            self.assertIn(words, caught.exception.message)

    def test_framework_profile(self):
        setup = self.setup(framework="litgpt", framework_version="0.5.10")
        self.assertEqual(setup.framework, model_pb2.TrainingSetup.LITGPT)
        self.assertEqual(setup.framework_version, "0.5.10")
        # Not given: left to the planner, which names the default it took.
        self.assertEqual(self.setup().framework,
                         model_pb2.TrainingSetup.FRAMEWORK_UNSPECIFIED)
        self.assertEqual(self.setup().precision,
                         model_pb2.TrainingSetup.PRECISION_UNSPECIFIED)
        with self.assertRaises(HeadroomError) as caught:
            self.setup(framework="keras")
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("framework 'keras' is unknown; allowed generic, hf-trainer",
                      caught.exception.message)
        response = planner_pb2.CheckFitResponse(
            model="llama-3.1-8b", framework="litgpt 0.5.10",
            plan=["loss: chunked cross-entropy, 4 chunks [litgpt: ...]"])
        answer = answers.fit_answer(response, [])
        self.assertEqual(answer.framework, "litgpt 0.5.10")
        self.assertEqual(answer.plan[0][:5], "loss:")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *UNITTEST_ARGS])
