"""Doctor's categories are categories.yaml's keys alone, and a package adds rules through an entry point."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from forklift.doctor import kb, scan_text
from forklift.doctor.match import Matcher
from forklift.errors import DoctorError

RULE = """rules:
  - id: site-nfs-stale-handle
    title: A stale NFS handle under the model folder
    category: {category}
    confidence: 0.9
    match: {{any: ["Stale file handle"]}}
    cause: The model folder sits on an NFS export that was remounted.
    fix: Remount the export on every node, then `forklift up` again.
    references: ["https://example.invalid/site-runbook"]
"""


def _install(root: Path, rules_text: str, value: str = "fl_site_rules:RULES") -> None:
    """A real installed distribution (a .dist-info with entry_points.txt on sys.path) naming a rules folder."""
    folder = root / "fl_site_rules_data"
    folder.mkdir()
    (folder / "site.yaml").write_text(rules_text)
    (root / "fl_site_rules.py").write_text(f"from pathlib import Path\nRULES = Path({str(folder)!r})\n")
    info = root / "fl_site_rules-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fl-site-rules\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[forklift.doctor_rules]\nsite = {value}\n")


@pytest.fixture
def plugin_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    kb._bundled.cache_clear()
    yield tmp_path
    kb._bundled.cache_clear()
    sys.modules.pop("fl_site_rules", None)


def test_a_plugin_rule_is_loaded_and_matches(plugin_home: Path) -> None:
    _install(plugin_home, RULE.format(category="model_path_missing_on_worker"))
    rules = kb.load_rules()
    assert "site-nfs-stale-handle" in {r.id for r in rules}
    found = Matcher(rules).run(scan_text(["OSError: [Errno 116] Stale file handle: '/models/x'"]).lines)
    assert [f.rule for f in found] == ["site-nfs-stale-handle"]


def test_a_plugin_rule_with_an_unknown_category_is_named(plugin_home: Path) -> None:
    _install(plugin_home, RULE.format(category="model_path_missing_on_workers"))
    with pytest.raises(DoctorError) as err:
        kb.load_rules()
    assert "site-nfs-stale-handle" in err.value.message
    assert "did you mean 'model_path_missing_on_worker'" in err.value.message


def test_a_plugin_naming_a_missing_path_is_named(plugin_home: Path) -> None:
    _install(plugin_home, RULE.format(category="engine_install"), value="fl_site_rules:NOPE")
    with pytest.raises(DoctorError) as err:
        kb.load_rules()
    assert "'site'" in err.value.message and "fl_site_rules:NOPE" in (err.value.fix or "")
