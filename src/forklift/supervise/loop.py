"""The supervisor: probe a serving run every ``supervise.interval_s``, and on a failure stop the whole deployment
and start it again from its run record, as ``policy`` decides.

One probe = ``cluster.down.status`` (every rank's pid and process group on every node, through the node's
Runner, and /health) + one real streamed token within ``token_timeout_s``. On a failure: collect every rank's log
and every node's facts into ``runs/NAME/incidents/STAMP/``, take doctor's top finding, ``down`` the deployment,
check memory came back, wait the backoff, ``up`` from the record's plan. Every step is an event in
``runs/NAME/supervisor-events.jsonl``; restart, give-up and recovery also go to the recipe's ``on_event`` hook.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from forklift.cluster.collect import Collection
from forklift.cluster.diagnose import diagnose_run
from forklift.cluster.down import down, status
from forklift.cluster.ready import diagnosis
from forklift.cluster.stop import record_runners
from forklift.cluster.up import up
from forklift.endpoint import Endpoint
from forklift.endpoint.auth import api_key
from forklift.errors import EndpointError, EngineStartupError, ForkliftError, SupervisorGaveUpError
from forklift.hardware.profiles import is_unified
from forklift.host.facts import probe
from forklift.launch.hosts import runners_for
from forklift.recipe.schema import Recipe, Supervise
from forklift.record import RunRecord, load, run_dir, save_status
from forklift.record.runfiles import fresh
from forklift.record.supervisor import EventKind, Incident, SupervisorState, append_event, load_state, save_state
from forklift.runner import Runner, fan_out
from forklift.runner.ssh import default_ssh_config
from forklift.supervise import hooks, policy

Say = Callable[[str], None]
BOOT_ID = "/proc/sys/kernel/random/boot_id"
CONFIRM_S = 5.0
"""The wait before the probe that confirms a failure which is not a dead rank."""
NODE_WAIT_S = 10.0
"""Between attempts to reach every node at supervisor start (after a reboot a worker may come up later)."""


def _quiet(line: str) -> None:
    pass


def _unified(record: RunRecord) -> list[bool]:
    return [is_unified(node.hardware) for node in record.recipe.nodes]


def mem_available(runners: Mapping[int, Runner], hosts: Mapping[int, str]) -> dict[str, int | None]:
    """MemAvailable (bytes) of each node, None where it could not be read."""
    done = fan_out(((i, i) for i in hosts), lambda i: probe(runners[i], ("memory",)).mem_available)
    return {hosts[i]: done.results.get(i) for i in hosts}


def baseline(recipe: Recipe, runners: Mapping[int, Runner] | None = None) -> dict[str, int]:
    """MemAvailable of every node now (before a start), for the memory gate."""
    runners = runners or runners_for(recipe, ssh_config=default_ssh_config())
    hosts = {i: n.host for i, n in enumerate(recipe.nodes)}
    return {h: v for h, v in mem_available(runners, hosts).items() if v is not None}


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "piece"


class Supervisor:
    """Watches one run until it is stopped (SIGTERM, `forklift down`) or gives up (SupervisorGaveUpError)."""

    def __init__(self, name: str, *, say: Say = _quiet, sleep: Callable[[float], None] = time.sleep,
                 runners: Mapping[int, Runner] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.say = say
        self.sleep = sleep
        self.clock = clock
        self.record = load(name)
        self._runners = dict(runners) if runners is not None else None
        self._made: tuple[str, Mapping[int, Runner]] | None = None
        self._rank_gone = False
        """Whether the last probe found a rank's process gone (acted on at once, never re-probed first)."""
        self.state = load_state(name) or SupervisorState(name=name)

    @property
    def cfg(self) -> Supervise:
        return self.record.recipe.supervise

    @property
    def runners(self) -> Mapping[int, Runner]:
        """The nodes' runners (made once per run record: a restart writes a new one)."""
        if self._runners is not None:
            return self._runners
        if self._made is None or self._made[0] != self.record.run_id:
            self._made = (self.record.run_id, record_runners(self.record))
        return self._made[1]

    # --- events ---------------------------------------------------------------------------------------------

    def event(self, kind: EventKind, message: str, *, hook: bool = False, **extra: Any) -> None:
        body: dict[str, Any] = {"kind": kind, "name": self.name, "at": self.clock(), "message": message,
                                "state": self.state.state, "restarts_in_window": self._used(),
                                "endpoint": self.record.endpoint, **extra}
        if self.state.last_cause is not None and "cause" not in body:
            body["cause"] = self.state.last_cause.cause
            body["finding"] = self.state.last_cause.finding
        if hook and self.cfg.on_event is not None:
            failed = hooks.call(self.cfg.on_event, body)
            body["hook"] = "delivered" if failed is None else f"failed: {failed}"
        append_event(self.name, body)
        self.say(f"{kind}: {message}" + (f" (hook {body['hook']})" if "hook" in body else ""))

    def _used(self) -> int:
        return self.state.restarts_in(self.cfg.window_s, self.clock())

    def _save(self, phase: str | None = None) -> None:
        if phase is not None:
            self.state.state = phase  # type: ignore[assignment]
        save_state(self.state)

    # --- probes ---------------------------------------------------------------------------------------------

    def check(self) -> str | None:
        """None while the run serves; otherwise what is wrong, one line."""
        found = self._processes()
        if found is not None:
            return found
        try:
            key = api_key(self.record.api_key_env, who=f"the supervisor of '{self.name}'")
            with Endpoint(self.record.endpoint, api_key=key, timeout=self.cfg.token_timeout_s) as endpoint:
                endpoint.first_token(self.record.served_name, max_tokens=2, timeout=self.cfg.token_timeout_s)
        except httpx.TimeoutException:
            return self._processes() or (f"hung: /health answers but no token streamed within "
                                         f"{self.cfg.token_timeout_s:g} s")
        except (httpx.HTTPError, EndpointError) as exc:  # a rank that died mid-probe says so better than the socket
            return self._processes() or f"the probe request failed: {type(exc).__name__}: {exc}"
        return None

    def confirmed(self, cause: str | None) -> str | None:
        """A dead rank (the whole run, or one rank whose process is gone while the others run) is acted on at once;
        a slow /health or a failed probe only when the next probe, a few seconds later, fails too (a loaded machine
        answers late once in a while: restarting for it would cost minutes)."""
        if cause is None or cause.startswith("dead") or self._rank_gone:
            return cause
        self.say(f"probe failed ({cause}); probing again before acting")
        self.sleep(min(self.cfg.interval_s, CONFIRM_S))
        return self.check()

    def _processes(self) -> str | None:
        st = status(self.record, self.runners)
        self._rank_gone = bool(st.dead_ranks)
        if st.status == "ready":
            return None
        return f"{st.status}: " + ("; ".join(st.problems) or f"record status {self.record.status}")

    def _boot_ids(self) -> dict[str, str]:
        """Each node's boot id (the nodes that answer)."""
        nodes = self.record.recipe.nodes
        done = fan_out(self.runners.items(), lambda r: r.run(["cat", BOOT_ID], timeout=15))
        return {nodes[i].host: res.stdout.strip() for i, res in done.results.items() if res.ok and res.stdout.strip()}

    def wait_for_nodes(self) -> None:
        """Until every node answers (after a reboot the head may be up before its workers)."""
        while True:
            done = fan_out(self.runners.items(), lambda r: r.run(["true"], timeout=15).ok)
            missing = [self.record.recipe.nodes[i].host for i in self.runners if not done.results.get(i)]
            if not missing:
                return
            self.say(f"waiting for {', '.join(missing)} to answer")
            self.sleep(NODE_WAIT_S)

    # --- failure handling -----------------------------------------------------------------------------------

    def incident(self, cause: str) -> Incident:
        """Every rank's log and every node's facts, saved under the run; doctor's top finding from them."""
        folder = fresh(run_dir(self.name) / "incidents")
        try:
            diag = diagnose_run(self.record, self.runners)  # the one diagnosis `forklift doctor NAME` gives
        except ForkliftError as exc:
            return Incident(at=self.clock(), cause=cause, finding=None, logs=f"not collected: {exc.message}")
        got = diag.collection or Collection()
        finding = diag.top_line()
        facts = {h: {"mem_available": a, "mem_total": t} for h, (a, t) in got.mem_available.items()}
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for k, piece in enumerate(got.pieces):
                name = f"{k:02d}-{_safe(piece.host)}-{_safe(piece.label)}.txt"
                (folder / name).write_text(piece.text, encoding="utf-8")
            (folder / "facts.json").write_text(_json({"cause": cause, "finding": finding, "memory": facts,
                                                      "unreachable": got.unreachable}), encoding="utf-8")
        except OSError as exc:  # a full disk must not stop the recovery
            return Incident(at=self.clock(), cause=cause, finding=finding, logs=f"not saved: {exc}")
        return Incident(at=self.clock(), cause=cause, finding=finding, logs=str(folder))

    def stop_deployment(self) -> None:
        result = down(self.record, runners=self.runners)
        self.event("down", f"stopped the deployment in {result.seconds:.1f} s (ranks alive before: "
                   f"{result.stopped_ranks or 'none'})")

    def memory_gate(self) -> str | None:
        """None when every gated node's MemAvailable came back (waiting up to memory_wait_s), else why not."""
        hosts = policy.gated_hosts([n.host for n in self.record.recipe.nodes], _unified(self.record),
                                   self.cfg.memory_check)
        base = {h: v for h, v in self.state.baseline_mem_available.items() if h in hosts}
        if not base:
            return None
        index = {i: n.host for i, n in enumerate(self.record.recipe.nodes) if n.host in base}
        deadline = self.clock() + self.cfg.memory_wait_s
        while True:
            now = mem_available(self.runners, index)
            verdict = policy.memory_back(base, now, self.cfg.memory_margin_gib)
            if verdict.ok:
                return None
            if self.clock() >= deadline:
                clean = {h: v for h, v in now.items() if v is not None}
                return verdict.describe(base, clean, self.cfg.memory_margin_gib)
            self.sleep(2.0)

    def give_up(self, why: str) -> SupervisorGaveUpError:
        self.state.gave_up = why
        self._save("gave-up")
        self.event("give-up", why, hook=True)
        return SupervisorGaveUpError(
            f"{self.name}: the supervisor gave up: {why}",
            fix=f"See `forklift status {self.name}`, `forklift doctor {self.name}` and the incident logs under "
            f"{run_dir(self.name) / 'incidents'}; fix the cause, then `forklift up --supervise` again.")

    def recover(self, cause: str) -> None:
        """Stop, check memory, back off and start again until the run serves; raises SupervisorGaveUpError."""
        t_fail = self.clock()
        self.state.last_cause = self.incident(cause)
        self._save("recovering")
        self.event("failure", cause, cause=cause, finding=self.state.last_cause.finding,
                   logs=self.state.last_cause.logs)
        while True:
            try:
                self.stop_deployment()
            except ForkliftError as exc:
                raise self.give_up(f"could not stop the deployment before a restart: {exc.message}") from exc
            step = policy.next_step(self.state.restarts, self.state.startup_findings, self.clock(), self.cfg)
            if step.action == "give-up":
                raise self.give_up(step.why)
            short = self.memory_gate()
            if short is not None:
                raise self.give_up(f"refusing to restart: memory did not come back within "
                                   f"{self.cfg.memory_wait_s:g} s: {short}")
            self._save("backing-off")
            self.say(f"restarting in {step.wait_s:g} s ({step.why})")
            self.sleep(step.wait_s)
            self.state.restarts.append(self.clock())
            self.state.baseline_mem_available = baseline(self.record.recipe, self.runners)
            self._save("recovering")
            self.event("restart", step.why, hook=True, wait_s=step.wait_s)
            if self.start_again(t_fail):
                return

    def start_again(self, t_fail: float) -> bool:
        """``up`` from the record's plan. True once it serves; False after a failed start (recorded)."""
        try:
            result = up(self.record.plan, name=self.name, force=True, check_nodes=False)
        except ForkliftError as exc:
            failed = load(self.name)
            finding = diagnosis(failed, self.runners) if isinstance(exc, EngineStartupError) else None
            self.state.startup_findings.append(finding or exc.message)
            self.state.last_cause = Incident(at=self.clock(), cause=f"the restart failed: {exc.message}",
                                             finding=finding)
            self._save("recovering")
            self.event("failure", f"the restart failed: {exc.message}", finding=finding)
            self.record = load(self.name)
            return False
        self.record = result.record
        now = self.clock()
        self.state.startup_findings = []
        self.state.last_recovery_at = now
        self.state.last_recovery_s = round(now - t_fail, 1)
        self.state.boot_ids = self._boot_ids()
        self._save("watching")
        self.event("recovered", f"serving again {now - t_fail:.1f} s after the failure was noticed "
                   f"(ready in {result.ready_s:.1f} s)", hook=True, recovery_s=round(now - t_fail, 1))
        return True

    # --- the loop -------------------------------------------------------------------------------------------

    def begin(self, pid: int, host: str | None = None) -> None:
        self.state.pid = pid
        self.state.host = host or socket.gethostname()
        self.state.gave_up = None
        self.state.started_at = self.clock()
        self._save("starting")
        self.event("started", f"supervising {self.name} (pid {pid}, every {self.cfg.interval_s:g} s)")

    def after_reboot(self) -> None:
        """A head that booted since the run served: its recorded pids are someone else's now; never signal them."""
        if self.record.status not in ("ready", "starting"):
            return
        now = self._boot_ids()
        rebooted = sorted(h for h, b in self.state.boot_ids.items() if h in now and now[h] != b)
        if not rebooted:
            return
        self.say(f"{', '.join(rebooted)} rebooted since the run served; the processes recorded there are gone")
        for rank in self.record.ranks:  # `down` signals recorded process groups: these are not the run's any more
            if rank.host in rebooted:
                rank.pid = rank.pgid = None
        save_status(self.record, "stopped")

    def run(self, pid: int) -> str:
        """Supervise until SIGTERM (KeyboardInterrupt) or give-up (SupervisorGaveUpError). Returns at once, saying
        why, when the run was stopped (`forklift down`, or a give-up): a unit started at boot must not undo that."""
        if self.record.status == "stopped":
            why = f" (the supervisor gave up: {self.state.gave_up})" if self.state.state == "gave-up" else ""
            return (f"{self.name} was stopped{why}; nothing to supervise. Start it with `forklift up --supervise`.")
        self.begin(pid)
        try:
            self.wait_for_nodes()
            self.after_reboot()
            cause = self.check()
            if cause is not None:
                self.recover(cause)
            else:  # it serves: whatever start failed before, the last one did not
                self.state.startup_findings = []
                self.state.boot_ids = self._boot_ids()
                self._save("watching")
            while True:
                self.sleep(self.cfg.interval_s)
                self.record = load(self.name)
                cause = self.confirmed(self.check())
                if cause is not None:
                    self.recover(cause)
        except KeyboardInterrupt:
            self._save("stopped")
            self.event("stopped", "the supervisor was stopped (SIGTERM or Ctrl-C)")
            raise


def _json(data: object) -> str:
    import json

    return json.dumps(data, indent=2, default=str)


__all__ = ["Supervisor", "baseline", "mem_available"]
