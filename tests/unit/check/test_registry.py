"""Checks come from one registry: the suite's tiers, the CLI's help and --only read it, and a plugin's entry point
adds a check that runs like a built-in one."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forklift.check import registry
from forklift.check.context import CheckContext
from forklift.check.registry import CheckSpec
from forklift.cli.main import app
from forklift.endpoint import Target
from forklift.errors import CheckError
from forklift.results import CheckResult

PLUGIN = '''
from forklift.check.registry import CheckSpec
from forklift.results import CheckResult

def _run(ctx):
    return CheckResult("latency-budget", "ok", f"tier {ctx.tier}, model {ctx.session.model}")

SPEC = CheckSpec("latency-budget", "first token within the owner's budget", _run, quick=True)
'''


def _install_plugin(root: Path, value: str, module_text: str = PLUGIN) -> None:
    """A real installed distribution (a .dist-info with entry_points.txt on sys.path), as pip would leave it."""
    (root / "fl_test_plugin.py").write_text(module_text)
    info = root / "fl_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fl-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[forklift.checks]\nlatency_budget = {value}\n")


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setattr(registry, "_loaded", [])
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("fl_test_plugin", None)


def test_builtin_ids_are_unique_and_each_runner_loads() -> None:
    ids = [s.id for s in registry.BUILTIN]
    assert len(ids) == len(set(ids))
    for spec in registry.BUILTIN:
        assert callable(spec.runner()), spec.id


def test_a_plugin_check_joins_the_quick_tier_and_runs(fresh_registry: Path) -> None:
    _install_plugin(fresh_registry, "fl_test_plugin:SPEC")
    from forklift import check

    target = Target("http://x", model="m")
    assert check.plan(target, "quick")[-1] == "latency-budget"
    spec = registry.get("latency-budget")
    assert spec.source == "fl_test_plugin:SPEC"
    from forklift.check.session import Session
    from forklift.endpoint import Discovery

    s = Session(target, Discovery(listing=[{"id": "m"}], model="m", max_model_len=None, version=None), timeout_s=1)
    try:
        result = spec.runner()(CheckContext(s, "full"))
    finally:
        s.close()
    assert result == CheckResult("latency-budget", "ok", "tier full, model m")


def test_the_cli_offers_plugin_checks_to_only(fresh_registry: Path) -> None:
    _install_plugin(fresh_registry, "fl_test_plugin:SPEC")
    res = CliRunner().invoke(app, ["check", "--url", "http://127.0.0.1:9", "--only", "nosuch"])
    assert isinstance(res.exception, CheckError)  # main() prints it with its fix and exits 2
    assert "latency-budget" in (res.exception.fix or "") and "endpoint" in (res.exception.fix or "")


def test_a_plugin_may_not_take_a_builtin_id(fresh_registry: Path) -> None:
    _install_plugin(fresh_registry, "fl_test_plugin:SPEC", PLUGIN.replace('"latency-budget", "first',
                                                                          '"endpoint", "first'))
    with pytest.raises(CheckError, match="'endpoint' is registered twice"):
        registry.specs()


def test_a_broken_plugin_is_named_with_its_fix(fresh_registry: Path) -> None:
    _install_plugin(fresh_registry, "fl_test_plugin:NOT_THERE")
    with pytest.raises(CheckError) as err:
        registry.specs()
    assert "latency_budget" in err.value.message and "fl_test_plugin:NOT_THERE" in (err.value.fix or "")


def test_ids_must_be_plain_words() -> None:
    with pytest.raises(CheckError, match="lower-case"):
        registry.validate([CheckSpec("Bad Id", "x", "m:f")])


def test_quick_help_names_every_quick_check() -> None:
    text = registry.quick_help()
    for spec in registry.BUILTIN:
        assert (spec.id in text) == spec.quick, spec.id
