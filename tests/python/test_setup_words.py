#!/usr/bin/env python3
"""headroom_client's setup keywords against the core's vocabulary table,
without a planner.

  test_setup_words.py --package DIR [--table FILE] [--cli BIN] [unittest arguments]

DIR is where client/python/build.sh (the headroom_python target) put the
package. For EVERY key and EVERY word of the table the package ships
(headroom_client/setup_words.json, generated from core/setup/setup_words.cc;
--table reads another) a request is built through Client.fit_request and
the TrainingSetup field (or the CheckFitRequest field) the table names must
hold the table's value: a word, key or enum value the core has and this
client's stubs lack fails here. A hand-made table of every shape
(data/setup_words_fixture.json) pins the messages and the edge cases.
With --cli (the headroom binary), a bad value of every key gets the same
refusal from the CLI's flag as from the client's keyword.
Exits 77 (skipped) only when grpcio cannot be imported.
"""

import argparse
import json
import os
import subprocess
import sys
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "data", "setup_words_fixture.json")

parser = argparse.ArgumentParser()
parser.add_argument("--package", required=True)
parser.add_argument("--table")
parser.add_argument("--cli")
ARGS, UNITTEST_ARGS = parser.parse_known_args()

try:
    import grpc  # noqa: F401  (only to skip without it)
except ImportError as e:
    print(f"test_setup_words: skipped: cannot import grpc ({e}); install python3-grpcio")
    sys.exit(77)

sys.path.insert(0, ARGS.package)
sys.dont_write_bytecode = True
from headroom.v1 import model_pb2, planner_pb2  # noqa: E402
from headroom_client import Client, HeadroomError, Vocabulary  # noqa: E402

# Nothing listens here: every request below is refused before it is sent,
# or only built.
NOWHERE = "127.0.0.1:1"


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def field_value(message, path):
    for part in path.split(".")[:-1]:
        message = getattr(message, part)
    value = getattr(message, path.split(".")[-1])
    return list(value) if hasattr(value, "append") else value


def fmt(value):
    return str(int(value)) if float(value).is_integer() else str(value)


