"""A cold ``forklift plan --json`` loads only what planning uses (issue 14: a cold plan within 0.4 s)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

_RUN = """
import runpy, sys
sys.argv = ["forklift", "plan", "glm-4.7-nvfp4-2x-spark", "--json"]
try:
    runpy.run_module("forklift.cli.main", run_name="__main__")
except SystemExit:
    pass
import json
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

_NOT_ON_THE_PLAN_PATH = (
    "rich",  # drawing only; --json prints with json.dumps
    "forklift.runner",  # node facts are read from files here, never measured
    "forklift.plan.startlog",  # only to calibrate from a log
    "forklift.recipe.cluster_file",  # only for a recipe with cluster:
    "forklift.speculative.rules",  # only for a recipe with serve.speculative
)


def test_plan_json_imports_nothing_it_does_not_use() -> None:
    done = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert json.loads(done.stdout)["model"]
    assert [m for m in loaded if m.split(".")[0] == "forklift" and m.startswith("forklift.plan.")]
    for name in _NOT_ON_THE_PLAN_PATH:
        assert not [m for m in loaded if m == name or m.startswith(name + ".")], name


def test_main_in_process_leaves_the_collector_as_it_found_it(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from forklift.cli.main import main

    monkeypatch.setattr(sys, "argv", ["forklift", "plan", "glm-4.7-nvfp4-2x-spark", "--json"])
    with pytest.raises(SystemExit):
        main()
    assert json.loads(capsys.readouterr().out)["model"]
    assert gc.isenabled() and gc.get_freeze_count() == 0
