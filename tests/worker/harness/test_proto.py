"""headroom_harness.proto: where the generated headroom.v1 modules are found."""

import os

import pytest

from headroom_harness import proto
from headroom_harness.errors import SpecError


def test_the_flag_alone_when_given(monkeypatch):
    monkeypatch.setenv(proto.PROTO_ENV, "/from/env")
    assert proto.proto_search_path("/from/flag") == ["/from/flag"]


def test_the_search_order_is_relative_to_the_harness(monkeypatch, harness_dir):
    monkeypatch.setenv(proto.PROTO_ENV, "/from/env")
    root = os.path.dirname(os.path.dirname(harness_dir))
    assert proto.HARNESS_DIR == harness_dir
    assert proto.proto_search_path() == [
        "/from/env", os.path.join(harness_dir, "python"),
        os.path.join(os.path.dirname(harness_dir), "share", "headroom", "python"),
        os.path.join(root, "build", "python")]
    monkeypatch.delenv(proto.PROTO_ENV)
    assert proto.proto_search_path()[0] == os.path.join(harness_dir, "python")


def test_a_folder_without_them_is_named(tmp_path):
    with pytest.raises(SpecError) as error:
        proto.load_proto(str(tmp_path))
    assert str(error.value) == (
        "headroom/v1/model_pb2.py (protoc --python_out; `ninja -C build "
        f"headroom_python`) is in none of: {tmp_path}; pass --proto_path DIR or set "
        "HEADROOM_PYTHON_PROTO")


def test_the_modules_are_the_generated_ones(generated_protos):
    model_pb2, json_format = generated_protos
    assert model_pb2.__name__ == "headroom.v1.model_pb2"
    assert model_pb2.ModelSpec.DESCRIPTOR.full_name == "headroom.v1.ModelSpec"
    assert proto.load_proto() == (model_pb2, json_format)  # imported once


def test_message_fields_gives_enums_by_name_and_lists(generated_protos):
    model_pb2, _ = generated_protos
    setup = model_pb2.TrainingSetup(precision=model_pb2.BF16_MIXED if hasattr(
        model_pb2, "BF16_MIXED") else 0)
    setup.freeze.layers.append("embed")
    fields = proto.message_fields(setup, "setup")
    assert isinstance(fields["precision"], str)
    assert proto.message_fields(setup.freeze, "setup.freeze")["layers"] == ["embed"]
