"""The one place the harness imports the generated headroom.v1 modules.

Specs and setups are read with protobuf's generated Python code
(headroom/v1/model_pb2.py, made by protoc --python_out at build time, CMake
target headroom_python), so the schema is the planner's own
proto/headroom/v1/model.proto, never a copy of it.
"""

import os
import sys

from headroom_harness.errors import SpecError

# The folder holding the harness: headroom_torch_probe.py and this package
# beside it (worker/harness in the source tree, bin/ when installed).
HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROTO_ENV = "HEADROOM_PYTHON_PROTO"
_PROTO = {}  # "model_pb2", "json_format" once imported


def proto_search_path(flag=None):
    """Where headroom/v1/model_pb2.py is looked for: --proto_path alone when
    given; else $HEADROOM_PYTHON_PROTO, then python/ next to the harness, the
    installed share/headroom/python (bin/../share), and the source tree's
    build/python."""
    if flag:
        return [flag]
    here = HARNESS_DIR
    paths = [os.environ[PROTO_ENV]] if os.environ.get(PROTO_ENV) else []
    paths += [os.path.join(here, "python"),
              os.path.normpath(os.path.join(here, "..", "share", "headroom", "python")),
              os.path.normpath(os.path.join(here, "..", "..", "build", "python"))]
    return paths


def load_proto(flag=None):
    """Imports the generated headroom.v1 modules; SpecError says what is
    missing and where it looked."""
    if _PROTO and flag is None:
        return _PROTO["model_pb2"], _PROTO["json_format"]
    try:
        from google.protobuf import json_format
    except ImportError as error:
        raise SpecError(f"python3-protobuf is not installed ({error}): install Debian's "
                        "python3-protobuf or `pip install protobuf`") from None
    tried = proto_search_path(flag)
    for path in tried:
        if os.path.isfile(os.path.join(path, "headroom", "v1", "model_pb2.py")):
            if path not in sys.path:
                sys.path.insert(0, path)
            from headroom.v1 import model_pb2
            _PROTO.update(model_pb2=model_pb2, json_format=json_format)
            return model_pb2, json_format
    raise SpecError("headroom/v1/model_pb2.py (protoc --python_out; `ninja -C build "
                    "headroom_python`) is in none of: " + ", ".join(tried) +
                    f"; pass --proto_path DIR or set {PROTO_ENV}")


def parse_json(text, message, what):
    """json_format.Parse with unknown fields rejected (as the planner's
    loader, ignore_unknown = false); the error names the field."""
    _, json_format = load_proto()
    try:
        json_format.Parse(text, message)
    except json_format.ParseError as error:
        detail = str(error).split("\n")[0][:400]
        raise SpecError(f"{what}: {detail}") from None
    return message


def _enum_name(fd, number, path):
    value = fd.enum_type.values_by_number.get(number)
    if value is None:
        allowed = ", ".join(v.name for v in fd.enum_type.values if v.number != 0)
        raise SpecError(f"{path}.{fd.name} = {number} is unknown; allowed {allowed}")
    return value.name


def message_fields(message, path):
    """The fields of one message as a dict of proto3 values (enums by name,
    repeated fields as lists)."""
    out = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.label == fd.LABEL_REPEATED:
            value = list(value)
        elif fd.enum_type is not None:
            value = _enum_name(fd, value, path)
        out[fd.name] = value
    return out
