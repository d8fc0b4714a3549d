"""Weights and images onto three namespace nodes (real sshd in each; a real dockerd in each for images).

forklift runs in node-a's namespace, as in the other cluster tests; a local Hub (tests/hubserver.py: the part of
the Hub's file API huggingface_hub uses, small on purpose; Hugging Face is not reachable) listens on node-a's
address, so every node downloads over the bridge. The model is a tiny PP=3 checkpoint (tests/modelgen.py): stage k's
node must hold exactly the embeddings shard, its own layer shard, the lm_head shard and the small files.

Measured MB/s per node are printed (run with -s to see them). Node-to-node ssh uses the test's own ssh_config
(the nodes share this filesystem) through ``--node-ssh-config``; without it, copies are relayed through node-a's
forklift.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster import dockerd, netns
from tests.cluster.netns import NetCluster
from tests.modelgen import expected_files, make_model, shard_name

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hf_cluster_secret_5e0b9d"
HOSTS = ["node-a", "node-b", "node-c"]
STAGE_SHARD = {i: shard_name(i + 2, 5) for i in range(3)}
REGISTRY = "10.231.0.1:5000"
REGISTRY_BIN = "/usr/bin/docker-registry"  # Debian's docker-registry (the distribution registry)


@dataclass
class Hub:
    url: str
    commit: str
    served: Path
    log: Path

    def requests(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"namespace cluster unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("transfer")
    tag = str(os.getpid() % 100000)
    cluster = netns.start(tmp, tag, n=3, sshd_env={i: {"DOCKER_HOST": f"unix:///run/fl-dk-{tag}{c}.sock"}
                                                   for i, c in enumerate("abc")})
    try:
        yield cluster
    finally:
        netns.stop(cluster)


@pytest.fixture(scope="module")
def hub(net: NetCluster) -> Iterator[Hub]:
    served = make_model(net.tmp / "served", layer_bytes=8 << 20)  # 16 MiB per stage shard
    log = net.tmp / "hub.jsonl"
    proc = subprocess.Popen(net.exec_argv(0, sys.executable, "-m", "tests.hubserver", "--bind", net.nodes[0].ip,
                                          "--port", "18080", "--repo", f"org/tiny={served}", "--log", str(log)),
                            cwd=REPO, stdout=subprocess.PIPE, text=True, env=dict(os.environ, HUBSERVER_TOKEN=TOKEN))
    assert proc.stdout is not None
    ready = proc.stdout.readline().split()
    try:
        yield Hub(ready[3], ready[2], served, log)
    finally:
        proc.terminate()
        proc.wait(10)


def _recipe(net: NetCluster, name: str, *, dirs: Path | None = None, hf_homes: Path | None = None,
            runtime: str | None = None, source: str = "org/tiny") -> Path:
    lines = []
    for i, node in enumerate(net.nodes):
        extra = ""
        if dirs is not None:
            extra = f", model_path: {dirs / HOSTS[i] / 'model'}"
        if hf_homes is not None:
            extra = f", env: {{HF_HOME: {hf_homes / HOSTS[i]}}}"
        lines.append(f"  - {{host: {HOSTS[i]}, ssh: {node.target}, data_ip: {node.ip}{extra}}}")
    path = net.tmp / f"{name}.yaml"
    path.write_text(f"""
