"""The supervisor's pure decisions: backoff, the cap per window, deterministic start failures, the memory gate,
and the recipe section they read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from forklift.recipe.schema import DockerRuntime, Recipe, Supervise
from forklift.supervise import policy

GIB = 1 << 30


def cfg(**kw: object) -> Supervise:
    return Supervise.model_validate({"backoff_s": 10, "backoff_max_s": 60, "max_restarts": 3, "window_s": 600, **kw})


def test_backoff_doubles_per_restart_in_the_window_and_is_capped() -> None:
    c = cfg()
    assert [policy.backoff_s(n, c) for n in range(5)] == [10, 20, 40, 60, 60]
    assert policy.backoff_s(500, c) == 60  # no overflow for a long history


def test_restarts_outside_the_window_do_not_count() -> None:
    assert policy.restarts_in_window([0.0, 100.0, 650.0, 700.0], now=710.0, window_s=600) == 2


def test_restart_until_the_cap_then_give_up() -> None:
    c = cfg(max_restarts=2)
    first = policy.next_step([], [], 1000.0, c)
    assert first.action == "restart" and first.wait_s == 10 and "1 of 2" in first.why
    second = policy.next_step([900.0], [], 1000.0, c)
    assert second.action == "restart" and second.wait_s == 20
    third = policy.next_step([900.0, 950.0], [], 1000.0, c)
    assert third.action == "give-up" and "2 restart(s) within 600 s" in third.why
    later = policy.next_step([900.0, 950.0], [], 1560.0, c)  # the first one left the window
    assert later.action == "restart"


def test_zero_restarts_allowed_gives_up_at_once() -> None:
    assert policy.next_step([], [], 0.0, cfg(max_restarts=0)).action == "give-up"


def test_the_same_startup_finding_twice_in_a_row_is_deterministic() -> None:
    oom = "CUDA out of memory (oom): lower gpu_memory_utilization"
    assert not policy.deterministic([oom])
    assert policy.deterministic(["rank 1 on b exited during startup (pid 4242)", "rank 1 on b exited during startup "
                                 "(pid 5151)"])  # only the numbers differ
    assert not policy.deterministic([oom, "port 8000 is in use"])
    assert policy.deterministic(["port 8000 is in use", oom, oom])
    step = policy.next_step([], [oom, oom], 0.0, cfg())
    assert step.action == "give-up" and "twice in a row" in step.why and oom in step.why


def test_memory_came_back_within_the_margin() -> None:
    base = {"a": 100 * GIB, "b": 100 * GIB}
    ok = policy.memory_back(base, {"a": 99 * GIB, "b": 120 * GIB}, margin_gib=2)
    assert ok.ok and not ok.short
    short = policy.memory_back(base, {"a": 90 * GIB, "b": 99 * GIB}, margin_gib=2)
    assert not short.ok and short.short == {"a": 8 * GIB}
    text = short.describe(base, {"a": 90 * GIB, "b": 99 * GIB}, 2)
    assert text == "a: MemAvailable 90.0 GiB, 100.0 GiB before the start (margin 2 GiB)"
    unread = policy.memory_back(base, {"a": 100 * GIB, "b": None}, margin_gib=2)
    assert not unread.ok and unread.unknown == ["b"]
    assert policy.memory_back({}, {"a": 1}, margin_gib=0).ok  # no baseline: nothing to compare


def test_which_hosts_the_memory_gate_reads() -> None:
    hosts, unified = ["spark1", "h100"], [True, False]
    assert policy.gated_hosts(hosts, unified, "auto") == ["spark1"]
    assert policy.gated_hosts(hosts, unified, "always") == hosts
    assert policy.gated_hosts(hosts, unified, "never") == []


def test_recipe_supervise_section_is_typed_and_refuses_unknown_keys() -> None:
    base = {"model": {"source": "bundled:smollm2-135m-instruct"}}
    r = Recipe.model_validate({**base, "supervise": {"interval_s": 5, "on_event": ["notify", "--urgent"]}})
    assert r.supervise.interval_s == 5 and r.supervise.on_event == ["notify", "--urgent"]
    assert Recipe.model_validate(base).supervise.max_restarts == 3
    assert Recipe.model_validate({**base, "supervise": {"on_event": "https://hooks.example/x"}}).supervise.on_event
    for bad, words in [({"intervall_s": 5}, "intervall_s"), ({"interval_s": 0}, "greater than 0"),
                       ({"on_event": "notify me"}, "argv list"), ({"on_event": []}, "must name a program"),
                       ({"backoff_s": 60, "backoff_max_s": 10}, "below backoff_s")]:
        with pytest.raises(ValidationError, match=words):
            Recipe.model_validate({**base, "supervise": bad})


def test_a_container_restart_policy_is_refused() -> None:
    with pytest.raises(ValidationError, match="supervise"):
        DockerRuntime(image="vllm/vllm-openai", extra_docker_args=["--restart=always"])
    with pytest.raises(ValidationError, match="restart policy"):
        DockerRuntime(image="vllm/vllm-openai", extra_docker_args=["--restart", "unless-stopped"])
    assert DockerRuntime(image="x", extra_docker_args=["--shm-size", "1g"]).extra_docker_args
