"""The systemd unit that runs the gateway's watcher (``forklift gateway serve``) at boot and again when it dies.

Built from the run supervisor's unit (supervise/service.py: the same restart policy, quoting, actions and
``--dry-run``), with the gateway's own command, name and description. The watcher starts LiteLLM's proxy, keeps each
model's health current and restarts the proxy (a cap per window, exit 3 when it gives up); systemd covers the
watcher's own death: ``Restart=on-failure``, and the watcher started again takes over the proxy that still serves
(``KillMode=process`` leaves it running). Exit 2 (another watcher already watches this gateway, or no gateway was
set up in this state dir) and 3 are not restarted; a stop (SIGTERM, exit 143) stops the proxy too.

No secret is in the unit: the proxy's admin key stays in the gateway's 0600 file, the keys' store holds digests,
and the TLS key is read from its own path.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from forklift import paths
from forklift.runner import Runner
from forklift.supervise.service import (
    UNIT_DIR,
    Action,
    ServicePlan,
    carried_environment,
    render_unit,
    unit_actions,
    unit_state,
)

STOP_S = 10
"""How long the watcher gives the proxy to stop (gateway.ops.serve stops its group with this grace)."""


def unit_name(port: int) -> str:
    """One gateway per port on a host."""
    return f"forklift-gateway-{port}.service"


def install_plan(*, port: int, url: str, watcher_argv: Sequence[str], environ: Mapping[str, str] | None = None,
                 unit_dir: str = UNIT_DIR, start: bool = False, user: str | None = None) -> ServicePlan:
    """What ``gateway service install`` writes and runs: the unit, daemon-reload, enable (and start with
    ``start``). ``watcher_argv``: gateway.ops.watcher_argv()."""
    env = dict(os.environ if environ is None else environ)
    unit = unit_name(port)
    unit_path = f"{unit_dir.rstrip('/')}/{unit}"
    carried = carried_environment(env)
    text = render_unit(f"gateway-{port}", argv=list(watcher_argv), home=str(paths.home().resolve()),
                       user=user or getpass.getuser(), environment=carried, credentials=None, stop_s=STOP_S,
                       title=f"forklift gateway (LiteLLM's proxy) at {url}, watched")
    return ServicePlan(f"gateway-{port}", unit, unit_path, text, None,
                       unit_actions(unit_dir, unit_path, text, unit, start=start))


def remove_plan(port: int, *, unit_dir: str = UNIT_DIR) -> ServicePlan:
    """Disable and stop the unit (that stops the watcher and its proxy), delete the file."""
    unit = unit_name(port)
    unit_path = f"{unit_dir.rstrip('/')}/{unit}"
    actions = [Action(["systemctl", "disable", "--now", unit]), Action(["rm", "-f", unit_path]),
               Action(["systemctl", "daemon-reload"])]
    return ServicePlan(f"gateway-{port}", unit, unit_path, "", None, actions)


@dataclass(frozen=True)
class GatewayServiceStatus:
    unit: str
    unit_path: str
    installed: bool
    enabled: str
    active: str

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def status(port: int, runner: Runner, *, unit_dir: str = UNIT_DIR) -> GatewayServiceStatus:
    unit = unit_name(port)
    return GatewayServiceStatus(unit, *unit_state(unit, runner, unit_dir=unit_dir))


__all__ = ["GatewayServiceStatus", "install_plan", "remove_plan", "status", "unit_name"]
