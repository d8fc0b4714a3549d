"""MB/s per node of `model pull`, `model sync` and `image sync` on a three-node namespace cluster.

The nodes are network namespaces on this machine joined by a bridge (tests/cluster/netns.py: real sshd in each,
a real dockerd in each for the image), so the figures measure forklift's own path (ssh, rsync, the relay, docker
save/load, the node program's downloads from the local Hub of tests/hubserver.py) on this machine's CPUs, not a
network. A PP=3 checkpoint with ``STAGE_MB`` per stage shard; an image with one ``IMAGE_MB`` layer of random
bytes. Needs root (namespaces); run under the heavy lock: ``flock /tmp/fk-heavy.lock python -m
benchmarks.model_transfer``. Writes bench-results/model_transfer.json.
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.cluster import dockerd, netns
from tests.modelgen import make_model

OUT = Path("bench-results")
REPO = Path(__file__).resolve().parents[1]
STAGE_MB = 128
IMAGE_MB = 256
HOSTS = ["node-a", "node-b", "node-c"]


def _recipe(net: netns.NetCluster, tmp: Path, name: str) -> Path:
    nodes = "\n".join(f"  - {{host: {HOSTS[i]}, ssh: {n.target}, data_ip: {n.ip}, "
                      f"model_path: {tmp / name / HOSTS[i]}}}" for i, n in enumerate(net.nodes))
    path = tmp / f"{name}.yaml"
    path.write_text(f'model: {{source: "org/bench"}}\nruntime: {{kind: venv, python: {sys.executable}}}\n'
                    f"nodes:\n{nodes}\nparallel: {{pp: 3}}\n")
    return path


def _forklift(net: netns.NetCluster, env: dict[str, str], *args: str) -> dict[str, Any]:
    res = subprocess.run(net.exec_argv(0, sys.executable, "-m", "forklift.cli.main", *args, "--json"),  # noqa: S603
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"forklift {' '.join(args)} failed: {res.stderr[-800:]}")
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _rows(nodes: list[dict[str, Any]], bytes_key: str) -> dict[str, Any]:
    return {n["host"]: {"method": n.get("method"), "bytes": n.get(bytes_key), "seconds": n.get("seconds"),
                        "mb_s": n.get("mb_s")} for n in nodes if n.get("mb_s")}


def _big_image(daemon: dockerd.Daemon, name: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("blob.bin")
        info.size = IMAGE_MB << 20
        tar.addfile(info, io.BytesIO(os.urandom(info.size)))
    subprocess.run(["docker", "-H", daemon.host, "import", "-", name], input=buf.getvalue(), check=True,  # noqa: S603,S607
                   capture_output=True, timeout=600)


def _model_figures(net: netns.NetCluster, tmp: Path, env: dict[str, str], served: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pulled = _forklift(net, env, "model", "pull", "--recipe", str(_recipe(net, tmp, "pull")))
    out["pull_each_node_from_hub"] = _rows(pulled["nodes"], "downloaded")
    for label, extra in (("sync_node_to_node_rsync", ["--node-ssh-config", str(net.ssh_config)]),
                         ("sync_relayed_through_forklift", [])):
        recipe = _recipe(net, tmp, label)
        shutil.copytree(served, tmp / label / "node-b")
        out[label] = _rows(_forklift(net, env, "model", "sync", str(recipe), *extra)["nodes"], "transferred")
        shutil.rmtree(tmp / label)
    return out


def _image_figures(net: netns.NetCluster, tmp: Path, env: dict[str, str], tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    daemons = []
    try:
        for i, c in enumerate("abc"):
            (tmp / f"dk{c}").mkdir()
            daemons.append(dockerd.start(net.nodes[i].ns, tmp / f"dk{c}", f"{tag}{c}"))
        image = "forklift-bench/big:1"
        _big_image(daemons[0], image)
        recipe = str(_recipe(net, tmp, "image"))
        for label, extra in (("image_node_to_node", ["--node-ssh-config", str(net.ssh_config)]),
                             ("image_relayed_through_forklift", [])):
            for d in daemons[1:]:
                d.docker("image", "rm", "-f", image, check=False)
            out[label] = _rows(_forklift(net, env, "image", "sync", image, recipe, *extra)["nodes"], "bytes")
    finally:
        for d in daemons:
            dockerd.stop(d)
    return out


def main() -> int:
    reason = netns.unavailable_reason() or dockerd.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="fl-transfer-"))
    tag = str(os.getpid() % 100000)
    net = netns.start(tmp, tag, n=3, sshd_env={i: {"DOCKER_HOST": f"unix:///run/fl-dk-{tag}{c}.sock"}
                                               for i, c in enumerate("abc")})
    hub = None
    try:
        served = make_model(tmp / "served", layer_bytes=(STAGE_MB << 20) // 2)
        hub = subprocess.Popen(net.exec_argv(0, sys.executable, "-m", "tests.hubserver", "--bind",  # noqa: S603
                                             net.nodes[0].ip, "--port", "18090", "--repo", f"org/bench={served}"),
                               cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert hub.stdout is not None
        url = hub.stdout.readline().split()[3]
        env = dict(os.environ, FORKLIFT_HOME=str(tmp / "home"), FORKLIFT_SSH_CONFIG=str(net.ssh_config),
                   FORKLIFT_CACHE=str(tmp / "cache"), HF_HOME=str(tmp / "hf"), HF_ENDPOINT=url,
                   HF_HUB_DISABLE_XET="1")
        t0 = time.monotonic()
        figures = {**_model_figures(net, tmp, env, served), **_image_figures(net, tmp, env, tag)}
        result = {"host": platform.node(), "cpus": os.cpu_count(), "stage_shard_mb": STAGE_MB, "image_mb": IMAGE_MB,
                  "elapsed_s": round(time.monotonic() - t0, 1), "figures": figures,
                  "note": "namespaces on one host: CPU-bound (ssh ciphers, rsync, python), not a network figure"}
    finally:
        if hub is not None:
            hub.terminate()
        netns.stop(net)
        shutil.rmtree(tmp, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "model_transfer.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
