"""``forklift gateway up|down|status|usage`` and ``gateway key add|list|revoke``: one endpoint, a key per person."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from forklift.cli.common import JsonOpt, console, err_console, print_json
from forklift.cli.service import print_service_plan

gateway_app = typer.Typer(help="One OpenAI-compatible endpoint in front of runs: keys, usage, audit log.",
                          no_args_is_help=True)
key_app = typer.Typer(help="The gateway's keys: one per person, stored hashed, shown once.", no_args_is_help=True)
gateway_app.add_typer(key_app, name="key")
service_app = typer.Typer(help="The systemd unit that runs the gateway's watcher at boot and again when it dies.",
                          no_args_is_help=True)
gateway_app.add_typer(service_app, name="service")

TargetsArg = Annotated[list[str], typer.Argument(help="A STACK.yaml, a stack's name, or run names.")]
PortOpt = Annotated[int, typer.Option("--port", help="The gateway's port.")]
HostOpt = Annotated[str, typer.Option("--host", help="Address the gateway binds.")]
CertOpt = Annotated[str | None, typer.Option("--cert", help="TLS certificate (PEM); with --key the gateway serves "
                                                             "HTTPS.")]
KeyFileOpt = Annotated[str | None, typer.Option("--key", help="TLS private key (PEM).")]
ContentOpt = Annotated[bool, typer.Option("--log-content", help="Also write prompts and answers to the audit log "
                                                                 "(off by default).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the proxy's config; start nothing.")]


def _runs(targets: list[str]) -> list[str]:
    """Run names from a STACK.yaml, a started stack's name, or run names as given."""
    from forklift.errors import StackNotFoundError
    from forklift.stack import load, load_runs

    out: list[str] = []
    for t in targets:
        if t.endswith((".yaml", ".yml")) and Path(t).is_file():
            stack = load(t)[0]
            out += [stack.run_name(m.name) for m in stack.members]
            continue
        try:
            out += list(load_runs(t).values())
        except StackNotFoundError:
            out.append(t)
    return out


@gateway_app.command("up")
def up_cmd(targets: TargetsArg, port: PortOpt = 4000, host: HostOpt = "127.0.0.1", cert: CertOpt = None,
           key: KeyFileOpt = None, log_content: ContentOpt = False, dry_run: DryRunOpt = False,
           json_out: JsonOpt = False) -> None:
    """Start LiteLLM's proxy in front of the runs (watched; a dead run's model answers 503 with its state)."""
    from forklift import gateway

    runs = _runs(targets)
    if dry_run:
        import yaml

        from forklift.record import load

        config = gateway.litellm_config(gateway.backends([load(r) for r in runs]))
        console.print(yaml.safe_dump(config, sort_keys=False), highlight=False, markup=False)
        return
    state = gateway.up(runs, host=host, port=port, cert=cert, key=key, log_content=log_content)
    if json_out:
        print_json(state.to_json())
        return
    models = ", ".join(f"{b['model']} ({b['run']})" for b in state.backends)
    console.print(f"[green]gateway[/] at {state.url}/v1: {models}", highlight=False)
    console.print("next: `forklift gateway key add NAME`, `forklift gateway usage`, `forklift gateway down`",
                  highlight=False)


@gateway_app.command("serve", hidden=True)
def serve_cmd() -> None:
    """The gateway's watcher, in the foreground (what `gateway up` starts detached)."""
    from forklift import gateway

    def say(line: str) -> None:
        err_console.print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", highlight=False, markup=False)

    if not gateway.state_path().is_file():  # nothing to serve: exit 2, which its unit does not restart
        say(f"no gateway was set up in {gateway.state_path().parent}: run `forklift gateway up` first")
        raise typer.Exit(2)
    raise typer.Exit(gateway.serve(say=say))


@gateway_app.command("down")
def down_cmd(json_out: JsonOpt = False) -> None:
    """Stop the gateway (its watcher, then the proxy)."""
    from forklift import gateway

    state = gateway.down()
    if json_out:
        print_json(state.to_json())
        return
    console.print(f"stopped the gateway at {state.url}", highlight=False)


@gateway_app.command("status")
def status_cmd(json_out: JsonOpt = False) -> None:
    """The gateway's processes and each model's run state."""
    from forklift import gateway

    found = gateway.gateway_status()
    if json_out:
        print_json(found)
    else:
        console.print(f"gateway at {found['url']}: proxy {'up' if found['proxy_alive'] else 'DOWN'}", highlight=False)
        for model, h in found["models"].items():
            console.print(f"  {model}: {h['state']} (run {h['run']})" + ("" if h["healthy"] else " - answered 503"),
                          highlight=False)
    if not found["proxy_alive"]:
        raise typer.Exit(1)


@gateway_app.command("usage")
def usage_cmd(json_out: JsonOpt = False) -> None:
    """Per key: requests, errors, prompt and completion tokens (from the local audit log)."""
    from forklift import gateway

    found = gateway.usage()
    if json_out:
        print_json({k: u.to_json() for k, u in found.items()})
        return
    console.print(f"{'key':<24} {'requests':>8} {'errors':>6} {'prompt':>8} {'completion':>10}", highlight=False)
    for u in found.values():
        console.print(f"{u.key:<24} {u.requests:>8} {u.errors:>6} {u.prompt_tokens:>8} {u.completion_tokens:>10}",
                      highlight=False)


