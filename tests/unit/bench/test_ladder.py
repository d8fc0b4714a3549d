"""The ladder's cell plan, its metrics on hand-timed requests, and its files read back the way llama-benchy's are.

The readers below are written from llama-benchy itself (github.com/eugr/llama-benchy at ae09cab):
``schemas/benchmark_report_schema.json`` (required keys of the report and of each run, a metric's
``mean``/``std``/``values``), ``results.py``'s markdown headers and CSV field names, and its README's test names
(``pp2048 @ d4096 (c2)``). They do not import forklift's constants, so a drift from the format fails here.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, cast

import pytest

from forklift.bench import ladder
from forklift.bench.config import BenchConfig
from forklift.bench.ladder import Cell, LadderConfig, LadderReport, LadderRun, Metric
from forklift.bench.result import BenchResult, RequestRecord, RunResult, SingleStream
from forklift.bench.stats import Slo
from forklift.errors import BenchError

# --- llama-benchy's format, copied from its schema and results.py (not from forklift) -------------------------------

REPORT_REQUIRED = ["version", "timestamp", "latency_mode", "latency_ms", "model", "prefix_caching_enabled",
                   "max_concurrency", "benchmarks"]
RUN_REQUIRED = ["concurrency", "context_size", "prompt_size", "response_size", "is_context_prefill_phase"]
RUN_METRICS = ["pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput", "peak_throughput",
               "peak_req_throughput", "ttfr", "est_ppt", "e2e_ttft"]
MD_HEADERS_MULTI = ["model", "test", "t/s (total)", "t/s (req)", "peak t/s", "peak t/s (req)", "ttfr (ms)",
                    "est_ppt (ms)", "e2e_ttft (ms)"]
MD_HEADERS_SINGLE = ["model", "test", "t/s", "peak t/s", "ttfr (ms)", "est_ppt (ms)", "e2e_ttft (ms)"]
CSV_FIELDS = ["model", "test_name", "t_s_mean", "t_s_std", "t_s_req_mean", "t_s_req_std", "peak_ts_mean",
              "peak_ts_std", "peak_ts_req_mean", "peak_ts_req_std", "ttfr_mean", "ttfr_std", "est_ppt_mean",
              "est_ppt_std", "e2e_ttft_mean", "e2e_ttft_std"]


def read_report(text: str) -> dict[str, Any]:
    """Load a JSON report as llama-benchy's BenchmarkReport model would: required keys present, metrics shaped."""
    data = cast(dict[str, Any], json.loads(text))
    missing = [k for k in REPORT_REQUIRED if k not in data]
    assert not missing, missing
    for run in data["benchmarks"]:
        assert not [k for k in RUN_REQUIRED if k not in run]
        for name in RUN_METRICS:
            m = run.get(name)
            assert m is None or (set(m) >= {"mean", "std", "values"} and isinstance(m["values"], list))
    return data


