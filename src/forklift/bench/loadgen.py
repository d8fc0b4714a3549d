"""The async load generator: warm-up, then one run per concurrency level, each cross-checked with /metrics."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal, cast

import httpx

from forklift.bench import server_metrics
from forklift.bench.client import StreamOutcome, completion_body, stream_request
from forklift.bench.config import BenchConfig
from forklift.bench.result import BenchResult, RequestRecord, RunResult, single_stream
from forklift.bench.roofline import planned_roofline
from forklift.bench.stats import inter_token_latencies
from forklift.bench.workload import Prompt, check_lengths, fixed_length_prompts, load_prompt_file
from forklift.endpoint import Endpoint, Target, Tokenizer, tokenizer_for
from forklift.errors import BenchError, EndpointError
from forklift.speculative import workload as spec_workload

_POOL_CAP = 256  # distinct prompts built up front when the count is open-ended (duration mode)


@dataclass(frozen=True)
class Served:
    """The target as the server described it: the model to load and the context it holds."""

    target: Target
    model: str
    max_model_len: int | None
    tokenizer: str = "none"


@dataclass(frozen=True)
class Progress:
    """Reported to ``on_event`` while running. ``total`` is None in duration mode."""

    phase: Literal["prepare", "warmup", "run", "done"]
    level: int
    concurrency: int | None
    done: int
    total: int | None
    elapsed_s: float
    duration_s: float | None
    failed: int = 0
    message: str = ""


OnEvent = Callable[[Progress], None]


def _noop(_: Progress) -> None:
    return None


def discover(endpoint: Endpoint, target: Target) -> Served:
    """The model to load (the one named, else the only one served) and the server's context length."""
    found = endpoint.discover(target.model)
    if not found.served:
        raise BenchError(f"{endpoint.where} does not serve {found.model!r} (it serves {', '.join(found.names)})",
                         fix=f"Pass --model {found.names[0]}." if found.names else "Check the server's startup log.")
    return Served(target, found.model, found.max_model_len or target.max_model_len)


def build_prompts(config: BenchConfig, max_model_len: int | None, tok: Tokenizer | None) -> list[Prompt]:
    """Every prompt the benchmark will send, warm-up first; refuses ones that do not fit the context."""
    if config.prompts_file is not None:
        prompts = load_prompt_file(config.prompts_file, config.output_len, tok)
        check_lengths(prompts, max_model_len)
        return prompts
    if config.requests is not None and config.duration_s is None:
        count = config.warmup + config.requests * len(config.concurrency)
    else:
        count = _POOL_CAP
    if config.workload is not None:
        return repetitive_prompts(config, max_model_len, tok, min(count, 4 * _POOL_CAP))
    if tok is None:
        raise BenchError("fixed-length prompts need a tokenizer: the server has no /tokenize and the model's "
                         "tokenizer is not on this machine", fix="Pass --tokenizer PATH or --prompts FILE.")
    return fixed_length_prompts(tok, min(count, 4 * _POOL_CAP), config.input_len, config.output_len, config.seed)


def repetitive_prompts(config: BenchConfig, max_model_len: int | None, tok: Tokenizer | None,
                       count: int) -> list[Prompt]:
    """``count`` prompts of the repetitive workload, each over its own module (so prefix caching does not turn
    later requests into copies of the first), sized by the client's tokenizer when there is one."""
    kind = cast(spec_workload.Kind, config.workload)
    out = [Prompt(text=p.text, output_len=config.output_len,
                  prompt_tokens=len(tok.encode(p.text, special=True)) if tok is not None else None,
                  source=f"{kind}#{config.seed + i}")
           for i, p in enumerate(spec_workload.prompts(kind, count, seed=config.seed))]
    check_lengths(out, max_model_len)
    return out


def prepare(endpoint: Endpoint, target: Target, config: BenchConfig) -> tuple[Served, list[Prompt]]:
    """Discovery, the length check, the tokenizer and every prompt: everything before the first request."""
    served = discover(endpoint, target)
    _check_fixed_lengths(config, served.max_model_len)
    try:
        tok = tokenizer_for(endpoint, target, served.model)
    except EndpointError:
        if config.prompts_file is None and config.workload is None:
            raise
        tok = None  # a prompt file or a repetitive workload can run without client-side token counts
    served = replace(served, tokenizer=tok.source if tok else "none")
    return served, build_prompts(config, served.max_model_len, tok)


