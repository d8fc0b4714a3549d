"""``gateway up|serve|down|status``: LiteLLM's proxy in front of runs, watched like a run.

``up`` writes the proxy's config from the run records, copies forklift's hooks beside it and starts ``forklift
gateway serve`` detached; ``serve`` starts the proxy, writes each model's health from its run's status every
second (the hooks answer 503 with the run's state for a model whose run is down, and serve it again once it is
back) and starts the proxy again when it dies (a cap per window, like the run supervisor). ``up`` returns once the
proxy lists every model through an admin key that only forklift holds.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import yaml

from forklift import paths
from forklift.cluster.down import status as run_status
from forklift.errors import GatewayError, RunNotFoundError
from forklift.gateway.config import HOOKS, Backend, backends, litellm_config
from forklift.gateway.keys import digest, gateway_dir, private_dir
from forklift.host import procs, remote
from forklift.record import load as load_record
from forklift.runner import Runner
from forklift.runner.local import LocalRunner

LITELLM_VERSION = "1.108.7"
LITELLM_ENV = "FORKLIFT_GATEWAY_LITELLM"
MAX_RESTARTS = 5
WINDOW_S = 600.0


def litellm_path() -> str:
    """The proxy's executable: $FORKLIFT_GATEWAY_LITELLM, `litellm` on PATH, or the venv `make fixtures` makes."""
    env = os.environ.get(LITELLM_ENV)
    if env:
        return env
    found = shutil.which("litellm")
    if found:
        return found
    for cache in (paths.cache_dir(), Path.home() / ".cache" / "forklift"):  # FORKLIFT_CACHE, or where make puts it
        venv = cache / "gateway-venvs" / f"litellm-{LITELLM_VERSION}" / "bin" / "litellm"
        if venv.exists():
            return str(venv)
    raise GatewayError("LiteLLM's proxy is not installed",
                       fix=f"Install it in a venv of its own (`pip install 'litellm[proxy]=={LITELLM_VERSION}'`) and "
                           f"set {LITELLM_ENV} to its `litellm`, or run `make fixtures`.")


@dataclass
class GatewayState:
    runs: list[str]
    backends: list[dict[str, Any]]
    host: str
    port: int
    litellm: str
    cert: str | None = None
    key: str | None = None
    log_content: bool = False
    watcher_pid: int | None = None
    proxy_pid: int | None = None
    restarts: list[float] = field(default_factory=list)
    started_at: float = 0.0
    stopped: bool = False

    @property
    def url(self) -> str:
        scheme = "https" if self.cert else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "url": self.url}


def state_path() -> Path:
    return gateway_dir() / "state.json"


def load_state() -> GatewayState:
    p = state_path()
    if not p.is_file():
        raise GatewayError("no gateway was started here", fix="Start one with `forklift gateway up STACK|RUN...`.")
    return GatewayState(**{k: v for k, v in json.loads(p.read_text()).items() if k != "url"})


def save_state(state: GatewayState) -> None:
    p = state_path()
    private_dir()
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2))
    tmp.replace(p)


def _alive(runner: Runner, pid: int | None) -> bool:
    return pid is not None and procs.pid_alive(runner, pid)


def _runs_as(runner: Runner, pid: int | None, word: str) -> bool:
    """The pid lives and its command line holds ``word`` (after a reboot a recorded pid may be another program)."""
    if not _alive(runner, pid):
        return False
    res = runner.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], timeout=15)
    return res.ok and word in res.stdout


def watcher_argv(python: str | None = None) -> list[str]:
    """What runs the watcher in the foreground (`gateway up` starts it detached; a systemd unit runs it)."""
    return [python or sys.executable, "-m", "forklift.cli.main", "gateway", "serve"]