ModelOpt = Annotated[list[str] | None, typer.Option("--model", "-m", help="A model this key may use (repeat; "
                                                                            "none: every model).")]
RpmOpt = Annotated[int | None, typer.Option("--rpm", min=1, help="Requests per minute this key may make.")]
KeyNameArg = Annotated[str, typer.Argument(help="The key's name (its person).")]


@key_app.command("add")
def key_add_cmd(name: KeyNameArg, model: ModelOpt = None, rpm: RpmOpt = None, json_out: JsonOpt = False) -> None:
    """Make a key; it is printed once and stored only as its hash."""
    from forklift import gateway

    entry, key = gateway.add(name, models=model or None, rpm=rpm)
    if json_out:
        print_json({**entry.to_json(), "key": key})
        return
    console.print(key, highlight=False, markup=False)
    err_console.print(f"key for {name}: shown once, stored hashed; models: "
                      f"{', '.join(entry.models) if entry.models else 'all'}; rpm: {entry.rpm or 'no limit'}",
                      highlight=False)


@key_app.command("list")
def key_list_cmd(json_out: JsonOpt = False) -> None:
    """Every key: name, prefix, models, rate limit, revoked (never the key)."""
    from forklift import gateway

    keys = gateway.load_keys()
    if json_out:
        print_json([{k: v for k, v in e.to_json().items() if k != "sha256"} for e in keys.values()])
        return
    for e in keys.values():
        state = "revoked" if e.revoked else "active"
        console.print(f"{e.name:<24} {e.shown:<12} {state:<8} models={','.join(e.models) if e.models else 'all'} "
                      f"rpm={e.rpm or '-'}", highlight=False)


@key_app.command("revoke")
def key_revoke_cmd(name: KeyNameArg, json_out: JsonOpt = False) -> None:
    """Revoke a key; the gateway refuses it from the next request."""
    from forklift import gateway

    entry = gateway.revoke(name)
    if json_out:
        print_json({k: v for k, v in entry.to_json().items() if k != "sha256"})
        return
    console.print(f"revoked {name}", highlight=False)


UnitDirOpt = Annotated[str, typer.Option("--unit-dir", help="Where the unit file goes.")]
ServiceDryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the unit and every command; change "
                                                                   "nothing.")]
NowOpt = Annotated[bool, typer.Option("--now", help="Also start the unit now (stop the watcher `gateway up` started "
                                                    "first: `forklift gateway down`; the unit starts it again).")]
ServicePortOpt = Annotated[int | None, typer.Option("--port", help="The gateway's port (default: the one set up "
                                                                   "here).")]


def _port(port: int | None) -> int:
    from forklift import gateway

    return port if port is not None else gateway.load_state().port


@service_app.command("install")
def service_install_cmd(dry_run: ServiceDryRunOpt = False, now: NowOpt = False, json_out: JsonOpt = False,
                        unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Write the unit that runs the gateway set up here (`gateway up`) under systemd, and enable it."""
    from forklift import gateway
    from forklift.runner import LocalRunner
    from forklift.supervise import gateway_service, service

    state = gateway.load_state()
    plan = gateway_service.install_plan(port=state.port, url=state.url, watcher_argv=gateway.watcher_argv(),
                                        unit_dir=unit_dir, start=now)
    if dry_run:
        print_service_plan(plan, json_out)
        return
    service.apply(plan, LocalRunner())
    if json_out:
        print_json(plan.to_json() | {"installed": True})
        return
    console.print(f"installed {plan.unit_path} and enabled {plan.unit}" + (" (started)" if now else "")
                  + f"; the gateway at {state.url} comes back after a reboot or a crash of its watcher",
                  highlight=False)


@service_app.command("status")
def service_status_cmd(port: ServicePortOpt = None, json_out: JsonOpt = False,
                       unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Whether the gateway's unit is installed, enabled and active."""
    from forklift.runner import LocalRunner
    from forklift.supervise import gateway_service

    st = gateway_service.status(_port(port), LocalRunner(), unit_dir=unit_dir)
    if json_out:
        print_json(st.to_json())
        return
    console.print(f"{st.unit}: {'installed' if st.installed else 'not installed'} ({st.unit_path}), "
                  f"enabled: {st.enabled}, active: {st.active}", highlight=False)


@service_app.command("remove")
def service_remove_cmd(port: ServicePortOpt = None, dry_run: ServiceDryRunOpt = False, json_out: JsonOpt = False,
                       unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Disable and stop the unit (its watcher stops the proxy), delete the file."""
    from forklift.runner import LocalRunner
    from forklift.supervise import gateway_service, service

    plan = gateway_service.remove_plan(_port(port), unit_dir=unit_dir)
    if dry_run:
        print_service_plan(plan, json_out)
        return
    service.apply(plan, LocalRunner(), tolerate=("systemctl disable",))
    console.print(f"removed {plan.unit}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(gateway_app, name="gateway")
