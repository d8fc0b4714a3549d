"""The budgeted sequential search and its statistics, with a fake measurer (no processes) and a fake clock."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from forklift.errors import EngineStartupError
from forklift.tune import evidence, search
from forklift.tune.search import RunSample
from forklift.tune.space import Candidate
from forklift.tune.workloads import Request, Workload

W = Workload("w", 4, (Request("x", 8),))
W2 = Workload("v", 4, (Request("y", 8),))


@dataclass
class Fake:
    """Goodput per candidate (req/s), log-normal run noise, a clock moved by start and run costs."""

    truth: dict[str, float]
    noise: float = 0.05
    start_cost: float = 100.0
    run_cost: float = 30.0
    broken: tuple[str, ...] = ()
    now: float = 0.0
    log: list[str] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    starts: int = 0

    def clock(self) -> float:
        return self.now

    def start(self, c: Candidate) -> str:
        self.now += self.start_cost
        self.log.append(f"start {c.name}")
        if c.name in self.broken:
            raise EngineStartupError("out of memory", fix="less")
        self.starts += 1
        return f"{c.name}#{self.starts}"

    def bench(self, c: Candidate, w: Workload, start: str) -> RunSample:
        self.now += self.run_cost
        g = self.truth[c.name] * math.exp(self.rng.gauss(0, self.noise))
        return RunSample(c.name, w.name, start, g, 100 * g, 30.0, 10, 5, 0, True, {"tpot_p95": 10.0 / g})

    def stop(self, c: Candidate) -> None:
        self.log.append(f"stop {c.name}")


def cands(*names: str) -> list[Candidate]:
    return [Candidate(n, () if n == "base" else (f"serve.max_num_seqs={k + 1}",)) for k, n in enumerate(names)]


def test_finds_the_better_candidate_and_stops_hopeless_ones_early() -> None:
    fake = Fake({"base": 1.0, "bad": 0.3, "good": 1.6})
    out = search.run(cands("base", "bad", "good"), [W], fake, search.Options(budget_s=3000, max_runs=3, confirm=1),
                     clock=fake.clock)
    assert out.winner["w"] == "good"
    bad = out.trial("bad")
    assert bad.status == "stopped early" and len(bad.samples) == 1 and "cannot beat the best" in bad.reason
    assert len(out.trial("base").samples) == 3 + 1  # three runs, then one more start in the A/B round
    v = out.versus_baseline["w"]
    assert v["verdict"] == "better" and v["starts"] == {"baseline": 2, "winner": 2}
    assert v["interval"][0] > 1.0 and 1.4 < v["ratio"] < 1.8
    # every start is stopped, A/B alternate at the end
    assert fake.log.count("start base") == fake.log.count("stop base") == 2
    assert fake.log[-4:] == ["start base", "stop base", "start good", "stop good"]


def test_stays_inside_the_budget() -> None:
    fake = Fake({"base": 1.0, "a": 1.1, "b": 1.2, "c": 1.3})
    out = search.run(cands("base", "a", "b", "c"), [W, W2], fake, search.Options(budget_s=700, max_runs=2),
                     clock=fake.clock)
    assert fake.now <= 700
    statuses = [t.status for t in out.trials]
    assert statuses[0] == "measured" and "skipped (budget)" in statuses
    assert out.seconds <= 700


def test_equal_candidates_are_inconclusive_not_better() -> None:
    fake = Fake({"base": 1.0, "same": 1.0}, noise=0.15)
    out = search.run(cands("base", "same"), [W], fake, search.Options(budget_s=5000, max_runs=2), clock=fake.clock)
    v = out.versus_baseline["w"]
    if v["winner"] == "same":
        assert v["verdict"].startswith("inconclusive: noise")
    else:
        assert v["verdict"] == "baseline wins"


def test_a_candidate_that_does_not_start_is_a_row_not_an_error() -> None:
    fake = Fake({"base": 1.0, "oom": 2.0, "ok": 1.2}, broken=("oom",))
    out = search.run(cands("base", "oom", "ok"), [W], fake, search.Options(budget_s=3000, max_runs=1, confirm=0),
                     clock=fake.clock)
    oom = out.trial("oom")
    assert oom.status == "failed" and "out of memory" in oom.reason and not oom.samples
    assert "stop oom" in fake.log  # a failed start is still cleaned up
    assert out.winner["w"] == "ok"


def test_level_interval_narrows_with_starts_and_zero_goodput_is_floored() -> None:
    one = evidence.level([[1.0]], prior_sd=0.1)
    four = evidence.level([[1.0], [1.0], [1.0], [1.0]], prior_sd=0.1)
    assert one is not None and four is not None
    assert (four.high - four.low) < (one.high - one.low)
    assert one.low < 1.0 < one.high
    assert evidence.floor_goodput(0.0, 20.0) == 0.025
    assert evidence.verdict(None) == "not compared"


def test_hierarchical_unit_is_the_start() -> None:
    """Runs of one start are averaged first: ten runs of one start are not ten starts of evidence."""
    many_runs = evidence.relative([[1.0] * 10], [[1.25] * 10], prior_sd=0.1)
    many_starts = evidence.relative([[1.0]] * 10, [[1.25]] * 10, prior_sd=0.1)
    assert many_runs is not None and many_starts is not None
    assert many_runs.low < 0 < many_runs.high  # one start a side: the prior's noise decides
    assert many_starts.low > 0


def test_report_table_and_pareto_page() -> None:
    from forklift.tune import report
    from forklift.tune.slo import parse

    fake = Fake({"base": 1.0, "good": 1.6, "bad": 0.5})
    out = search.run(cands("base", "good", "bad"), [W], fake, search.Options(budget_s=3000, max_runs=2, confirm=0),
                     clock=fake.clock)
    slo = parse("tpot_p95=50")
    table = report.rows(out, slo)
    by = {r["candidate"]: r for r in table}
    assert by["good"]["winner"] and not by["base"]["winner"]
    lo, hi = by["good"]["goodput_interval"]
    assert lo < by["good"]["goodput_req_s"] < hi
    assert by["bad"]["status"] == "stopped early"
    md = report.markdown(out, slo, table, "t")
    assert "**good**" in md and "x the baseline" in md
    page = report.page(out, slo, table, "t")
    assert page.count("<svg") == 1 and "SLO tpot_p95 50 ms" in page


def test_frontier_keeps_only_undominated_points() -> None:
    from forklift.tune.report import _frontier

    pts = [(10.0, 5.0, "a"), (20.0, 8.0, "b"), (15.0, 9.0, "c"), (5.0, 4.0, "d")]
    assert [p[2] for p in _frontier(pts)] == ["d", "a", "b"]


def test_baseline_win_reports_the_best_challenger() -> None:
    fake = Fake({"base": 1.0, "close": 0.95}, noise=0.01)
    out = search.run(cands("base", "close"), [W], fake, search.Options(budget_s=3000, max_runs=2, confirm=0),
                     clock=fake.clock)
    v = out.versus_baseline["w"]
    assert v["verdict"] == "baseline wins" and v["challenger"]["winner"] == "close"
    assert 0.9 < v["challenger"]["ratio"] < 1.0


def test_rerank_after_the_baseline_replaces_the_rest() -> None:
    fake = Fake({"base": 1.0, "planned": 0.9, "better": 2.0})
    seen: list[int] = []

    def rerank(base: search.Trial) -> list[Candidate]:
        seen.append(len(base.samples))
        return cands("base", "x", "better")[2:]

    out = search.run(cands("base", "planned"), [W], fake, search.Options(budget_s=3000, max_runs=2, confirm=0),
                     clock=fake.clock, rerank=rerank)
    assert seen == [2]  # once, with the baseline's runs
    assert [t.candidate.name for t in out.trials] == ["base", "better"]
    assert "start planned" not in fake.log and out.winner["w"] == "better"
    kept = search.run(cands("base", "planned"), [W], Fake({"base": 1.0, "planned": 0.9}),
                      search.Options(budget_s=3000, max_runs=1, confirm=0), rerank=lambda _: None)
    assert [t.candidate.name for t in kept.trials] == ["base", "planned"]
