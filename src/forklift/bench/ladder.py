"""``forklift bench --ladder``: a context-depth x concurrency ladder, written in llama-benchy's format.

Each cell (``depth`` tokens of prior context x ``users`` concurrent streams) is one run of forklift's own load
generator (:func:`forklift.bench.loadgen.run`) with fixed-length prompts of ``depth + prompt_len`` tokens and
``output_len`` generated tokens. Cells that cannot fit the server's max_model_len are skipped, with the reason.

The output follows llama-benchy (github.com/eugr/llama-benchy, read at commit ae09cab, 2026-02-07):

- ``src/llama_benchy/results.py``: ``BenchmarkReport`` (JSON: ``version, timestamp, latency_mode, latency_ms,
  model, prefix_caching_enabled, max_concurrency, benchmarks``), ``BenchmarkRun`` (``concurrency, context_size,
  prompt_size, response_size, is_context_prefill_phase`` and the metrics ``pp_throughput, pp_req_throughput,
  tg_throughput, tg_req_throughput, peak_throughput, peak_req_throughput, ttfr, est_ppt, e2e_ttft``, each
  ``{mean, std, values}``); the markdown table (``model | test | t/s | peak t/s | ttfr (ms) | est_ppt (ms) |
  e2e_ttft (ms)``, with ``t/s (total)`` and ``t/s (req)``, ``peak t/s (req)`` when the highest concurrency is
  above 1; cells ``mean ± std`` to two decimals); the CSV header (``model, test_name, t_s_mean, t_s_std, ...``);
  test names ``pp2048 @ d4096 (c2)`` / ``tg32 @ d4096 (c2)``.
- ``schemas/benchmark_report_schema.json``: the required keys above. ``README.md``: the metric definitions.

How forklift's measurements map onto llama-benchy's (its runner repeats ``--runs`` batches of ``c`` simultaneous
requests; forklift's load generator keeps ``c`` streams busy, so a cell's requests sorted by start are cut into
consecutive batches of ``c``, ``runs`` of them):

- ``ttfr`` and ``e2e_ttft``: forklift's TTFT (send to the first chunk carrying text; on /v1/completions the
  first response chunk already carries text, so the two coincide). ``latency_mode`` is ``none`` (latency 0), so
  ``est_ppt`` equals ``ttfr``.
- per request: ``pp = (depth + prompt) tokens / est_ppt``; ``tg = (output - 1) / (last chunk - first chunk)``.
- per batch: ``pp = batch prompt tokens / (last first-token - first start)``; ``tg = (batch output - requests) /
  (last chunk - first first-token)``; peak = most chunks in any 1 s window (chunks stand for tokens: one token
  per chunk without speculative decoding).
- ``pp_throughput``/``tg_throughput`` are the per-request values at concurrency 1 and the per-batch values above
  it; mean and population std over the values, as llama-benchy computes them.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.bench import stats
from forklift.bench.config import BenchConfig, parse_counts
from forklift.bench.result import BenchResult, RequestRecord
from forklift.errors import BenchError
from forklift.version import __version__

if TYPE_CHECKING:
    from forklift.bench.loadgen import OnEvent
    from forklift.endpoint import Target

DEFAULT_DEPTHS = (0, 4096, 16384)
DEFAULT_USERS = (1, 2, 4, 8)
DEFAULT_PROMPT_LEN = 2048  # llama-benchy's --pp default
DEFAULT_OUTPUT_LEN = 32  # llama-benchy's --tg default
DEFAULT_RUNS = 3  # llama-benchy's --runs default
PEAK_WINDOW_S = 1.0

METRICS = ("pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput", "peak_throughput",
           "peak_req_throughput", "ttfr", "est_ppt", "e2e_ttft")
CSV_HEADER = ("model", "test_name", "t_s_mean", "t_s_std", "t_s_req_mean", "t_s_req_std", "peak_ts_mean",
              "peak_ts_std", "peak_ts_req_mean", "peak_ts_req_std", "ttfr_mean", "ttfr_std", "est_ppt_mean",
              "est_ppt_std", "e2e_ttft_mean", "e2e_ttft_std")
FORMATS = {".md": "md", ".json": "json", ".csv": "csv"}
_NOT_WITH_LADDER = {"concurrency": "--concurrency", "requests": "--requests", "rate": "--rate",
                    "duration_s": "--duration", "prompts_file": "--prompts", "workload": "--workload",
                    "slo.ttft_ms": "--slo-ttft-ms", "slo.tpot_ms": "--slo-tpot-ms", "slo.e2e_ms": "--slo-e2e-ms"}


@dataclass(frozen=True)
class LadderConfig:
    """The ladder: every depth x every user count, ``runs`` batches each, from one seed."""

    depths: tuple[int, ...] = DEFAULT_DEPTHS
    users: tuple[int, ...] = DEFAULT_USERS
    prompt_len: int = DEFAULT_PROMPT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    runs: int = DEFAULT_RUNS
    warmup: int = 1
    seed: int = 0

    def validate(self) -> None:
        if not self.depths:
            raise BenchError("no ladder depths given", fix="Pass --ladder-depths 0,4096,16384.")
        if not self.users:
            raise BenchError("no ladder user counts given", fix="Pass --ladder-users 1,2,4,8.")
        if any(d < 0 for d in self.depths):
            raise BenchError(f"--ladder-depths {','.join(map(str, self.depths))} has a negative depth",
                             fix="Pass depths of 0 or more, for example --ladder-depths 0,4096.")
        if any(u < 1 for u in self.users):
            raise BenchError(f"--ladder-users {','.join(map(str, self.users))} has a count below 1",
                             fix="Pass counts of 1 or more, for example --ladder-users 1,2,4,8.")
        if self.prompt_len < 1:
            raise BenchError(f"--input-len {self.prompt_len} is below 1", fix="Pass --input-len 1 or more.")
        if self.output_len < 2:
            raise BenchError(f"--output-len {self.output_len} leaves no decode to time",
                             fix="Pass --output-len 2 or more (llama-benchy's default is 32).")
        if self.runs < 1:
            raise BenchError(f"--ladder-runs {self.runs} is below 1", fix="Pass --ladder-runs 1 or more.")

    @classmethod
    def from_flags(cls, values: Mapping[str, Any], depths: str | None, users: str | None,
                   runs: int | None) -> LadderConfig:
        """A ladder from ``forklift bench``'s flag values (keyed by field path, None: not given) and the ladder's
        own. ``--input-len``/``--output-len`` set the prompt and output (llama-benchy's pp and tg; defaults
        2048 and 32, not the plain bench's); flags that shape a plain bench's load are refused."""
        clash = [name for path, name in _NOT_WITH_LADDER.items() if values.get(path) is not None]
        if clash:
            raise BenchError(f"{', '.join(clash)} shape a plain bench, not the ladder",
                             fix="Drop them; the ladder's load is --ladder-users, --ladder-depths and --ladder-runs.")
        kw: dict[str, Any] = {}
        for name, text in (("depths", depths), ("users", users)):
            if text is not None:
                try:
                    kw[name] = parse_counts(text)
                except ValueError as exc:
                    raise BenchError(f"--ladder-{name} {text!r}: {exc}",
                                     fix=f"For example --ladder-{name} "
                                         f"{'0,4096,16384' if name == 'depths' else '1,2,4,8'}.") from exc
        for key, path in (("prompt_len", "input_len"), ("output_len", "output_len"), ("warmup", "warmup"),
                          ("seed", "seed")):
            if values.get(path) is not None:
                kw[key] = int(values[path])
        if runs is not None:
            kw["runs"] = runs
        config = cls(**kw)
        config.validate()
        return config

    def to_json(self) -> dict[str, Any]:
        return {"depths": list(self.depths), "users": list(self.users), "prompt_len": self.prompt_len,
                "output_len": self.output_len, "runs": self.runs, "warmup": self.warmup, "seed": self.seed}


@dataclass(frozen=True)
class Cell:
    """One rung: ``depth`` tokens of context before a ``prompt_len``-token prompt, ``users`` streams at once."""

    depth: int
    users: int
    prompt_len: int
    output_len: int
    runs: int
    skip: str | None = None
    """Why the cell is not measured (None: it is)."""

    @property
    def input_len(self) -> int:
        return self.depth + self.prompt_len

    @property
    def requests(self) -> int:
        return self.runs * self.users


def plan(config: LadderConfig, max_model_len: int | None) -> list[Cell]:
    """Every cell in llama-benchy's order (depth, then concurrency); those that cannot fit carry the reason."""
    config.validate()
    cells = []
    for depth in dict.fromkeys(config.depths):
        for users in dict.fromkeys(config.users):
            need = depth + config.prompt_len + config.output_len
            skip = None
            if max_model_len is not None and need > max_model_len:
                skip = (f"depth {depth} + prompt {config.prompt_len} + output {config.output_len} = {need} tokens "
                        f"exceeds max_model_len {max_model_len}")
            cells.append(Cell(depth, users, config.prompt_len, config.output_len, config.runs, skip))
    return cells


@dataclass(frozen=True)
class Metric:
    """llama-benchy's ``BenchmarkMetric``: the values and their mean and population std."""

    mean: float
    std: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Metric | None:
        if not values:
            return None
        return cls(stats.mean(values), stats.pstdev(values), tuple(values))

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "values": list(self.values)}


