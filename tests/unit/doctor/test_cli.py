"""``forklift doctor`` through the real CLI entry: exit codes, JSON shape, stdin, run names."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from forklift.cli.main import app

from .conftest import DATA

EX = DATA / "excerpts"
runner = CliRunner()


def test_error_finding_exits_1_and_json_has_the_fields() -> None:
    res = runner.invoke(app, ["doctor", "--json", str(EX / "vllm-27508-kv-cache-gpt-oss.log")])
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    top = data["findings"][0]
    assert {"rule", "category", "confidence", "fix", "lines"} <= set(top)
    assert top["category"] == "kv_cache_insufficient"
    assert top["facts"]["needed_gib"] == "4.54"


def test_healthy_log_exits_0() -> None:
    res = runner.invoke(app, ["doctor", str(EX / "calib-h200-glm-healthy.log")])
    assert res.exit_code == 0


def test_missing_file_exits_2() -> None:
    res = runner.invoke(app, ["doctor", "does/not/exist.log"])
    assert res.exit_code == 2


def test_unknown_run_name_exits_2() -> None:
    res = runner.invoke(app, ["doctor", "no-such-run"])
    assert res.exit_code == 2


def test_stdin_without_a_match_shows_the_last_error_lines() -> None:
    res = runner.invoke(app, ["doctor", "-"], input="INFO fine\nERROR a thing nobody has seen\n")
    assert res.exit_code == 0
    assert "no known failure in 2 lines" in res.stdout
    assert "ERROR a thing nobody has seen" in res.stdout


def test_several_files_are_read_together(tmp_path: Path) -> None:
    res = runner.invoke(app, ["doctor", "--json", str(EX / "vllm-19670-tcpstore-timeout.log"),
                              str(EX / "vllm-16707-nccl-system-error.log")])
    rules = {f["rule"] for f in json.loads(res.stdout)["findings"]}
    assert {"tcpstore-connect-timeout", "nccl-unhandled-system-error"} <= rules


def test_recipe_adds_kv_advice_that_knows_the_recipe() -> None:
    res = runner.invoke(app, ["doctor", "--json", "--recipe", "default", str(EX / "tpu-inference-223-kv-cache.log")])
    assert res.exit_code == 1
    top = json.loads(res.stdout)["findings"][0]
    assert any(a.startswith("serve.max_model_len: 5120") for a in top["advice"])