model: {{source: "{source}"}}
runtime: {runtime or f"{{kind: venv, python: {sys.executable}}}"}
nodes:
{chr(10).join(lines)}
parallel: {{pp: 3}}
serve: {{host: 10.231.0.1, port: 8000, max_model_len: 512, cpu_kv_cache_gib: 1, enforce_eager: true}}
""")
    return path


def _env(net: NetCluster, hub: Hub | None = None) -> dict[str, str]:
    env = dict(os.environ, FORKLIFT_HOME=str(net.tmp / "home"), FORKLIFT_SSH_CONFIG=str(net.ssh_config),
               HF_HOME=str(net.tmp / "hf-here"), HF_HUB_DISABLE_XET="1")
    env.pop("FORKLIFT_NODE_SSH_CONFIG", None)
    if hub is not None:  # the Hub's small files go to a cache of this test's own
        env.update(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, FORKLIFT_CACHE=str(net.tmp / "cache"))
    return env


def _argv(net: NetCluster, *args: str) -> list[str]:
    return net.exec_argv(0, sys.executable, "-m", "forklift.cli.main", *args)


def forklift(net: NetCluster, *args: str, hub: Hub | None = None,
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(net, *args), capture_output=True, text=True, timeout=timeout,
                          env=_env(net, hub), cwd=REPO, check=False)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def _speeds(title: str, rows: list[dict[str, object]], key: str = "mb_s") -> None:
    print(f"\n{title}: " + ", ".join(f"{r['host']} {r.get(key)} MB/s" for r in rows))


def test_pull_pp3_each_node_gets_only_its_shards_verified(net: NetCluster, hub: Hub) -> None:
    dirs = net.tmp / "pull-each"
    before = len(hub.requests())
    res = forklift(net, "model", "pull", "--recipe", str(_recipe(net, "pull-each", dirs=dirs)), "--json", hub=hub)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["mode"] == "each" and report["commit"] == hub.commit
    for i, node in enumerate(report["nodes"]):
        folder = dirs / HOSTS[i] / "model"
        assert _files(folder) == expected_files(i), HOSTS[i]
        assert all(_sha(folder / f) == _sha(hub.served / f) for f in expected_files(i))
        assert node["verified"] == len(expected_files(i)) and node["downloaded"] == node["bytes"] > 0
        assert json.loads((folder / ".forklift" / "source.json").read_text())["commit"] == hub.commit
    _speeds("pull, each node from the Hub", report["nodes"])
    cdn = [r for r in hub.requests()[before:] if str(r["path"]).startswith("/cdn/")]
    assert {r["client"] for r in cdn} == {n.ip for n in net.nodes}  # every node fetched its own shards
    assert len(cdn) == 3 * 3  # three LFS shards per node: embeddings, its stage, lm_head
    outputs = res.stdout + res.stderr
    assert TOKEN not in outputs
    for path in net.tmp.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 50 << 20:
            assert TOKEN.encode() not in path.read_bytes(), path

    again = forklift(net, "model", "pull", "--recipe", str(_recipe(net, "pull-each", dirs=dirs)), "--json", hub=hub)
    assert again.returncode == 0, again.stderr
    assert [n["present"] for n in json.loads(again.stdout)["nodes"]] == [len(expected_files(i)) for i in range(3)]


def test_pull_via_one_node_fans_out_over_the_data_network(net: NetCluster, hub: Hub) -> None:
    homes = net.tmp / "pull-via"
    before = len(hub.requests())
    res = forklift(net, "model", "pull", "--recipe", str(_recipe(net, "pull-via", hf_homes=homes)), "--via", "node-b",
                   "--node-ssh-config", str(net.ssh_config), "--json", hub=hub)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["mode"] == "via" and report["via"] == "node-b"
    assert {r["client"] for r in hub.requests()[before:] if str(r["path"]).startswith("/cdn/")} == {net.nodes[1].ip}
    fanout = {n["host"]: n for n in report["fanout"]["nodes"]}
    assert {h: fanout[h]["method"] for h in ("node-a", "node-c")} == {"node-a": "rsync-node", "node-c": "rsync-node"}
    _speeds("pull via node-b, then node to node", list(fanout.values()))
    for i, node in enumerate(report["nodes"]):
        storage = homes / HOSTS[i] / "hub" / "models--org--tiny"
        assert (storage / "refs" / "main").read_text() == hub.commit
        snapshot = storage / "snapshots" / hub.commit
        expect = expected_files(i) if i != 1 else sorted({f for k in range(3) for f in expected_files(k)})
        assert sorted(p.name for p in snapshot.iterdir()) == expect
        assert all(_sha(snapshot / f) == _sha(hub.served / f) for f in expect)
        assert node["verified"] == len(expect) and not node["error"]
        if i != 1:
            assert node["via"] == "node-b" and node["downloaded"] == 0  # verified in place, nothing re-fetched


def _full_copy(net: NetCluster, root: Path, holder: int, hub: Hub) -> Path:
    folder = root / HOSTS[holder] / "model"
    folder.mkdir(parents=True)
    for f in hub.served.iterdir():
        shutil.copy2(f, folder / f.name)
    return folder


def _kill_rsync(target: Path) -> int:
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("rsync ") and str(target) in cmd:  # the transfers this test started, by their target
            os.kill(int(entry.name), signal.SIGKILL)
            killed += 1
    return killed


def test_sync_from_a_node_resumes_a_killed_transfer_and_catches_corruption(net: NetCluster, hub: Hub) -> None:
    root = net.tmp / "sync"
    _full_copy(net, root, 1, hub)
    recipe = str(_recipe(net, "sync", dirs=root))
    slow = subprocess.Popen(_argv(net, "model", "sync", recipe, "--node-ssh-config", str(net.ssh_config),
                                  "--bwlimit", "2", "--json"), env=_env(net), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    shard_c = root / "node-c" / "model" / STAGE_SHARD[2]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (shard_c.exists() and shard_c.stat().st_size > 2 << 20):
        time.sleep(0.2)
    assert shard_c.exists() and shard_c.stat().st_size > 2 << 20, "node-c's shard never started arriving"
    assert _kill_rsync(root / "node-c") >= 1 and _kill_rsync(root / "node-a") >= 1
    out, err = slow.communicate(timeout=120)
    assert slow.returncode == 1 and "node-c" in err, err
    partial = shard_c.stat().st_size
    assert 0 < partial < (hub.served / STAGE_SHARD[2]).stat().st_size
    have = {i: sum(p.stat().st_size for p in (root / HOSTS[i] / "model").iterdir() if p.is_file()) for i in (0, 2)}

    res = forklift(net, "model", "sync", recipe, "--node-ssh-config", str(net.ssh_config), "--json")
    assert res.returncode == 0, res.stderr
    nodes = {n["host"]: n for n in json.loads(res.stdout)["nodes"]}
    assert nodes["node-b"]["method"] == "source"
    for i in (0, 2):
        n = nodes[HOSTS[i]]
        assert n["method"] == "rsync-node" and n["transferred"] == n["bytes"] - have[i]  # resumed, not resent
        assert _files(root / HOSTS[i] / "model") == expected_files(i)
        assert all(_sha(root / HOSTS[i] / "model" / f) == _sha(hub.served / f) for f in expected_files(i))
    _speeds("sync node-b -> a, c (node to node, rsync over ssh)", list(nodes.values()))

    data = bytearray(shard_c.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard_c.write_bytes(bytes(data))  # same size: only a sha256 comparison finds it
    config_a = root / "node-a" / "model" / "config.json"
    config_a.write_text(config_a.read_text().replace('"llama"', '"llamb"'))  # same size, other sha256
    quick = json.loads(forklift(net, "model", "sync", recipe, "--node-ssh-config", str(net.ssh_config),
                                "--json").stdout)
    by_host = {n["host"]: n for n in quick["nodes"]}
    assert by_host["node-a"]["repaired"] == ["config.json"]  # config/index are always compared by sha256
    assert by_host["node-c"]["method"] == "skip"  # a shard is compared by size unless --verify
    full = forklift(net, "model", "sync", recipe, "--node-ssh-config", str(net.ssh_config), "--verify", "--json")
    assert full.returncode == 0, full.stderr
    by_host = {n["host"]: n for n in json.loads(full.stdout)["nodes"]}
    assert by_host["node-c"]["repaired"] == [STAGE_SHARD[2]] and by_host["node-a"]["method"] == "skip"
    assert _sha(shard_c) == _sha(hub.served / STAGE_SHARD[2])


def test_sync_without_node_to_node_ssh_relays_through_forklift_and_resumes(net: NetCluster, hub: Hub) -> None:
    root = net.tmp / "relay"
    _full_copy(net, root, 1, hub)
    shard_c = root / "node-c" / "model" / STAGE_SHARD[2]
    shard_c.parent.mkdir(parents=True)
    shard_c.write_bytes((hub.served / STAGE_SHARD[2]).read_bytes()[: 5 << 20])  # a transfer cut at 5 MiB
    res = forklift(net, "model", "sync", str(_recipe(net, "relay", dirs=root)), "--json")
    assert res.returncode == 0, res.stderr
    nodes = {n["host"]: n for n in json.loads(res.stdout)["nodes"]}
    for i in (0, 2):
        n = nodes[HOSTS[i]]
        assert n["method"] == "relay" and "ssh from node-b" in n["note"], n
        assert _files(root / HOSTS[i] / "model") == expected_files(i)
        assert all(_sha(root / HOSTS[i] / "model" / f) == _sha(hub.served / f) for f in expected_files(i))
    assert nodes["node-c"]["transferred"] == nodes["node-c"]["bytes"] - (5 << 20)
    _speeds("sync node-b -> a, c relayed through node-a's forklift", [nodes["node-a"], nodes["node-c"]])


@pytest.fixture(scope="module")
def daemons(net: NetCluster) -> Iterator[list[dockerd.Daemon]]:
    reason = dockerd.unavailable_reason()
    if reason:
        pytest.skip(reason)
    tag = str(os.getpid() % 100000)
    started: list[dockerd.Daemon] = []
    try:
        for i, c in enumerate("abc"):
            (net.tmp / f"dk{c}").mkdir()
            started.append(dockerd.start(net.nodes[i].ns, net.tmp / f"dk{c}", f"{tag}{c}",
                                         extra_args=["--insecure-registry", REGISTRY]))
        yield started
    finally:
        for d in started:
            dockerd.stop(d)


def _image_id(d: dockerd.Daemon, image: str) -> str | None:
    res = d.docker("image", "inspect", "--format", "{{.Id}}", image, check=False)
    return res.stdout.strip() if res.returncode == 0 else None


def _loads_since(d: dockerd.Daemon, since: float) -> int:
    res = d.docker("events", "--since", str(int(since)), "--until", str(int(time.time()) + 1), "--filter",
                   "type=image", "--filter", "event=load", "--format", "{{.Action}}")
    return len(res.stdout.split())


def test_image_reaches_only_the_nodes_that_lack_it(net: NetCluster, daemons: list[dockerd.Daemon]) -> None:
    a, b, c = daemons
    dockerd.build_image(a)
    dockerd.copy_image(a, c)
    digest = _image_id(a, dockerd.IMAGE)
    assert digest and _image_id(c, dockerd.IMAGE) == digest and _image_id(b, dockerd.IMAGE) is None
    recipe = str(_recipe(net, "image"))
    time.sleep(1.1)  # docker events have one-second resolution: the load above stays before t0
    t0 = time.time()
    res = forklift(net, "image", "sync", dockerd.IMAGE, recipe, "--node-ssh-config", str(net.ssh_config), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["digest"] == digest and report["source"] == "node-a"
    nodes = {n["host"]: n for n in report["nodes"]}
    assert [nodes[h]["method"] for h in HOSTS] == ["source", "node", "skip"]
    assert _image_id(b, dockerd.IMAGE) == digest
    assert _loads_since(b, t0) == 1 and _loads_since(c, t0) == 0 and _loads_since(a, t0) == 0
    _speeds("image node-a -> node-b (docker save | ssh docker load)", [nodes["node-b"]])

    b.docker("image", "rm", dockerd.IMAGE)
    relayed = forklift(net, "image", "sync", dockerd.IMAGE, recipe, "--json")
    assert relayed.returncode == 0, relayed.stderr
    nodes = {n["host"]: n for n in json.loads(relayed.stdout)["nodes"]}
    assert nodes["node-b"]["method"] == "relay" and nodes["node-c"]["method"] == "skip"
    assert _image_id(b, dockerd.IMAGE) == digest and nodes["node-b"]["bytes"] > 0
    _speeds("image node-a -> node-b relayed through forklift", [nodes["node-b"]])


def test_preflight_names_the_node_whose_image_digest_differs(net: NetCluster,
                                                             daemons: list[dockerd.Daemon]) -> None:
    a, b, c = daemons
    if _image_id(a, dockerd.IMAGE) is None:
        dockerd.build_image(a)
    dockerd.copy_image(a, b)
    dockerd.build_image(c, message="imported again")  # same tag, another image ID
    assert _image_id(c, dockerd.IMAGE) != _image_id(a, dockerd.IMAGE)
    runtime = json.dumps({"kind": "docker", "image": dockerd.IMAGE, "gpus": None, "python": sys.executable,
                          "mounts": dockerd.python_mounts()})
    recipe = str(_recipe(net, "preflight-image", runtime=runtime, source="bundled:smollm2-135m-instruct"))
    bad = forklift(net, "up", recipe, "--name", "imgdigest", "--preflight-only")
    assert bad.returncode != 0
    assert "node-c: image digest" in bad.stderr and "forklift image sync" in bad.stderr, bad.stderr
    assert "node-b: image digest" not in bad.stderr and "node-a: image digest" not in bad.stderr
    fixed = forklift(net, "image", "sync", dockerd.IMAGE, recipe, "--from", "node-a", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert _image_id(c, dockerd.IMAGE) == _image_id(a, dockerd.IMAGE)
    again = forklift(net, "up", recipe, "--name", "imgdigest", "--preflight-only")
    assert "image digest" not in again.stderr, again.stderr


@pytest.fixture
def registry(net: NetCluster) -> Iterator[str]:
    if not Path(REGISTRY_BIN).is_file():
        pytest.skip("needs Debian's docker-registry (apt-get install docker-registry)")
    config = net.tmp / "registry.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {net.tmp / 'registry'}\n"
                      f"http:\n  addr: {REGISTRY}\nlog:\n  level: error\n")
    proc = subprocess.Popen(net.exec_argv(0, REGISTRY_BIN, "serve", str(config)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not net.listening(0, 5000):
        assert time.monotonic() < deadline and proc.poll() is None, "the registry did not start"
        time.sleep(0.2)
    try:
        yield REGISTRY
    finally:
        proc.terminate()
        proc.wait(10)


def test_image_through_a_registry(net: NetCluster, daemons: list[dockerd.Daemon], registry: str) -> None:
    a, b, c = daemons
    if _image_id(a, dockerd.IMAGE) is None:
        dockerd.build_image(a)
    for d in (b, c):
        d.docker("image", "rm", "-f", dockerd.IMAGE, check=False)
    res = forklift(net, "image", "sync", dockerd.IMAGE, str(_recipe(net, "image-reg")), "--registry", registry,
                   "--json")
    assert res.returncode == 0, res.stderr
    nodes = {n["host"]: n for n in json.loads(res.stdout)["nodes"]}
    assert [nodes[h]["method"] for h in HOSTS] == ["source", "registry", "registry"]
    assert _image_id(b, dockerd.IMAGE) == _image_id(c, dockerd.IMAGE) == _image_id(a, dockerd.IMAGE)
    again = forklift(net, "image", "sync", dockerd.IMAGE, str(_recipe(net, "image-reg")), "--registry", registry,
                     "--json")
    assert [n["method"] for n in json.loads(again.stdout)["nodes"]] == ["source", "skip", "skip"]