def read_markdown(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """A pipe table: header, alignment rule (left first column, right the rest), rows."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    headers, rule, body = cells[0], cells[1], cells[2:]
    assert rule[0].startswith(":") and all(r.endswith(":") for r in rule[1:])
    return headers, [dict(zip(headers, row, strict=True)) for row in body]


def mean_std(cell: str) -> tuple[float, float]:
    mean, std = cell.split(" ± ")
    return float(mean), float(std)


# --- the cell plan ----------------------------------------------------------------------------------------------


def test_plan_is_depth_major_and_skips_cells_past_the_context_with_the_reason() -> None:
    config = LadderConfig(depths=(0, 256, 4096), users=(1, 2), prompt_len=128, output_len=32)
    cells = ladder.plan(config, max_model_len=512)
    assert [(c.depth, c.users) for c in cells] == [(0, 1), (0, 2), (256, 1), (256, 2), (4096, 1), (4096, 2)]
    assert [c.skip is None for c in cells] == [True, True, True, True, False, False]
    # 4096 + 128 + 32 = 4256 tokens cannot fit 512
    assert cells[4].skip is not None and "4256" in cells[4].skip and "max_model_len 512" in cells[4].skip


def test_a_cell_exactly_at_the_context_fits_and_an_unknown_context_skips_nothing() -> None:
    config = LadderConfig(depths=(352, 353), users=(1,), prompt_len=128, output_len=32)  # 352 + 160 = 512
    assert [c.skip is None for c in ladder.plan(config, 512)] == [True, False]
    assert all(c.skip is None for c in ladder.plan(config, None))


def test_repeated_depths_and_users_are_measured_once() -> None:
    cells = ladder.plan(LadderConfig(depths=(0, 0, 64), users=(2, 2)), None)
    assert [(c.depth, c.users) for c in cells] == [(0, 2), (64, 2)]


def test_a_cell_runs_batches_of_users_with_the_context_in_front_of_the_prompt() -> None:
    cell = Cell(depth=256, users=4, prompt_len=128, output_len=32, runs=3)
    assert (cell.input_len, cell.requests) == (384, 12)


@pytest.mark.parametrize(("kw", "word"), [
    ({"depths": (-1,)}, "negative"), ({"users": (0,)}, "below 1"), ({"users": ()}, "user counts"),
    ({"output_len": 1}, "decode"), ({"runs": 0}, "--ladder-runs"), ({"prompt_len": 0}, "--input-len"),
])
def test_bad_ladders_are_refused_with_a_fix(kw: dict[str, Any], word: str) -> None:
    with pytest.raises(BenchError) as err:
        LadderConfig(**kw).validate()
    assert word in err.value.message and err.value.fix


def test_flags_build_the_ladder_and_plain_bench_load_flags_are_refused() -> None:
    config = LadderConfig.from_flags({"input_len": 32, "output_len": 8}, "0, 256", "1,2", 1)
    assert (config.depths, config.users, config.prompt_len, config.output_len, config.runs) == ((0, 256), (1, 2),
                                                                                                32, 8, 1)
    assert LadderConfig.from_flags({}, None, None, None).prompt_len == 2048  # llama-benchy's --pp default
    with pytest.raises(BenchError, match="--concurrency"):
        LadderConfig.from_flags({"concurrency": (1, 2)}, None, None, None)
    with pytest.raises(BenchError, match="--ladder-depths 'a,1'") as err:
        LadderConfig.from_flags({}, "a,1", None, None)
    assert err.value.fix


# --- metrics on requests timed by hand ----------------------------------------------------------------------------


def rec(start: float, ttft: float, prompt: int, itl: tuple[float, ...], error: str | None = None) -> RequestRecord:
    return RequestRecord(start=start, prompt_tokens=prompt, output_tokens=len(itl) + 1, chunks=len(itl) + 1,
                         ttft=ttft, e2e=ttft + sum(itl), itl=itl, error=error)


def test_one_user_reports_per_request_speeds() -> None:
    records = [rec(0.0, 0.5, 100, (0.1,) * 4), rec(1.0, 0.25, 100, (0.1,) * 4),
               rec(2.0, 0.1, 100, (0.1,), error="boom")]  # failed: left out
    m = ladder.measure(records, users=1)
    assert m["pp_throughput"] is not None
    # 100 tokens in 0.5 s and in 0.25 s: 200 and 400 t/s, mean 300, population std 100
    assert m["pp_throughput"].values == pytest.approx((200.0, 400.0))
    assert (m["pp_throughput"].mean, m["pp_throughput"].std) == pytest.approx((300.0, 100.0))
    # 5 tokens, the last 4 over 0.4 s: 10 t/s
    assert m["tg_throughput"] is not None and m["tg_throughput"].values == pytest.approx((10.0, 10.0))
    assert m["ttfr"] is not None and m["ttfr"].values == pytest.approx((500.0, 250.0))
    assert m["est_ppt"] == m["ttfr"] == m["e2e_ttft"]


def test_two_users_report_batch_totals_beside_per_request_speeds() -> None:
    # one batch: both sent at 0; first tokens at 0.5 and 1.0; five chunks each, 0.1 s apart
    m = ladder.measure([rec(0.0, 0.5, 100, (0.1,) * 4), rec(0.0, 1.0, 100, (0.1,) * 4)], users=2)
    assert m["pp_throughput"] is not None and m["pp_throughput"].values == pytest.approx((200.0,))  # 200 tok / 1 s
    assert m["pp_req_throughput"] is not None and m["pp_req_throughput"].values == pytest.approx((200.0, 100.0))
    # 10 tokens less the 2 first ones, from the first first-token (0.5) to the last chunk (1.4): 8 / 0.9
    assert m["tg_throughput"] is not None and m["tg_throughput"].values == pytest.approx((8 / 0.9,))
    # all 10 chunks land within 0.9 s, shorter than the 1 s window: the burst's own rate
    assert m["peak_throughput"] is not None and m["peak_throughput"].values == pytest.approx((10 / 0.9,))


def test_peak_rate_counts_the_busiest_second() -> None:
    assert ladder.peak_rate([0.0, 0.2, 0.4, 1.5, 1.6, 3.0]) == pytest.approx(3.0)
    assert ladder.peak_rate([5.0]) is None


# --- the run loop, with a fake measurement --------------------------------------------------------------------------


def fake_result(config: BenchConfig, aborted: str | None = None) -> BenchResult:
    records = tuple(rec(float(i), 0.5, config.input_len, (0.1,) * (config.output_len - 1))
                    for i in range(config.requests or 0))
    run = RunResult(concurrency=config.concurrency[0], rate=None, duration_s=1.0, records=records, slo=Slo())
    return BenchResult(target={"model": "m"}, settings={}, runs=(run,),
                       single_stream=SingleStream(None, None, None, "x"), started_at=0.0, aborted=aborted)


def test_run_measures_what_fits_warms_once_and_stops_at_a_dead_server() -> None:
    seen: list[BenchConfig] = []

    def measure_cell(config: BenchConfig) -> BenchResult:
        seen.append(config)
        return fake_result(config, aborted="server unreachable" if len(seen) == 2 else None)

    config = LadderConfig(depths=(0, 64, 4096), users=(1, 2), prompt_len=16, output_len=4, runs=2, warmup=1)
    report = ladder.run(config, measure_cell, max_model_len=1024, model="m")
    assert [(c.concurrency, c.input_len, c.requests) for c in seen] == [((1,), 16, 2), ((2,), 16, 4)]
    assert [c.warmup for c in seen] == [1, 0]
    assert len({c.seed for c in seen}) == 2  # distinct prompts per cell: no prefix shared across cells
    assert [(r.context_size, r.concurrency) for r in report.runs] == [(0, 1), (0, 2)]
    reasons = {(c.depth, c.users): c.skip or "" for c in report.skipped}
    assert "max_model_len 1024" in reasons[(4096, 1)]
    assert "not reached: server unreachable" in reasons[(64, 1)]
    assert report.aborted == "server unreachable" and not report.complete


# --- the files, read back --------------------------------------------------------------------------------------


def metric(mean: float, std: float, *values: float) -> Metric:
    return Metric(mean, std, values)


def sample_report() -> LadderReport:
    one = {"pp_throughput": metric(300.0, 100.0, 200.0, 400.0), "pp_req_throughput": metric(300.0, 100.0, 200.0, 400.0),
           "tg_throughput": metric(10.0, 0.0, 10.0, 10.0), "tg_req_throughput": metric(10.0, 0.0, 10.0, 10.0),
           "peak_throughput": metric(11.0, 1.0, 10.0, 12.0), "peak_req_throughput": None,
           "ttfr": metric(375.0, 125.0, 500.0, 250.0), "est_ppt": metric(375.0, 125.0, 500.0, 250.0),
           "e2e_ttft": metric(375.0, 125.0, 500.0, 250.0)}
    two: dict[str, Metric | None] = dict(one, tg_throughput=metric(18.5, 0.5, 18.0, 19.0))
    runs = (LadderRun(1, 0, 128, 32, one, 2, 0), LadderRun(2, 256, 128, 32, two, 4, 0))
    skipped = (Cell(8192, 1, 128, 32, 2, "too long"),)
    return LadderReport(model="smollm2", timestamp="2026-01-01 00:00:00Z", config=LadderConfig(), runs=runs,
                        skipped=skipped, max_model_len=4096)


def test_json_loads_as_a_llama_benchy_report_and_keeps_the_values() -> None:
    data = read_report(ladder.render(sample_report(), "json"))
    assert data["model"] == "smollm2" and data["max_concurrency"] == 2
    cells = [(b["context_size"], b["concurrency"], b["prompt_size"], b["response_size"]) for b in data["benchmarks"]]
    assert cells == [(0, 1, 128, 32), (256, 2, 128, 32)]
    assert data["benchmarks"][0]["pp_throughput"] == {"mean": 300.0, "std": 100.0, "values": [200.0, 400.0]}
    assert data["benchmarks"][0]["peak_req_throughput"] is None
    assert data["forklift"]["skipped"] == [{"context_size": 8192, "concurrency": 1, "reason": "too long"}]


def test_markdown_has_llama_benchys_columns_test_names_and_cells() -> None:
    headers, rows = read_markdown(ladder.render(sample_report(), "md"))
    assert headers == MD_HEADERS_MULTI
    assert [r["test"] for r in rows] == ["pp128 (c1)", "tg32 (c1)", "pp128 @ d256 (c2)", "tg32 @ d256 (c2)"]
    assert mean_std(rows[0]["t/s (total)"]) == (300.0, 100.0)
    assert mean_std(rows[0]["ttfr (ms)"]) == (375.0, 125.0)
    assert rows[1]["ttfr (ms)"] == "" and mean_std(rows[1]["peak t/s"]) == (11.0, 1.0)
    assert mean_std(rows[3]["t/s (total)"]) == (18.5, 0.5) and mean_std(rows[3]["t/s (req)"]) == (10.0, 0.0)


def test_markdown_of_single_user_cells_uses_the_single_stream_columns() -> None:
    rep = sample_report()
    single = LadderReport(model=rep.model, timestamp=rep.timestamp, config=LadderConfig(users=(1,)),
                          runs=rep.runs[:1])
    headers, rows = read_markdown(ladder.markdown(single))
    assert headers == MD_HEADERS_SINGLE
    assert [r["test"] for r in rows] == ["pp128", "tg32"]  # no (cN) when every cell is one user


def test_csv_has_llama_benchys_fields_and_round_trips() -> None:
    reader = csv.DictReader(io.StringIO(ladder.render(sample_report(), "csv")))
    assert reader.fieldnames == CSV_FIELDS
    rows = list(reader)
    assert [r["test_name"] for r in rows] == ["pp128 (c1)", "tg32 (c1)", "pp128 @ d256 (c2)", "tg32 @ d256 (c2)"]
    assert (float(rows[0]["t_s_mean"]), float(rows[0]["t_s_std"])) == (300.0, 100.0)
    assert rows[0]["peak_ts_mean"] == "" and float(rows[1]["peak_ts_mean"]) == 11.0
    assert rows[1]["ttfr_mean"] == ""


def test_write_picks_the_format_by_suffix_and_refuses_others(tmp_path: Path) -> None:
    written = ladder.write_all(sample_report(), tmp_path)
    assert sorted(p.name for p in written.values()) == ["ladder.csv", "ladder.json", "ladder.md"]
    read_report(written["json"].read_text())
    with pytest.raises(BenchError) as err:
        ladder.write(sample_report(), tmp_path / "ladder.txt")
    assert ".txt" in err.value.message and err.value.fix
