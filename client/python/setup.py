"""The build hook of pyproject.toml: generates the headroom.v1 package
(messages and gRPC stubs) from the repository's proto/headroom/v1 into the
wheel, beside headroom_client, as build.sh does for a build tree.

Needs protoc 3.15 or later (the protos use proto3 `optional`; Debian 12's
protobuf-compiler is 3.21) with grpc_python_plugin (protobuf-compiler-grpc);
PROTOC and GRPC_PYTHON_PLUGIN name others, HEADROOM_PROTO_DIR another
proto/ folder. Without them it tries grpc_tools (python3-grpc-tools; its
bundled protoc must be 3.15 or later too) and otherwise stops, saying what
to install.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def proto_dir():
    root = os.environ.get("HEADROOM_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    root = os.path.normpath(root)
    if not glob.glob(os.path.join(root, "headroom", "v1", "*.proto")):
        sys.exit(f"headroom-client: no headroom/v1/*.proto under {root}: build from the "
                 "repository (pip install client/python), or set HEADROOM_PROTO_DIR to "
                 "its proto/ folder")
    return root


def generators():
    """The commands to try, each a list ending before the output flags."""
    found = []
    # which() also checks a path given: it must be an executable file.
    protoc = shutil.which(os.environ.get("PROTOC") or "protoc")
    plugin = shutil.which(os.environ.get("GRPC_PYTHON_PLUGIN") or "grpc_python_plugin")
    if protoc and plugin:
        found.append(("protoc with grpc_python_plugin",
                      [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]))
    try:
        import grpc_tools  # noqa: F401
        found.append(("grpc_tools.protoc", [sys.executable, "-m", "grpc_tools.protoc"]))
    except ImportError:
        pass
    return found


def generate(out):
    root = proto_dir()
    protos = sorted(glob.glob(os.path.join(root, "headroom", "v1", "*.proto")))
    tried = []
    for name, command in generators():
        done = subprocess.run(command + ["-I", root, f"--python_out={out}",
                                         f"--grpc_python_out={out}"] + protos,
                              capture_output=True, text=True)
        if done.returncode == 0:
            for package in ("headroom", os.path.join("headroom", "v1")):
                open(os.path.join(out, package, "__init__.py"), "a").close()
            print(f"headroom-client: headroom.v1 generated with {name}")
            return
        tried.append(f"{name}: {done.stderr.strip()[:500]}")
    if not tried:
        sys.exit("headroom-client: neither protoc with grpc_python_plugin nor "
                 "grpc_tools is installed; on Debian 12: apt-get install "
                 "protobuf-compiler protobuf-compiler-grpc (or set PROTOC and "
                 "GRPC_PYTHON_PLUGIN)")
    sys.exit("headroom-client: generating headroom.v1 failed (protoc 3.15 or later "
             "is needed for proto3 optional):\n  " + "\n  ".join(tried))


class BuildWithStubs(build_py):
    """build_py, then headroom.v1 generated into the build folder."""

    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
