#!/usr/bin/env python3
"""One generated headroom.v1 package serves the Python client and the torch
harness: with PYTHONPATH the build's python tree alone (build/python, the
headroom_python target), `import headroom_client` works and the harness's
load_proto() finds the same headroom.v1 modules, in either import order,
and both build and read the same message classes.

  test_one_tree.py --package DIR

(Before, the harness's copy had no *_pb2_grpc modules and, first on
PYTHONPATH, made `import headroom_client` fail.) Exits 77 (skipped) only
when grpcio cannot be imported.
"""

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(ROOT, "worker", "harness")

parser = argparse.ArgumentParser()
parser.add_argument("--package", required=True)
ARGS = parser.parse_args()
ARGS.package = os.path.abspath(ARGS.package)

try:
    import grpc  # noqa: F401  (only to skip without it)
except ImportError as e:
    print(f"test_one_tree: skipped: cannot import grpc ({e}); install python3-grpcio")
    sys.exit(77)

CLIENT_FIRST = """
import headroom_client
from headroom_client import Client
sys.path.append(HARNESS)  # the harness's code; its protos come from the tree
from headroom_harness import proto
model_pb2, _ = proto.load_proto()
"""
HARNESS_FIRST = """
sys.path.append(HARNESS)
from headroom_harness import proto
model_pb2, _ = proto.load_proto()
import headroom_client
from headroom_client import Client
"""
CHECKS = """
from headroom.v1 import planner_pb2_grpc
def inside(module):
    return os.path.realpath(module.__file__).startswith(os.path.realpath(PACKAGE) + os.sep)
assert inside(headroom_client), headroom_client.__file__
assert inside(model_pb2), model_pb2.__file__
assert inside(planner_pb2_grpc), planner_pb2_grpc.__file__
assert sys.modules["headroom.v1.model_pb2"] is model_pb2
with open(os.path.join(ROOT, "models", "bert-base.json")) as f:
    spec = proto.parse_json(f.read(), model_pb2.ModelSpec(), "bert-base.json")
with Client("127.0.0.1:1") as client:
    request = client.fit_request(spec.name, 8, "L4")
assert type(request.setup) is model_pb2.TrainingSetup
print("one tree:", os.path.dirname(os.path.dirname(model_pb2.__file__)))
"""


def run(order: str) -> None:
    prelude = (f"import os, sys\nROOT = {ROOT!r}\nHARNESS = {HARNESS!r}\n"
               f"PACKAGE = {ARGS.package!r}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The one folder, for both; the harness is told where it is as the
    # worker and ctest tell it.
    env.update(PYTHONPATH=ARGS.package, HEADROOM_PYTHON_PROTO=ARGS.package,
               PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", prelude + order + CHECKS], env=env,
                          cwd="/", capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        print(f"test_one_tree: FAILED ({'client' if order is CLIENT_FIRST else 'harness'} "
              f"first):\n{done.stdout}{done.stderr}")
        sys.exit(1)
    print(done.stdout.strip())


run(CLIENT_FIRST)
run(HARNESS_FIRST)
print("test_one_tree: OK")
