"""The knowledge base as data: validation errors name the file and rule; the package stays pure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forklift.doctor import PlannerView, load_rules, planner_numbers
from forklift.errors import DoctorError


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(body)
    return p


GOOD = """
rules:
  - id: one
    title: t
    category: patch_drift
    confidence: 0.5
    match: {all: ['x']}
    cause: c
    fix: f
    references: [a]
"""


def test_a_valid_file_loads(tmp_path: Path) -> None:
    assert [r.id for r in load_rules([_write(tmp_path, GOOD)])] == ["one"]


@pytest.mark.parametrize(("change", "message"), [
    (("patch_drift", "made_up_category"), "category"),
    (("['x']", "['(unclosed']"), "bad regular expression"),
    (("['x']", "['(?i)x']"), "scoped flag"),
    (("references: [a]", "references: []"), "references"),
    (("confidence: 0.5", "confidence: 0.5\n    versions: 'about 0.6'"), "version clause"),
])
def test_invalid_rules_are_refused_with_the_rule_named(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    with pytest.raises(DoctorError) as err:
        load_rules([_write(tmp_path, GOOD.replace(*change))])
    assert "rule one" in str(err.value) and message in str(err.value)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    body = GOOD + GOOD.split("rules:\n", 1)[1]
    with pytest.raises(DoctorError, match="duplicate rule id 'one'"):
        load_rules([_write(tmp_path, body)])


def test_doctor_does_not_import_cluster() -> None:
    code = "import sys, forklift.doctor as d; d.diagnose(['x']); print('forklift.cluster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_planner_hook_degrades_when_the_planner_cannot_answer() -> None:
    from forklift.plan import make

    view = planner_numbers(object(), make)
    assert isinstance(view, PlannerView)
    assert view.available is False and view.reason


def test_doctor_never_imports_the_planner() -> None:
    """No upward edge the import contracts cannot see: the planner is passed in by the CLI."""
    src = Path(__file__).resolve().parents[3] / "src" / "forklift" / "doctor"
    for path in src.glob("*.py"):
        text = path.read_text()
        assert "import_module(" not in text and "forklift.plan" not in text.replace("``forklift.plan.make``", ""), path
