"""headroom_harness.flags: the command line the worker's executors build."""

import argparse
import json

import pytest

from headroom_harness import flags
from headroom_harness.errors import EXIT_BAD_INPUT, SpecError
from headroom_harness.setups import Setup


def parse(*argv):
    return flags.parser().parse_args(list(argv))


def test_run_flags_and_their_defaults():
    args = parse("run", "--spec", "m.json", "--batches", "1,2,4")
    assert (args.command, args.spec, args.batches) == ("run", "m.json", "1,2,4")
    assert (args.warmup, args.steps, args.device, args.positions) == (1, 3, None, None)
    assert (args.setup, args.proto_path, args.compile) == (None, None, False)


def test_the_worker_command_line_parses():
    # As worker/daemon/gpu_executors.cc builds it (run, every flag given).
    args = parse("run", "--spec", "m.json", "--batches", "8", "--setup", "{}", "--warmup", "2",
                 "--steps", "5", "--device", "cuda:1", "--positions", "512", "--compile",
                 "--proto_path", "/p")
    assert (args.warmup, args.steps, args.device, args.positions) == (2, 5, "cuda:1", 512)
    assert args.compile and args.proto_path == "/p" and args.setup == "{}"


def test_count_and_generate_flags():
    count = parse("count", "--spec", "m.json", "--setup", "{}", "--proto_path", "/p")
    assert (count.command, count.spec, count.setup, count.proto_path) == (
        "count", "m.json", "{}", "/p")
    gen = parse("generate", "--hf_config", "c.json", "--quant", "nf4")
    assert (gen.prompt_tokens, gen.new_tokens, gen.warmup, gen.device, gen.idle_s) == (
        64, 128, 1, None, 1.0)


def test_a_flag_it_cannot_parse_is_one_error_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        parse("run", "--spec", "m.json")
    assert done.value.code == EXIT_BAD_INPUT == 2
    line = json.loads(capsys.readouterr().out)
    assert line == {"event": "error",
                    "error": "bad flags: the following arguments are required: --batches"}


def test_batches():
    assert flags.parse_batches("1,2,4") == [1, 2, 4]
    assert flags.parse_batches(" 8 ") == [8]
    assert flags.parse_batches(str(1 << 20)) == [1 << 20]
    for bad, part in (("0", "0"), ("1,x", "x"), ("1,,2", ""), (str((1 << 20) + 1), "1048577")):
        with pytest.raises(SpecError) as error:
            flags.parse_batches(bad)
        assert str(error.value) == (f"--batches {bad}: '{part}' is not a batch size; allowed "
                                    "a comma-separated list of 1..1048576")


def run_args(**kw):
    values = dict(positions=None, batches="1,2", warmup=1, steps=3)
    values.update(kw)
    return argparse.Namespace(**values)


def test_check_run_returns_the_batches_and_overrides_positions():
    setup = Setup(positions=128)
    assert flags.check_run(run_args(positions=2048), setup, 1) == [1, 2]
    assert setup.positions == 2048
    assert flags.check_run(run_args(), Setup(gpus=4), 4) == [1, 2]


@pytest.mark.parametrize("kw,message", [
    (dict(positions=0), "--positions 0 is out of range; allowed 1..4294967296"),
    (dict(warmup=-1), "--warmup -1 is out of range; allowed 0..1000"),
    (dict(steps=0), "--steps 0 is out of range; allowed 1..1000"),
    (dict(steps=1001), "--steps 1001 is out of range; allowed 1..1000"),
])
def test_check_run_names_the_flag(kw, message):
    with pytest.raises(SpecError) as error:
        flags.check_run(run_args(**kw), Setup(), 1)
    assert str(error.value) == message


def test_a_multi_gpu_setup_needs_one_process_per_gpu():
    with pytest.raises(SpecError) as error:
        flags.check_run(run_args(), Setup(gpus=2), 1)
    assert str(error.value).startswith("setup.gpus = 2 but 1 process(es) run: a multi-GPU "
                                       "setup runs under python -m torch.distributed.run "
                                       "--nproc_per_node 2")
    with pytest.raises(SpecError):
        flags.check_run(run_args(), Setup(), 2)  # launched with 2, setup for 1


def gen_args(**kw):
    values = dict(quant="nf4", prompt_tokens=64, new_tokens=128, warmup=1, idle_s=1.0)
    values.update(kw)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("kw,message", [
    (dict(quant="fp8"), "--quant fp8 is unknown; allowed fp16, nf4, int8"),
    (dict(prompt_tokens=0), "--prompt_tokens 0 is out of range; allowed 1..8192"),
    (dict(new_tokens=8193), "--new_tokens 8193 is out of range; allowed 1..8192"),
    (dict(warmup=11), "--warmup 11 is out of range; allowed 0..10"),
    (dict(idle_s=61.0), "--idle_s 61.0 is out of range; allowed 0..60"),
])
def test_check_generate_names_the_flag(kw, message):
    flags.check_generate(gen_args())  # the defaults pass
    with pytest.raises(SpecError) as error:
        flags.check_generate(gen_args(**kw))
    assert str(error.value) == message