class TableChecks:
    """Every key and word of one table, through the client (mixed into a
    TestCase per table)."""

    table = None  # set by the subclasses

    def setUp(self):
        self.client = Client(NOWHERE, vocabulary=Vocabulary(self.table))
        self.addCleanup(self.client.close)

    def build(self, **setup):
        return self.client.fit_request("bert-base", 8, "L4", **setup)

    def refused(self, **setup):
        with self.assertRaises(HeadroomError) as caught:
            self.build(**setup)
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        return caught.exception.message

    def check_word(self, key, word, given):
        request = self.build(**{key["name"]: given})
        what = f"{key['name']}={given!r}"
        if key["type"] == "strings":  # a name the key takes
            self.assertEqual(field_value(request.setup, key["field"]), [word["word"]], what)
        elif "request" in word:
            self.assertEqual(getattr(request, word["request"]), word["value"], what)
            self.assertEqual(request.setup, model_pb2.TrainingSetup(), what)
        elif "value" in word:
            path = word.get("field", key["field"])
            expected = word["value"]
            if key["type"] == "words":
                expected = [expected]
            self.assertEqual(field_value(request.setup, path), expected, what)
        else:  # a word that sets nothing ("none")
            self.assertEqual(request.setup, model_pb2.TrainingSetup(), what)

    def test_every_key_and_word(self):
        keys = self.table["keys"]
        self.assertTrue(keys)
        for key in keys:
            name, kind = key["name"], key["type"]
            # The field path exists in this client's TrainingSetup.
            message = model_pb2.TrainingSetup()
            field_value(message, key["field"])
            words = [w["word"] for w in key.get("words", [])]
            for word in key.get("words", []):
                self.check_word(key, word, word["word"])
                if kind == "words":
                    self.check_word(key, word, [word["word"]])
            if key.get("bare"):
                # True is the bare flag's word (--checkpointing alone: full).
                self.assertEqual(self.build(**{name: True}),
                                 self.build(**{name: key["bare"]}), name)
            if words and kind != "uint":
                self.assertEqual(self.refused(**{name: "no-such-word"}),
                                 f"{name} 'no-such-word' is unknown; allowed "
                                 + ", ".join(words))
            if kind == "uint":
                allowed = f"{fmt(key['min'])}..{fmt(key['max'])}"
                if words:
                    allowed += " or " + ", ".join(words)
                for bound in (key["min"], key["max"]):
                    request = self.build(**{name: int(bound)})
                    self.assertEqual(field_value(request.setup, key["field"]), bound, name)
                for bad in (int(key["min"]) - 1, int(key["max"]) + 1):
                    self.assertEqual(self.refused(**{name: bad}),
                                     f"{name} '{bad}' is invalid; allowed {allowed}")
            elif kind == "number":
                # min <= p < max, as the core's kNumber.
                allowed = f"{fmt(key['min'])} <= p < {fmt(key['max'])}"
                middle = (key["min"] + key["max"]) / 2
                for good in (key["min"], middle):
                    request = self.build(**{name: good})
                    self.assertEqual(field_value(request.setup, key["field"]), good, name)
                for bad in (key["min"] - 1, key["max"]):
                    self.assertEqual(self.refused(**{name: bad}),
                                     f"{name} '{bad}' is invalid; allowed {allowed}")
            elif kind == "bool":
                for given, expected in ((True, True), ("true", True), ("0", False)):
                    self.assertIs(field_value(self.build(**{name: given}).setup,
                                              key["field"]), expected, name)
                self.assertEqual(self.refused(**{name: "yes"}),
                                 f"{name} 'yes' is invalid; allowed true, false")
            elif kind == "strings" and not words:
                self.assertEqual(field_value(self.build(**{name: "a, b"}).setup,
                                             key["field"]), ["a", "b"])
                self.assertEqual(field_value(self.build(**{name: ["c"]}).setup,
                                             key["field"]), ["c"])
            elif kind == "string":
                self.assertEqual(field_value(self.build(**{name: "0.5.10"}).setup,
                                             key["field"]), "0.5.10")
                self.assertEqual(self.refused(**{name: "5 beta"}),
                                 f"{name} '5 beta' is invalid; allowed a version: letters, "
                                 "digits and . - + _, at most 64")
            if kind in ("words", "strings"):
                first = words[0] if words else "a"
                self.assertEqual(self.refused(**{name: f"{first},{first}"}),
                                 f"{name} names '{first}' twice; give each at most once")

    def test_nothing_given_sets_nothing(self):
        request = self.build()
        self.assertEqual(request.setup, model_pb2.TrainingSetup())
        self.assertFalse(request.min_gpus)


class ShippedTableTest(TableChecks, unittest.TestCase):
    """The table the package ships (or --table): generated from the core."""

    table = load(ARGS.table) if ARGS.table else None

    @classmethod
    def setUpClass(cls):
        if cls.table is None:
            path = os.path.join(ARGS.package, "headroom_client", "setup_words.json")
            cls.table = load(path)

    def test_the_issue_vocabulary_is_there(self):
        # Issue 33, item 1: the words of these keys are defined once.
        names = {k["name"] for k in self.table["keys"]}
        for name in ("precision", "optimizer", "attention", "lora_rank", "lora_targets",
                     "quant_base", "parallel", "offload", "loss", "checkpointing",
                     "framework", "gpus", "positions"):
            self.assertIn(name, names)

    def test_the_shipped_table_is_the_default(self):
        if ARGS.table:
            self.skipTest("--table given")
        with Client(NOWHERE) as client:
            shipped = [k.name for k in client.vocabulary().keys()]
        self.assertEqual(shipped, [k["name"] for k in self.table["keys"]])