def _write_files(state: GatewayState) -> str:
    """config.yaml, the hooks module and the admin key's digest; returns the admin key."""
    d = private_dir()
    found = [Backend(**b) for b in state.backends]
    (d / "config.yaml").write_text(yaml.safe_dump(litellm_config(found), sort_keys=False))
    hooks = resources.files("forklift.gateway.proxy").joinpath(f"{HOOKS}.py").read_text()
    (d / f"{HOOKS}.py").write_text(hooks)
    admin = "fk-admin-" + secrets.token_urlsafe(32)
    fd = os.open(d / "admin.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(admin)
    (d / "admin.sha256").write_text(digest(admin))
    return admin


def up(runs: list[str], *, host: str = "127.0.0.1", port: int = 4000, cert: str | None = None,
       key: str | None = None, log_content: bool = False, timeout_s: float = 300.0,
       runner: Runner | None = None) -> GatewayState:
    """Configure the proxy from the runs' records, start it watched, and wait until it lists every model."""
    runner = runner or LocalRunner()
    if (cert is None) != (key is None):
        raise GatewayError("TLS needs both a certificate and its key", fix="Give --cert and --key together.")
    current = load_state() if state_path().is_file() else None
    if current is not None and not current.stopped and _alive(runner, current.watcher_pid):
        raise GatewayError(f"a gateway already runs at {current.url}", fix="Stop it with `forklift gateway down`.")
    records = [load_record(r) for r in runs]
    not_ready = [f"{r.name} is {r.status}" for r in records if r.status != "ready"]
    if not_ready:
        raise GatewayError(f"not every run serves: {', '.join(not_ready)}",
                           fix="Start them first (`forklift up`, `forklift stack up`).")
    found = backends(records)
    state = GatewayState(runs=list(runs), backends=[asdict(b) for b in found], host=host, port=port,
                         litellm=litellm_path(), cert=cert, key=key, log_content=log_content,
                         started_at=time.time())
    if not procs.port_free_local(host, port):
        raise GatewayError(f"port {port} on {host} is in use", fix=f"Pick another: --port {port + 1}.")
    admin = _write_files(state)
    save_state(state)
    spawned = runner.spawn(watcher_argv(), log_path=str(gateway_dir() / "watcher.log"))
    # From here the watcher owns the state file (it records its own pid and the proxy's): writing it again here
    # could put back the proxy pid as None after the watcher wrote it.
    _wait_ready(replace(state, watcher_pid=spawned.pid), admin, timeout_s, runner)
    return load_state()


def _wait_ready(state: GatewayState, admin: str, timeout_s: float, runner: Runner) -> None:
    want = {b["model"] for b in state.backends}
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if not _alive(runner, state.watcher_pid):
            raise GatewayError(f"the gateway exited while starting: {_log_tail(runner, gateway_dir() / 'watcher.log')}",
                               fix=f"Read {gateway_dir() / 'proxy.log'}.")
        try:
            res = httpx.get(f"{state.url}/v1/models", headers={"Authorization": f"Bearer {admin}"}, timeout=5,
                            verify=False)  # noqa: S501 - our own proxy, on the owner's certificate
            if res.status_code == 200 and want <= {m["id"] for m in res.json().get("data", [])}:
                return
            last = f"HTTP {res.status_code}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(0.5)
    down(runner=runner)
    raise GatewayError(f"the gateway did not list its models within {timeout_s:.0f} s ({last})",
                       fix=f"Read {gateway_dir() / 'proxy.log'}.")


def _log_tail(runner: Runner, p: Path) -> str:
    return "\n".join(remote.tail(runner, str(p), 20)) or "(no log)"


def proxy_argv(state: GatewayState) -> list[str]:
    argv = [state.litellm, "--config", str(gateway_dir() / "config.yaml"), "--host", state.host,
            "--port", str(state.port), "--num_workers", "1"]
    if state.cert and state.key:
        argv += ["--ssl_certfile_path", state.cert, "--ssl_keyfile_path", state.key]
    return argv


def proxy_env(state: GatewayState) -> dict[str, str]:
    return {"FORKLIFT_GATEWAY_DIR": str(gateway_dir()), "FORKLIFT_GATEWAY_LOG_CONTENT": "1" if state.log_content
            else "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
            "PYTHONPATH": str(gateway_dir())}


def health(state: GatewayState) -> dict[str, dict[str, Any]]:
    """model -> its run's state now (what the hooks answer 503 from)."""
    out: dict[str, dict[str, Any]] = {}
    for b in state.backends:
        try:
            st = run_status(load_record(b["run"]))
            out[b["model"]] = {"run": b["run"], "state": st.status, "healthy": st.status == "ready" and st.healthy,
                               "problems": st.problems}
        except RunNotFoundError:
            out[b["model"]] = {"run": b["run"], "state": "gone", "healthy": False,
                               "problems": ["its run record is gone"]}
    return out


def _write_health(found: dict[str, dict[str, Any]]) -> None:
    p = gateway_dir() / "health.json"
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(found, indent=2))
    tmp.replace(p)


