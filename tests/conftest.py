"""Shared fixtures: every test gets its own FORKLIFT_HOME; the model cache stays shared."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# FORKLIFT_HOME isolates caches too, so name the one cache every test (and every forklift the tests start,
# session fixtures included) shares: the prepared bundled model and vLLM release sources live there
# (`make fixtures` fills it).
os.environ.setdefault("FORKLIFT_CACHE", str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                            / "forklift"))


def worker_core() -> int | None:
    """The core this pytest-xdist worker's vLLM-CPU ranks compute on, or None outside xdist.

    vLLM-CPU binds a single rank's OpenMP threads to core 0 and reserves the rest for its frontend
    (``ompmultiprocessing._get_autobind_cpu_ids``), so two workers' servers would share core 0 and leave core 1 to
    pytest: each worker names its own core instead (VLLM_CPU_OMP_THREADS_BIND, inherited by what it starts)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return None
    return int(worker[2:]) % (os.cpu_count() or 1)


_core = worker_core()
if _core is not None:
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(_core))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "forklift-home"
    monkeypatch.setenv("FORKLIFT_HOME", str(home))
    yield home


# --- tiers: every test carries its tier's marker (from its folder), and each tier's time is recorded ---------------

TIERS = {"unit": "unit", "integration": "integration", "cluster": "cluster"}
"""tests/<folder> -> marker. `make test` runs them all; `-m unit` runs the no-process tier alone."""
TIER_FILE = Path(__file__).resolve().parents[1] / "bench-results" / "test-tiers.json"
_tier_seconds: dict[str, float] = {}
_tier_tests: dict[str, int] = {}
_session_t0: list[float] = []


def _tier_of(nodeid: str) -> str:
    parts = nodeid.split("/")
    return TIERS.get(parts[1], "other") if len(parts) > 2 and parts[0] == "tests" else "other"


SERVED_MODULES = frozenset(f"tests/integration/{m}.py" for m in (
    "test_bench", "test_check", "test_ladder", "test_monitor", "test_speculative", "test_up_down"))
"""The modules whose tests use the session's shared vLLM-CPU server (tests/integration/conftest.py ``served``): one
xdist scope, so one worker runs them all and the session starts that server once, not once per worker (a start and
a stop, ~50 s here). :func:`pytest_collection_modifyitems` fails the run when a module outside it uses ``served``."""


def _xdist_scope(nodeid: str) -> str:
    """Where `make test`'s two workers (pytest-xdist) may split the suite: never inside a module (its module
    fixtures start servers once), never across the cluster tier (its nodes share this machine's filesystem and its
    pp=2 ranks take both cores), and never across the modules that share the session's server."""
    module = nodeid.split("::", 1)[0]
    if _tier_of(nodeid) == "cluster":
        return "cluster"
    return "served" if module in SERVED_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's loadscope scheduling with :func:`_xdist_scope` as the scope (its xdist_group marks do not take
    under this pytest: the group rides on ``item._nodeid``). The cluster scope is collected first, so it starts
    first and the modules fill the other worker."""
    from xdist.scheduler import LoadScopeScheduling

    class _ByModuleAndCluster(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types: its classes are Any
        def _split_scope(self, nodeid: str) -> str:
            return _xdist_scope(nodeid)

    return _ByModuleAndCluster(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = sorted({item.nodeid.split("::", 1)[0] for item in items
                     if {"served", "served_home"} & set(getattr(item, "fixturenames", ()))} - SERVED_MODULES)
    if strays:
        raise pytest.UsageError(f"{', '.join(strays)} use the shared server: add them to SERVED_MODULES in "
                                "tests/conftest.py (one worker runs those modules, so the server starts once)")
    for item in items:
        tier = _tier_of(item.nodeid)
        if tier != "other" and tier not in {m.name for m in item.iter_markers()}:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    _session_t0.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier_of(report.nodeid)
    _tier_seconds[tier] = _tier_seconds.get(tier, 0.0) + report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _tier_tests[tier] = _tier_tests.get(tier, 0) + 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """bench-results/test-tiers.json: seconds per tier (setup + call + teardown, so a shared server counts in the
    tier that started it) for a full run; a line per run is appended to test-tiers-history.jsonl."""
    import json
    import time

    args = [str(a) for a in session.config.invocation_params.args]
    suite = Path(__file__).resolve().parent
    here = session.config.invocation_params.dir
    # the paths pytest was given (testpaths when none): option values such as `-n 2` are not among them
    chosen = [a for a in session.config.args if (here / a.split("::")[0]).resolve() not in (suite, suite.parent)]
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a worker saw part of the run; the controller receives every report and writes the record
    if not _tier_tests or chosen or session.config.getoption("markexpr", "") or session.config.getoption("keyword", ""):
        return  # only whole-suite runs are recorded
    record = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "exit": int(exitstatus),
              "wall_s": round(time.monotonic() - _session_t0[0], 1) if _session_t0 else None,
              "tiers": {t: {"seconds": round(s, 1), "tests": _tier_tests.get(t, 0)} for t, s in
                        sorted(_tier_seconds.items())},
              "args": args}
    try:
        TIER_FILE.parent.mkdir(exist_ok=True)
        TIER_FILE.write_text(json.dumps(record, indent=2) + "\n")
        with open(TIER_FILE.with_name("test-tiers-history.jsonl"), "a") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError:
        pass
