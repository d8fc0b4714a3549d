"""``forklift doctor`` through the real CLI entry: exit codes, refusal of unreadable input, JSON, stdin."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from forklift.cli.main import app

from .conftest import DATA

EX = DATA / "excerpts"
runner = CliRunner(env={"COLUMNS": "250"})


def test_a_failure_exits_1_and_json_has_findings_and_checks() -> None:
    res = runner.invoke(app, ["doctor", "--json", str(EX / "vllm-27508-kv-cache-gpt-oss.log")])
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    top = data["findings"][0]
    assert {"rule", "category", "confidence", "fix", "lines", "evidence", "layer", "key"} <= set(top)
    assert top["category"] == "kv_cache_insufficient" and top["facts"]["needed_gib"] == "4.54"
    assert data["checks"][0]["status"] == "fail" and data["unsure"] is False


def test_the_table_shows_the_fix_and_the_evidence_line() -> None:
    res = runner.invoke(app, ["doctor", str(EX / "seed000-weight-loader-arity.log")])
    assert res.exit_code == 1
    assert "`forklift patch apply kv-scale-loader-args`" in res.stdout
    evidence = res.stdout.split("evidence:", 1)[1].splitlines()
    assert [line.strip() for line in evidence[1:3]] == [
        "seed000-weight-loader-arity.log:1",
        "TypeError: KVCacheScaleParameter.weight_loader() takes 2 positional arguments but 3 were given"]


def test_a_healthy_log_exits_0() -> None:
    res = runner.invoke(app, ["doctor", str(EX / "calib-h200-glm-healthy.log")])
    assert res.exit_code == 0 and "no failure found" in res.stdout


def test_empty_and_binary_input_exit_2_with_the_reason(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    binary = tmp_path / "blob.log"
    binary.write_bytes(bytes(range(256)) * 100)
    for path, reason in ((empty, "is empty"), (binary, "is binary")):
        res = runner.invoke(app, ["doctor", str(path)])
        assert res.exit_code == 2, (path.name, res.output)
        assert reason in res.output


def test_stdin_is_read_and_unreadable_stdin_exits_2() -> None:
    text = "ERROR 04-28 x\nValueError: No available memory for the cache blocks.\n"
    ok = runner.invoke(app, ["doctor", "-"], input=text)
    assert ok.exit_code == 1 and "kv-cache-no-blocks" in ok.stdout
    assert runner.invoke(app, ["doctor", "-"], input="").exit_code == 2


def test_missing_file_and_unknown_run_exit_2() -> None:
    assert runner.invoke(app, ["doctor", "does/not/exist.log"]).exit_code == 2
    assert runner.invoke(app, ["doctor", "no-such-run"]).exit_code == 2


def test_a_high_threshold_makes_doctor_unsure_and_it_says_so() -> None:
    res = runner.invoke(app, ["doctor", "--threshold", "0.999", str(EX / "vllm-16707-nccl-system-error.log")])
    assert res.exit_code == 1
    assert "unsure" in res.stdout and "verify first" in res.stdout


def test_several_files_are_read_together() -> None:
    res = runner.invoke(app, ["doctor", "--json", str(EX / "vllm-19670-tcpstore-timeout.log"),
                              str(EX / "vllm-4327-fp8-capability.log")])
    data = json.loads(res.stdout)
    assert set(data["sources"]) == {"vllm-19670-tcpstore-timeout.log", "vllm-4327-fp8-capability.log"}
    cats = {f["category"] for f in data["findings"]}
    assert {"distributed_init_timeout", "unsupported_quantization_or_arch"} <= cats


def test_recipe_adds_kv_advice_that_knows_the_recipe() -> None:
    res = runner.invoke(app, ["doctor", "--json", "--recipe", "default", str(EX / "tpu-inference-223-kv-cache.log")])
    assert res.exit_code == 1
    top = json.loads(res.stdout)["findings"][0]
    assert any(a.startswith("serve.max_model_len: 5120") for a in top["advice"])


def test_the_run_context_comes_from_the_record() -> None:
    from types import SimpleNamespace

    from forklift.cluster.diagnose import context_of
    from forklift.recipe.schema import Recipe

    recipe = Recipe.model_validate({"model": {"source": "/m"}, "patches": ["kv-scale-loader-args"],
                                    "nodes": [{"host": "spark-a", "hardware": "gb10"},
                                              {"host": "spark-b", "ssh": "me@b", "hardware": "gb10"}],
                                    "parallel": {"pp": 2}})
    rank = SimpleNamespace(rank=0, kv_pool_gib=1.5, kv_needed_gib=2.81)
    record = SimpleNamespace(
        recipe=recipe, error="rank 1 on spark-b exited during startup (phase: loading weights)", status="failed",
        pins=SimpleNamespace(patches=[SimpleNamespace(id="kv-scale-loader-args")]), patches=[],
        planned=SimpleNamespace(fits=False, ranks=[rank]), plan=SimpleNamespace(kind="plan"), vllm_version="0.26.0")
    # a stand-in with only the fields context_of reads (a real record needs a plan this model cannot get)
    ctx = context_of(record, {"spark-b": (2 << 30, 128 << 30)})  # type: ignore[arg-type]
    assert (ctx.failed_rank, ctx.failed_host, ctx.phase) == (1, "spark-b", "loading weights")
    assert ctx.plan_fits is False and ctx.kv_margin_gib == -1.31
    assert ctx.patches_applied == ("kv-scale-loader-args",) and ctx.patches_wanted == ("kv-scale-loader-args",)
    assert ctx.unified_memory is True and ctx.nodes == 2 and ctx.backend == "native"
    assert ctx.to_json()["mem_available"] == {"spark-b": (2 << 30, 128 << 30)}
