"""The SLO text and the shipped workloads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import TuneError
from forklift.tune import slo as slo_mod
from forklift.tune import workloads


def test_slo_parses_units_and_percentiles() -> None:
    s = slo_mod.parse("ttft_p95=2s, tpot_p99=80ms,e2e_p50=1500")
    assert [(x.metric, x.q, x.ms) for x in s.limits] == [("ttft", 95, 2000.0), ("tpot", 99, 80.0),
                                                          ("e2e", 50, 1500.0)]
    per = s.per_request()
    assert (per.ttft_ms, per.tpot_ms, per.e2e_ms) == (2000.0, 80.0, 1500.0)


@pytest.mark.parametrize("text, named", [("ttft=100", "ttft=100"), ("itl_p95=5", "itl_p95"), ("ttft_p95=fast", "fast"),
                                         ("ttft_p0=5", "p0"), ("ttft_p95=0", "above zero"), ("", "no limit"),
                                         ("ttft_p95=1,ttft_p95=2", "twice")])
def test_slo_errors_name_the_item(text: str, named: str) -> None:
    with pytest.raises(TuneError) as err:
        slo_mod.parse(text)
    assert named in str(err.value)
    assert err.value.fix


def test_slo_met_at_its_percentile() -> None:
    s = slo_mod.parse("tpot_p90=50")
    fast = [10.0] * 9 + [500.0]  # p90 interpolates between 10 and 500: 59 ms
    assert not s.met({"tpot": fast})
    assert s.met({"tpot": [10.0] * 19 + [500.0]})  # p90 = 10
    assert not s.met({"tpot": []})


def test_rag_and_agent_share_prefixes_chat_does_not() -> None:
    rag = workloads.synthetic("rag", count=16)
    firsts = {r.prompt.split("\n\n")[0] for r in rag.requests}
    assert len(firsts) == 4 and rag.shared_prefix
    agent = workloads.synthetic("agent", count=16)
    system = agent.requests[0].prompt.split("\n")[0]
    assert all(r.prompt.startswith(system) for r in agent.requests)
    # a session's later turn repeats its earlier turn
    assert agent.requests[8].prompt.startswith(agent.requests[0].prompt.rsplit("\n", 1)[0])
    chat = workloads.synthetic("chat", count=16)
    assert not chat.shared_prefix and len({r.prompt[:40] for r in chat.requests}) == 16


def test_synthetic_is_seeded_and_scaled() -> None:
    a, b = workloads.synthetic("code", count=8, seed=3), workloads.synthetic("code", count=8, seed=3)
    assert a.requests == b.requests
    half = workloads.synthetic("chat", count=64, size=0.5)
    full = workloads.synthetic("chat", count=64)
    assert half.mean_words < 0.7 * full.mean_words
    capped = workloads.synthetic("rag", count=8, max_prompt_words=200)
    assert max(len(r.prompt.split()) for r in capped.requests) <= 200


def test_unknown_class_and_replay(tmp_path: Path) -> None:
    with pytest.raises(TuneError, match="neither a workload class"):
        workloads.resolve("chit-chat")
    with pytest.raises(TuneError, match="did you mean 'chat'"):
        workloads.resolve("chatt")
    f = tmp_path / "trace.jsonl"
    f.write_text(json.dumps({"prompt": "hi", "max_tokens": 7}) + "\n\n" + json.dumps({"prompt": "yo"}) + "\n")
    w = workloads.resolve(str(f), concurrency=3)
    assert (w.concurrency, [r.output_len for r in w.requests]) == (3, [7, 128])
    f.write_text('{"prompt": ""}\n')
    with pytest.raises(TuneError, match="trace.jsonl:1"):
        workloads.resolve(str(f))


def test_written_jsonl_loads_in_bench(tmp_path: Path) -> None:
    from forklift.bench.workload import load_prompt_file

    w = workloads.synthetic("agent", count=5)
    got = load_prompt_file(w.write_jsonl(tmp_path / "a.jsonl"), 1, None)
    assert [(p.text, p.output_len) for p in got] == [(r.prompt, r.output_len) for r in w.requests]


def test_bad_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from forklift.tune import flow

    def req(**kw: Any) -> flow.Request:
        base: dict[str, Any] = {"recipe": "default", "workloads": ("chat",), "slo": "tpot_p95=50",
                                   "budget_min": 5.0, "out_dir": tmp_path / "out"}
        return flow.Request(**(base | kw))

    for bad, match in ((req(prior_noise=9.0), "prior-noise"), (req(budget_min=0.5), "too short"),
                       (req(candidates=("max_num_seqs=4",)), "not serve.KEY=VALUE"),
                       (req(workloads=("nope",)), "neither a workload class")):
        with pytest.raises(TuneError, match=match):
            flow.run(bad)
    assert not (tmp_path / "out").exists()
    dry = flow.run(req(dry_run=True, workloads=("rag",)))
    assert dry.outcome is None and dry.space.candidates[0].is_baseline and len(dry.space.candidates) > 1


def test_summarize_documents_are_distinct_and_long(tmp_path: Path) -> None:
    w = workloads.synthetic("summarize", count=32)
    assert not w.shared_prefix and w.concurrency == 8
    assert len({r.prompt.split(": ", 1)[1][:60] for r in w.requests}) == 32  # no two documents begin alike
    assert min(len(r.prompt.split()) for r in w.requests) >= 500 and w.mean_words > 700
    assert all(32 <= r.output_len <= 128 for r in w.requests)
    capped = workloads.synthetic("summarize", count=8, size=4.0, max_prompt_words=1000)
    assert max(len(r.prompt.split()) for r in capped.requests) <= 1000


def test_jsonl_can_begin_at_a_later_request(tmp_path: Path) -> None:
    w = workloads.synthetic("chat", count=5)
    lines = [json.loads(x)["prompt"] for x in w.write_jsonl(tmp_path / "a.jsonl", 7).read_text().splitlines()]
    assert lines == [r.prompt for r in w.requests[2:] + w.requests[:2]]  # 7 wraps to 2