@dataclass(frozen=True)
class LadderRun:
    """One measured cell as llama-benchy's ``BenchmarkRun``."""

    concurrency: int
    context_size: int
    prompt_size: int
    response_size: int
    metrics: dict[str, Metric | None]
    requests: int
    failed: int

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"concurrency": self.concurrency, "context_size": self.context_size,
                               "prompt_size": self.prompt_size, "response_size": self.response_size,
                               "is_context_prefill_phase": False}
        for name in METRICS:
            m = self.metrics.get(name)
            out[name] = None if m is None else m.to_json()
        return out


def _chunk_times(r: RequestRecord) -> list[float]:
    """Arrival times of a request's chunks on the run's clock."""
    assert r.ttft is not None
    t = r.start + r.ttft
    out = [t]
    for gap in r.itl:
        t += gap
        out.append(t)
    return out


def peak_rate(times: Sequence[float], window: float = PEAK_WINDOW_S) -> float | None:
    """Most events in any ``window``-second span, per second; a burst shorter than the window is its own rate."""
    if len(times) < 2:
        return None
    ts = sorted(times)
    span = ts[-1] - ts[0]
    if 0 < span < window:
        return len(ts) / span
    best, lo = 0, 0
    for hi, t in enumerate(ts):
        while ts[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best / window


def measure(records: Sequence[RequestRecord], users: int) -> dict[str, Metric | None]:
    """llama-benchy's metrics for one cell from forklift's request records (see the module docstring)."""
    ok = sorted((r for r in records if r.ok and r.prompt_tokens), key=lambda r: r.start)
    pp_req: list[float] = []
    tg_req: list[float] = []
    ttfr: list[float] = []
    peak_req: list[float] = []
    for r in ok:
        assert r.ttft is not None and r.prompt_tokens is not None
        ttfr.append(r.ttft * 1000.0)
        if r.ttft > 0:
            pp_req.append(r.prompt_tokens / r.ttft)
        times = _chunk_times(r)
        if r.output_tokens > 1 and times[-1] > times[0]:
            tg_req.append((r.output_tokens - 1) / (times[-1] - times[0]))
        if (p := peak_rate(times)) is not None:
            peak_req.append(p)
    pp_batch: list[float] = []
    tg_batch: list[float] = []
    peak_batch: list[float] = []
    for i in range(0, len(ok), users):
        batch = ok[i:i + users]
        all_times = [_chunk_times(r) for r in batch]
        first_start = min(r.start for r in batch)
        first_tokens = [t[0] for t in all_times]
        pp_span = max(first_tokens) - first_start
        if pp_span > 0:
            pp_batch.append(sum(r.prompt_tokens or 0 for r in batch) / pp_span)
        tg_span = max(t[-1] for t in all_times) - min(first_tokens)
        generated = sum(r.output_tokens for r in batch)
        if tg_span > 0 and generated > len(batch):
            tg_batch.append((generated - len(batch)) / tg_span)
        if (p := peak_rate([t for ts in all_times for t in ts])) is not None:
            peak_batch.append(p)
    single = users == 1
    return {
        "pp_throughput": Metric.of(pp_req if single else pp_batch),
        "pp_req_throughput": Metric.of(pp_req),
        "tg_throughput": Metric.of(tg_req if single else tg_batch),
        "tg_req_throughput": Metric.of(tg_req),
        "peak_throughput": Metric.of(peak_batch),
        "peak_req_throughput": Metric.of(peak_req),
        "ttfr": Metric.of(ttfr),
        "est_ppt": Metric.of(ttfr),  # latency_mode "none": nothing subtracted
        "e2e_ttft": Metric.of(ttfr),
    }


@dataclass(frozen=True)
class LadderReport:
    """The whole ladder: measured cells (llama-benchy's report) plus the cells skipped and why."""

    model: str
    timestamp: str
    config: LadderConfig
    runs: tuple[LadderRun, ...]
    skipped: tuple[Cell, ...] = ()
    max_model_len: int | None = None
    aborted: str | None = None
    target: dict[str, Any] = field(default_factory=dict)

    @property
    def max_concurrency(self) -> int:
        return max((r.concurrency for r in self.runs), default=max(self.config.users))

    @property
    def complete(self) -> bool:
        return self.aborted is None

    def to_json(self) -> dict[str, Any]:
        """llama-benchy's JSON report; forklift's extras (skipped cells, settings) under ``forklift``."""
        return {
            "version": f"forklift {__version__}",
            "timestamp": self.timestamp,
            "latency_mode": "none",
            "latency_ms": 0.0,
            "model": self.model,
            "prefix_caching_enabled": False,
            "max_concurrency": self.max_concurrency,
            "benchmarks": [r.to_json() for r in self.runs],
            "forklift": {
                "ladder": self.config.to_json(), "max_model_len": self.max_model_len, "aborted": self.aborted,
                "target": self.target,
                "skipped": [{"context_size": c.depth, "concurrency": c.users, "reason": c.skip} for c in self.skipped],
                "cells": [{"context_size": r.context_size, "concurrency": r.concurrency, "requests": r.requests,
                           "failed": r.failed} for r in self.runs],
            },
        }


def rows(report: LadderReport) -> list[dict[str, Any]]:
    """llama-benchy's table rows: a ``pp`` and a ``tg`` row per cell, ``(cN)`` appended when any cell has N > 1."""
    out: list[dict[str, Any]] = []
    suffix_on = report.max_concurrency > 1
    for run in report.runs:
        depth = f" @ d{run.context_size}" if run.context_size > 0 else ""
        conc = f" (c{run.concurrency})" if suffix_on else ""
        m = run.metrics
        if m.get("pp_throughput"):
            out.append({"model": report.model, "test_name": f"pp{run.prompt_size}{depth}{conc}",
                        "t_s": m["pp_throughput"], "t_s_req": m.get("pp_req_throughput"), "peak_ts": None,
                        "peak_ts_req": None, "ttfr": m.get("ttfr"), "est_ppt": m.get("est_ppt"),
                        "e2e_ttft": m.get("e2e_ttft")})
        if m.get("tg_throughput"):
            out.append({"model": report.model, "test_name": f"tg{run.response_size}{depth}{conc}",
                        "t_s": m["tg_throughput"], "t_s_req": m.get("tg_req_throughput"),
                        "peak_ts": m.get("peak_throughput"), "peak_ts_req": m.get("peak_req_throughput"),
                        "ttfr": None, "est_ppt": None, "e2e_ttft": None})
    return out


def _cell(metric: Metric | None) -> str:
    return "" if metric is None else f"{metric.mean:.2f} ± {metric.std:.2f}"


def markdown(report: LadderReport) -> str:
    """The pipe table llama-benchy prints and saves with ``--format md``."""
    many = report.max_concurrency > 1
    keys = ["t_s", "t_s_req", "peak_ts", "peak_ts_req"] if many else ["t_s", "peak_ts"]
    keys += ["ttfr", "est_ppt", "e2e_ttft"]
    headers = ["model", "test", "t/s (total)" if many else "t/s"]
    headers += ["t/s (req)", "peak t/s", "peak t/s (req)"] if many else ["peak t/s"]
    headers += ["ttfr (ms)", "est_ppt (ms)", "e2e_ttft (ms)"]
    body = [[r["model"], r["test_name"], *(_cell(r[k]) for k in keys)] for r in rows(report)]
    if not body:
        return "No results collected. Check if the model is generating tokens."
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    rule = "|" + "|".join(":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return "\n".join([line(headers), rule, *(line(row) for row in body)])


def csv_text(report: LadderReport) -> str:
    """The CSV llama-benchy saves with ``--format csv`` (empty cells where a row has no such metric)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_HEADER), lineterminator="\n")
    writer.writeheader()
    for r in rows(report):
        out: dict[str, Any] = {"model": r["model"], "test_name": r["test_name"]}
        for key in ("t_s", "t_s_req", "peak_ts", "peak_ts_req", "ttfr", "est_ppt", "e2e_ttft"):
            m = r[key]
            out[f"{key}_mean"] = None if m is None else m.mean
            out[f"{key}_std"] = None if m is None else m.std
        writer.writerow(out)
    return buf.getvalue()


def render(report: LadderReport, fmt: str) -> str:
    """The report as llama-benchy writes it: ``md``, ``json`` or ``csv``."""
    import json

    if fmt == "md":
        return markdown(report) + "\n"
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2) + "\n"
    if fmt == "csv":
        return csv_text(report)
    raise BenchError(f"unknown ladder format {fmt!r}", fix="Use md, json or csv.")


def write(report: LadderReport, path: Path) -> Path:
    """Write the report to ``path`` in the format its suffix names (.md, .json, .csv)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise BenchError(f"{path}: the ladder is written as .md, .json or .csv, not {path.suffix or 'no suffix'!r}",
                         fix="Pass --ladder-out with a .md, .json or .csv file name.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(report, fmt), encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"{path}: cannot write the ladder: {exc.strerror or exc}",
                         fix="Pass --ladder-out in a writable directory.") from exc
    return path


def write_all(report: LadderReport, out_dir: Path) -> dict[str, Path]:
    """``ladder.md``, ``ladder.json`` and ``ladder.csv`` in ``out_dir``."""
    return {fmt: write(report, out_dir / f"ladder.{fmt}") for fmt in ("md", "json", "csv")}


def cell_config(config: LadderConfig, cell: Cell, index: int, first: bool) -> BenchConfig:
    """The load generator's settings for one cell: its own seed, so no two cells share a prompt prefix."""
    return BenchConfig(concurrency=(cell.users,), input_len=cell.input_len, output_len=cell.output_len,
                       requests=cell.requests, warmup=config.warmup if first else 0,
                       seed=config.seed + 1009 * (index + 1))


Measure = Callable[[BenchConfig], BenchResult]


def run(config: LadderConfig, measure_cell: Measure, max_model_len: int | None, model: str,
        on_cell: Callable[[Cell, int, int], None] | None = None) -> LadderReport:
    """Measure every cell that fits with ``measure_cell`` (in use: :func:`forklift.bench.run` on one target).

    A server that dies ends the ladder: the cells not reached are listed as skipped with the reason, and the
    report's ``aborted`` says why."""
    cells = plan(config, max_model_len)
    todo = [c for c in cells if c.skip is None]
    skipped = [c for c in cells if c.skip is not None]
    runs: list[LadderRun] = []
    aborted: str | None = None
    target: dict[str, Any] = {}
    for index, cell in enumerate(todo):
        if aborted is not None:
            skipped.append(Cell(cell.depth, cell.users, cell.prompt_len, cell.output_len, cell.runs,
                                f"not reached: {aborted}"))
            continue
        if on_cell is not None:
            on_cell(cell, index, len(todo))
        result = measure_cell(cell_config(config, cell, index, first=index == 0))
        target = target or result.target
        for level in result.runs:
            runs.append(LadderRun(cell.users, cell.depth, cell.prompt_len, cell.output_len,
                                  measure(level.records, cell.users), len(level.records), level.failed))
        aborted = result.aborted
    return LadderReport(model=str(target.get("model", model)),
                        timestamp=time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()), config=config,
                        runs=tuple(runs), skipped=tuple(skipped), max_model_len=max_model_len, aborted=aborted,
                        target=target)


def run_on(config: LadderConfig, target: Target, on_cell: Callable[[Cell, int, int], None] | None = None,
           on_event: OnEvent | None = None) -> LadderReport:
    """The ladder on a live target (:class:`forklift.endpoint.Target`): asks the server its model and context
    length, then measures each cell with forklift's load generator."""
    from forklift.bench import loadgen
    from forklift.endpoint import Endpoint

    config.validate()
    with Endpoint.of(target) as endpoint:
        served = loadgen.discover(endpoint, target)

    def measure_cell(bench_config: BenchConfig) -> BenchResult:
        return loadgen.run(bench_config, target, on_event)

    return run(config, measure_cell, served.max_model_len, served.model, on_cell)