class FixtureTableTest(TableChecks, unittest.TestCase):
    """A hand-made table of every shape: the exact messages and edges."""

    table = load(FIXTURE)

    def test_messages(self):
        self.assertEqual(self.refused(precision="fp8"),
                         "precision 'fp8' is unknown; allowed fp32, bf16, fp16, "
                         "bf16-true, fp16-true")
        # A negative count is INVALID_ARGUMENT, never a ValueError.
        self.assertEqual(self.refused(positions=-5),
                         "positions '-5' is invalid; allowed 0..1048576")
        self.assertEqual(self.refused(gpus=0), "gpus '0' is invalid; allowed 1..512 or auto")
        self.assertEqual(self.refused(gpus=8.5),
                         "gpus '8.5' is invalid; allowed 1..512 or auto")
        self.assertEqual(self.refused(lora_rank=True),
                         "lora_rank 'True' is invalid; allowed 0..4096")
        self.assertEqual(self.refused(phases="step,step"),
                         "phases names 'step' twice; give each at most once")
        self.assertEqual(self.refused(lora_dropout=1), "lora_dropout '1' is invalid; "
                         "allowed 0 <= p < 1")
        self.assertEqual(self.refused(precison="bf16"),
                         "precison is not a setup keyword; allowed precision, "
                         "checkpointing, offload, gpus, positions, phases, lora_rank, "
                         "lora_targets, lora_dropout, freeze, compile, "
                         "framework_version")
        self.assertEqual(self.refused(lora_targets=5),
                         "lora_targets '5' is unknown; allowed q, k, v, o, gate, up, "
                         "down, all-linear, lm_head, embed")
        self.assertEqual(self.refused(lora_targets="q,qkv"),
                         "lora_targets 'qkv' is unknown; allowed q, k, v, o, gate, up, "
                         "down, all-linear, lm_head, embed")

    def test_values(self):
        request = self.build(precision="bf16-true", gpus="8", positions="4096",
                             phases="load, step", lora_rank=16, lora_targets=["q", "v"],
                             lora_dropout="0.05", offload="optimizer,gradients",
                             checkpointing=True)
        setup = request.setup
        self.assertEqual(setup.precision, model_pb2.TrainingSetup.BF16_TRUE)
        self.assertEqual((setup.gpus, setup.positions), (8, 4096))
        self.assertEqual(list(setup.phases), [model_pb2.LOAD, model_pb2.STEP])
        self.assertEqual((setup.lora.rank, list(setup.lora.targets)), (16, ["q", "v"]))
        self.assertAlmostEqual(setup.lora.dropout, 0.05)
        self.assertEqual(setup.offload, model_pb2.TrainingSetup.OPTIMIZER_GRADIENTS)
        # "full" sets another field than the key's: the old boolean.
        self.assertTrue(setup.activation_checkpointing)
        self.assertEqual(setup.checkpointing, 0)
        self.assertFalse(request.min_gpus)
        auto = self.build(gpus="auto")
        self.assertTrue(auto.min_gpus)
        self.assertEqual(auto.setup.gpus, 0)

    def test_gpu_kinds_and_the_old_gpus(self):
        request = self.client.fit_request("bert-base", [8, 16], ["L4", "NVIDIA L4", 16])
        self.assertEqual([t.WhichOneof("kind") for t in request.targets],
                         ["gpu", "gpu", "memory_gb"])
        self.assertEqual(request.targets[1].gpu, "NVIDIA L4")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = self.client.fit_request("bert-base", 8, gpus=["L4", "H100"])
        self.assertEqual([t.gpu for t in old.targets], ["L4", "H100"])
        self.assertEqual(old.setup.gpus, 0)
        self.assertEqual([w.category for w in caught], [DeprecationWarning])
        with self.assertRaises(HeadroomError) as both:
            self.client.fit_request("bert-base", 8, "L4", gpus=["H100"])
        self.assertIn("gpu names the cards and gpus the GPU count", both.exception.message)

    def test_refused_before_sending(self):
        # Nothing listens on NOWHERE: each must be refused as INVALID_ARGUMENT,
        # not UNAVAILABLE.
        cases = (
            (lambda: self.client.submit_probe("bert-base", [8], gpu="L4", gpus="auto"),
             "gpus='auto' asks a fit answer (CheckFitRequest.min_gpus); submit_probe"),
            (lambda: self.client.submit_probe("bert-base", [8]),
             "give gpu (one catalog GPU kind"),
            (lambda: self.client.check_fit("bert-base", -1, "L4"),
             "batch -1 is invalid; allowed 1 .. 1048576"),
            (lambda: self.client.check_fit("no-such-file.json", 8, "L4"),
             "model no-such-file.json: No such file or directory"),
            (lambda: self.client.check_fit("bert-base", 8, 0),
             "gpu 0 is invalid; allowed a size in GB above 0"),
            (lambda: self.client.check_fit(None, 8, "L4"), "model is required"),
            (lambda: self.client.check_fit("bert-base", 8, "L4", job="/no/such.yaml"),
             "job /no/such.yaml: No such file or directory"),
            (lambda: self.client.check_fit("bert-base", 8, "L4", deepspeed="ds.json"),
             "deepspeed, accelerate_config and job_kind go with job=FILE"),
            (lambda: self.client.train_energy("bert-base", 8, "16"),
             "training energy needs one catalog GPU name"),
            (lambda: self.client.estimate_energy(7, gpu="L4", arch="ada"),
             "give gpu (a catalog GPU name) or arch"),
            (lambda: self.client.list_probes("done"),
             "state 'done' is unknown; allowed queued, running, succeeded, failed, "
             "cancelled"),
            (lambda: self.client.refit_energy([{"no_such": 1}]), "runs: "),
            (lambda: self.client.submit_probe("bert-base", [8], gpu="L4", repetitions=-1),
             "repetitions -1 is invalid"),
            (lambda: self.client.check_fit("bert-base", 8, "L4", coverage="most"),
             "coverage 'most' is invalid"),
            (lambda: self.client.refit_energy(os.path.join(HERE, "data",
                                                           "setup_words_fixture.json")),
             "setup_words_fixture.json:1: "),
            (lambda: Client(NOWHERE, ca="/no/such-ca.pem"),
             "ca /no/such-ca.pem: No such file or directory"),
            (lambda: Client(NOWHERE, cert="a.pem"), "cert and key go together"),
        )
        for call, message in cases:
            with self.assertRaises(HeadroomError) as caught:
                call()
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT", message)
            self.assertIn(message, caught.exception.message)

    def test_job_files_and_overrides(self):
        job = os.path.join(ROOT, "tests/data/jobs/litgpt-llama-2-7b-lora.yaml")
        ds = os.path.join(ROOT, "tests/data/jobs/ds_config_zero3.json")
        request = self.client.fit_request(gpu="H100", job=job, deepspeed=ds,
                                          job_kind="litgpt", precision="bf16",
                                          lora_rank=16, checkpointing="full")
        self.assertFalse(request.HasField("model"))
        self.assertEqual(request.job.job.name, job)
        with open(job, "rb") as f:
            self.assertEqual(request.job.job.content, f.read())
        self.assertEqual(request.job.job.kind, planner_pb2.JobFile.LITGPT)
        self.assertEqual(request.job.deepspeed.name, ds)
        # The setup fields given beside the file, as the CLI names them.
        self.assertEqual(list(request.job.overrides),
                         ["precision", "lora.rank", "activation_checkpointing"])
        with self.assertRaises(HeadroomError) as caught:
            self.client.fit_request(job=job, job_kind="yaml")
        self.assertIn("job_kind 'yaml' is unknown; allowed litgpt, torchtune",
                      caught.exception.message)