def serve(*, interval_s: float = 1.0, say: Callable[[str], None] = lambda s: None,
          runner: Runner | None = None) -> int:
    """The watcher (foreground): start the proxy, keep each model's health current, start the proxy again when
    it dies; 3 when it gave up (MAX_RESTARTS in WINDOW_S), 2 when another watcher already watches this gateway,
    0 when stopped. A watcher started again (systemd's Restart=on-failure after the watcher itself died) takes
    the proxy that still serves over instead of starting another."""
    runner = runner or LocalRunner()
    state = load_state()
    if state.watcher_pid != os.getpid() and _runs_as(runner, state.watcher_pid, "gateway serve"):
        say(f"another watcher (pid {state.watcher_pid}) watches this gateway: stop it first (`forklift gateway down`)")
        return 2
    state.watcher_pid = os.getpid()
    state.stopped = False
    if state.proxy_pid is not None and not _runs_as(runner, state.proxy_pid, str(gateway_dir() / "config.yaml")):
        state.proxy_pid = None  # gone, or a pid reused by another program since (a reboot): start a fresh proxy
    elif state.proxy_pid is not None:
        say(f"the proxy (pid {state.proxy_pid}) still serves: watching it")
    save_state(state)
    log = str(gateway_dir() / "proxy.log")
    _write_health(health(state))
    try:
        while True:
            if not _alive(runner, state.proxy_pid):
                if state.proxy_pid is not None:
                    now = time.time()
                    state.restarts = [t for t in state.restarts if now - t < WINDOW_S] + [now]
                    if len(state.restarts) > MAX_RESTARTS:
                        say(f"the proxy died {len(state.restarts)} times in {WINDOW_S:.0f} s: giving up")
                        save_state(state)
                        return 3
                    say(f"the proxy (pid {state.proxy_pid}) died: starting it again")
                    time.sleep(1.0)
                admin = (gateway_dir() / "admin.key").read_text().strip()
                state.proxy_pid = runner.spawn(proxy_argv(state), log_path=log, env=proxy_env(state),
                                               secret_env={"LITELLM_MASTER_KEY": admin}, cwd=str(gateway_dir())).pid
                save_state(state)
                say(f"proxy pid {state.proxy_pid} on {state.url}")
            _write_health(health(state))
            time.sleep(interval_s)
    finally:
        if state.proxy_pid is not None:
            procs.stop_group(runner, state.proxy_pid, grace_s=10)


def down(*, runner: Runner | None = None) -> GatewayState:
    """Stop the watcher (which stops the proxy), then the proxy's group if it is still there: each only while its
    pid still runs the gateway's own command (a pid from before a reboot may be another program's now)."""
    runner = runner or LocalRunner()
    state = load_state()
    if state.watcher_pid is not None and _runs_as(runner, state.watcher_pid, "gateway serve"):
        procs.stop_group(runner, state.watcher_pid, grace_s=20)
    state = load_state()
    if state.proxy_pid is not None and _runs_as(runner, state.proxy_pid, str(gateway_dir() / "config.yaml")):
        procs.stop_group(runner, state.proxy_pid, grace_s=10)
    state.stopped = True
    save_state(state)
    return state


def gateway_status(runner: Runner | None = None) -> dict[str, Any]:
    runner = runner or LocalRunner()
    state = load_state()
    p = gateway_dir() / "health.json"
    models = json.loads(p.read_text()) if p.exists() else {}
    return {**state.to_json(), "watcher_alive": _alive(runner, state.watcher_pid),
            "proxy_alive": _alive(runner, state.proxy_pid), "models": models}