def _record(outcome: StreamOutcome, prompt: Prompt, t0: float) -> RequestRecord:
    usage = outcome.usage or {}
    server_out = usage.get("completion_tokens")
    server_in = usage.get("prompt_tokens")
    output_tokens = int(server_out) if isinstance(server_out, int) else len(outcome.chunk_times)
    client_in = prompt.prompt_tokens if prompt.prompt_tokens is not None else (
        int(server_in) if isinstance(server_in, int) else None)
    return RequestRecord(
        start=outcome.start - t0,
        prompt_tokens=client_in,
        output_tokens=output_tokens,
        chunks=len(outcome.chunk_times),
        ttft=outcome.ttft,
        e2e=outcome.e2e,
        itl=tuple(inter_token_latencies(outcome.chunk_times)),
        error=outcome.error,
        server_prompt_tokens=int(server_in) if isinstance(server_in, int) else None,
        server_output_tokens=int(server_out) if isinstance(server_out, int) else None,
    )


class _Level:
    """One run at one concurrency level."""

    def __init__(self, client: httpx.AsyncClient, model: str, config: BenchConfig, prompts: Iterator[Prompt],
                 index: int, concurrency: int | None, on_event: OnEvent) -> None:
        self.client = client
        self.model = model
        self.config = config
        self.prompts = prompts
        self.index = index
        self.concurrency = concurrency
        self.on_event = on_event
        self.records: list[RequestRecord] = []
        self.outcomes: list[tuple[StreamOutcome, Prompt]] = []
        self.fatal: str | None = None
        self.url = "/v1/completions"
        self.headers = {"Content-Type": "application/json"}

    def _progress(self, t0: float, phase: Literal["warmup", "run"], total: int | None) -> None:
        failed = sum(1 for r in self.records if not r.ok)
        self.on_event(Progress(phase, self.index, self.concurrency, len(self.records), total,
                               time.perf_counter() - t0, self.config.duration_s, failed))

    async def _one(self, prompt: Prompt, t0: float, sem: asyncio.Semaphore | None,
                   phase: Literal["warmup", "run"], total: int | None) -> None:
        try:
            body = completion_body(self.model, prompt.text, prompt.output_len,
                                   ignore_eos=self.config.ignore_eos)
            outcome = await stream_request(self.client, self.url, body, self.headers)
            self.outcomes.append((outcome, prompt))
            self.records.append(_record(outcome, prompt, t0))
            if outcome.fatal and self.fatal is None:
                self.fatal = f"server unreachable: {outcome.error}"
            self._progress(t0, phase, total)
        finally:
            if sem is not None:
                sem.release()

    async def run(self, count: int | None, duration_s: float | None,
                  phase: Literal["warmup", "run"] = "run") -> float:
        """Issue requests until the count or the duration is reached or the server dies; returns seconds."""
        sem = asyncio.Semaphore(self.concurrency) if self.concurrency is not None else None
        rng = random.Random(self.config.seed + self.index)
        rate = self.config.rate if phase == "run" else None
        t0 = time.perf_counter()
        deadline = t0 + duration_s if duration_s is not None else None
        tasks: list[asyncio.Task[None]] = []
        issued = 0
        next_at = t0
        self._progress(t0, phase, count)
        while (count is None or issued < count) and self.fatal is None:
            if rate is not None:
                next_at += rng.expovariate(rate)
                delay = next_at - time.perf_counter()
                if deadline is not None and next_at >= deadline:
                    break
                if delay > 0:
                    await asyncio.sleep(delay)
            if sem is not None:
                if deadline is None:
                    await sem.acquire()
                else:
                    try:
                        await asyncio.wait_for(sem.acquire(), timeout=max(deadline - time.perf_counter(), 0.0))
                    except TimeoutError:
                        break
            if self.fatal is not None or (deadline is not None and time.perf_counter() >= deadline):
                if sem is not None:
                    sem.release()
                break
            tasks.append(asyncio.create_task(self._one(next(self.prompts), t0, sem, phase, count)))
            issued += 1
        if tasks:
            await asyncio.gather(*tasks)
        return time.perf_counter() - t0


async def _scrape(endpoint: Endpoint, model: str) -> tuple[server_metrics.Snapshot | None, str | None]:
    return await asyncio.to_thread(server_metrics.scrape, endpoint, model)


async def _counters(endpoint: Endpoint, model: str, before: server_metrics.Snapshot | None, before_note: str | None,
                    records: Sequence[RequestRecord], fatal: str | None) -> server_metrics.CounterCheck:
    """Compare the client's totals with the counter deltas, re-scraping briefly while the server catches up."""
    client_prompt = sum(r.prompt_tokens or 0 for r in records if r.ok or r.chunks)
    client_gen = sum(r.output_tokens for r in records)
    if before is None:
        return server_metrics.compare(None, None, client_prompt, client_gen, note=before_note)
    check = server_metrics.compare(before, None, client_prompt, client_gen)
    for attempt in range(6):
        after, why = await _scrape(endpoint, model)
        if after is None:
            note = why if fatal is None else f"{why} (after: {fatal})"
            return server_metrics.compare(None, None, client_prompt, client_gen, note=note)
        note = "includes failed requests; the server may have counted tokens the client never saw" if fatal else None
        check = server_metrics.compare(before, after, client_prompt, client_gen, note=note)
        if check.match is not False:
            break
        await asyncio.sleep(0.2 * (attempt + 1))  # counters are updated just after the last chunk is sent
    return check