class CliParityTest(unittest.TestCase):
    """The client refuses a bad value of every key in the CLI's words."""

    def bad_value(self, key):
        kind = key["type"]
        if kind == "uint":
            return str(int(key["max"]) + 1)
        if kind == "number":
            return str(key["max"])
        if kind == "string":
            return "5 beta"
        if kind == "strings" and not key["words"]:
            return "a,a"
        return "no-such-word"

    def test_every_key_is_refused_in_the_same_words(self):
        if not ARGS.cli:
            self.skipTest("no --cli")
        table = load(ARGS.table) if ARGS.table else load(
            os.path.join(ARGS.package, "headroom_client", "setup_words.json"))
        client = Client(NOWHERE, vocabulary=Vocabulary(table))
        self.addCleanup(client.close)
        checked = 0
        for key in table["keys"]:
            if key["type"] == "bool":
                continue  # a flag without a value: nothing to refuse
            bad = self.bad_value(key)
            with self.assertRaises(HeadroomError) as caught:
                client.fit_request("bert-base", 8, "L4", **{key["name"]: bad})
            # Refused before any call: nothing listens on the server.
            done = subprocess.run(
                [ARGS.cli, "--server", NOWHERE, "fit", "--model", "bert-base",
                 "--batch", "8", "--gpu", "L4", key["flag"], bad],
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(done.returncode, 0, key["flag"])
            self.assertIn("--" + caught.exception.message, done.stderr, key["flag"])
            checked += 1
        self.assertGreater(checked, 20)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *UNITTEST_ARGS])
