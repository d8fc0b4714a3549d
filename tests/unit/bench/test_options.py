"""`forklift bench`'s options come from BenchConfig: the same flags as always, defaults and refusals from the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.main import get_command

from forklift.bench import BenchConfig, Slo
from forklift.bench.options import options
from forklift.cli import bench as bench_cli
from forklift.errors import BenchError

# The command line as it was before the options were built from the model (src/forklift/cli/bench.py, main).
FLAGS = {"--url", "--model", "--tokenizer", "--concurrency", "-c", "--input-len", "--output-len", "--requests", "-r",
         "--rate", "--duration", "--prompts", "--warmup", "--slo-ttft-ms", "--slo-tpot-ms", "--slo-e2e-ms", "--seed",
         "--out", "--json", "--workload", "--spec-baseline",  # these two: speculative decoding (issue 21)
         "--ladder", "--ladder-depths", "--ladder-users", "--ladder-runs", "--ladder-out"}  # the ladder (issue 33)


def _command() -> typer.core.TyperCommand:
    app = typer.Typer()
    bench_cli.register(app)
    app.command("other")(lambda: None)  # two commands, so `bench` stays a subcommand
    group = get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands["bench"]
    assert isinstance(command, typer.core.TyperCommand)
    return command


def test_the_flags_are_the_ones_the_command_always_had() -> None:
    params = _command().params
    assert {d for p in params for d in p.opts if d.startswith("-")} == FLAGS
    assert [p.name for p in params][0] == "name"


def test_not_given_means_the_model_default() -> None:
    none = {opt.path: None for opt in options(BenchConfig)}
    assert BenchConfig.from_flags(none) == BenchConfig()
    assert BenchConfig.from_flags(none | {"rate": 4.0}).concurrency == (None,)
    timed = BenchConfig.from_flags(none | {"duration_s": 30.0})
    assert timed.requests is None and timed.duration_s == 30.0
    both = BenchConfig.from_flags(none | {"concurrency": "1,inf", "rate": 2.0, "slo.ttft_ms": 500.0,
                                          "prompts_file": Path("p.jsonl")})
    assert both.concurrency == (1, None) and both.slo == Slo(ttft_ms=500.0) and both.prompts_file == Path("p.jsonl")


@pytest.mark.parametrize(("values", "message", "fix"), [
    ({"concurrency": "1,x"}, "--concurrency '1,x': 'x' is not a whole number", "For example --concurrency 1,2,4."),
    ({"requests": 0}, "--requests 0 is below 1", "Pass --requests 1 or more."),
    ({"warmup": -1}, "--warmup -1 is below 0", "Pass --warmup 0 or more."),
    ({"rate": -2.0}, "--rate -2.0 is not positive", "Pass --rate greater than 0."),
    ({"slo.tpot_ms": 0.0}, "--slo-tpot-ms 0.0 is not positive", "Pass --slo-tpot-ms greater than 0."),
    ({"input_len": 0}, "--input-len 0 is below 1", "Pass --input-len 1 or more."),
])
def test_refusals_name_the_flag(values: dict[str, object], message: str, fix: str) -> None:
    with pytest.raises(BenchError) as err:
        BenchConfig.from_flags(values)
    assert err.value.message == message and err.value.fix == fix


def test_help_shows_the_model_defaults() -> None:
    by_flag = {p.opts[0]: p for p in _command().params if isinstance(p, typer.core.TyperOption)}
    assert "default 128" in (by_flag["--input-len"].help or "")
    assert "default 1, or no cap with --rate" in (by_flag["--concurrency"].help or "")
    assert by_flag["--slo-e2e-ms"].help == "Goodput SLO on E2E latency."