def _check_fixed_lengths(config: BenchConfig, max_model_len: int | None) -> None:
    """Refuse fixed lengths the context cannot hold, before building any prompt."""
    if config.prompts_file is not None or config.workload is not None or max_model_len is None:
        return
    if config.input_len + config.output_len > max_model_len:
        raise BenchError(
            f"input {config.input_len} + output {config.output_len} = {config.input_len + config.output_len} "
            f"tokens exceeds the server's max_model_len {max_model_len}",
            fix=f"Lower --output-len or --input-len so that input + output <= {max_model_len}.")


async def _warm_up(client: httpx.AsyncClient, served: Served, config: BenchConfig, prompts: Iterator[Prompt],
                   emit: OnEvent) -> None:
    warm = _Level(client, served.model, config, prompts, -1, 1, emit)
    await warm.run(config.warmup, None, phase="warmup")
    if warm.fatal:
        raise BenchError(f"warm-up failed: {warm.fatal}", fix="Check the server with `forklift status`.")
    bad = [r.error for r in warm.records if r.error]
    if bad and len(bad) == len(warm.records):
        raise BenchError(f"every warm-up request failed: {bad[0]}",
                         fix="Check the model name, lengths and the server log.")


async def _levels(endpoint: Endpoint, served: Served, config: BenchConfig, prompts: list[Prompt],
                  emit: OnEvent) -> tuple[list[RunResult], str | None, list[int | None]]:
    """Warm-up, then each concurrency level; a server that dies ends the run (later levels are skipped)."""
    cycle = itertools.cycle(prompts)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(config.request_timeout_s, connect=10.0)
    runs: list[RunResult] = []
    aborted: str | None = None
    skipped: list[int | None] = []
    async with endpoint.async_client(timeout=timeout, limits=limits) as client:
        if config.warmup:
            await _warm_up(client, served, config, cycle, emit)
        for index, conc in enumerate(config.concurrency):
            if aborted is not None:
                skipped.append(conc)
                continue
            before, before_note = await _scrape(endpoint, served.model)
            level = _Level(client, served.model, config, cycle, index, conc, emit)
            duration = await level.run(config.requests, config.duration_s)
            counters = await _counters(endpoint, served.model, before, before_note, level.records, level.fatal)
            runs.append(RunResult(concurrency=conc, rate=config.rate, duration_s=duration,
                                  records=tuple(sorted(level.records, key=lambda r: r.start)), slo=config.slo,
                                  counters=counters, partial=level.fatal is not None, stop_reason=level.fatal))
            aborted = level.fatal
    return runs, aborted, skipped


async def run_async(config: BenchConfig, target: Target, on_event: OnEvent | None = None) -> BenchResult:
    """Run the whole benchmark. Raises BenchError (or EndpointError) only when it cannot start; a server that dies
    mid-run gives a result with ``aborted`` set and the finished requests kept (their run marked ``partial``)."""
    config.validate()
    emit = on_event or _noop
    started = time.time()
    with Endpoint.of(target) as endpoint:
        emit(Progress("prepare", 0, None, 0, None, 0.0, None, message="building prompts"))
        served, prompts = await asyncio.to_thread(prepare, endpoint, target, config)
        runs, aborted, skipped = await _levels(endpoint, served, config, prompts, emit)
    emit(Progress("done", len(runs), None, 0, None, time.time() - started, None))
    roofline = planned_roofline(target.record)
    return BenchResult(
        target={"base_url": target.base_url, "model": served.model, "run": target.run_name,
                "max_model_len": served.max_model_len, "tokenizer": served.tokenizer,
                "start": target.record.run_id if target.record is not None else None},
        settings=config.to_json(),
        runs=tuple(runs),
        single_stream=single_stream(runs, roofline.decode_tok_s, roofline.source),
        started_at=started,
        aborted=aborted,
        skipped_levels=tuple(skipped),
    )


def run(config: BenchConfig, target: Target, on_event: OnEvent | None = None) -> BenchResult:
    """Synchronous wrapper of :func:`run_async` (must not be called from a running event loop)."""
    return asyncio.run(run_async(config, target, on_event))
