"""The harness's pytest suite: worker/harness/headroom_harness, tested
without torch where the code needs none (flags, specs, setups, wiring, the
printed lines); what needs torch skips, saying so, where it does not import.

  python3 -m pytest -p no:cacheprovider tests/worker/harness

(ctest harness_pytest) The generated headroom/v1 modules are found as the
harness finds them: $HEADROOM_PYTHON_PROTO (ctest sets it to build/python),
else the source tree's build/python.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HARNESS_DIR = os.path.join(ROOT, "worker", "harness")
MODELS = os.path.join(ROOT, "models")

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, HARNESS_DIR)

from headroom_harness import proto  # noqa: E402  (after the path above)


@pytest.fixture(scope="session")
def generated_protos():
    """The generated modules, imported once; a test run without them (no
    build yet) fails under ctest, which names the folder, and skips else."""
    try:
        return proto.load_proto()
    except Exception as error:  # SpecError: none of the folders has them
        if os.environ.get(proto.PROTO_ENV):
            pytest.fail(f"the generated protos do not import: {error}")
        pytest.skip(f"no generated headroom/v1 modules (build headroom_python): {error}")


@pytest.fixture
def model_path():
    """models/NAME.json of the catalog, by NAME."""
    return lambda name: os.path.join(MODELS, name + ".json")


@pytest.fixture
def harness_dir():
    """worker/harness: headroom_torch_probe.py and its package."""
    return HARNESS_DIR
