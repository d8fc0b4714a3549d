"""The test suite's time per tier, as the last whole-suite run (`make test`) recorded it in
bench-results/test-tiers.json (tests/conftest.py writes it; test-tiers-history.jsonl keeps every run), against the
30-minute budget for the whole suite. Reports, never runs the suite: it takes as long as CI."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "bench-results"
BUDGET_S = 30 * 60


def main() -> dict[str, object]:
    latest = RESULTS / "test-tiers.json"
    if not latest.is_file():
        print("no whole-suite run recorded yet: run `make test` first")
        return {"recorded": False}
    record = json.loads(latest.read_text())
    history = RESULTS / "test-tiers-history.jsonl"
    runs = [json.loads(line) for line in history.read_text().splitlines() if line.strip()] if history.is_file() else []
    print(f"last whole-suite run {record['when']} (exit {record['exit']}): wall {record['wall_s']} s of a "
          f"{BUDGET_S} s budget")
    for tier, row in record["tiers"].items():
        print(f"  {tier:12s} {row['seconds']:8.1f} s  {row['tests']:5d} tests")
    if len(runs) > 1:
        before = runs[-2]
        print(f"  previous run {before['when']}: wall {before['wall_s']} s")
    out = {"recorded": True, "latest": record, "runs": len(runs),
           "within_budget": record["wall_s"] is not None and record["wall_s"] <= BUDGET_S}
    (RESULTS / "suite_tiers.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
