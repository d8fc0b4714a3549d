"""Nothing runs that the recipe did not name: env keys and values, ssh destinations, run names and hosts, fuzzed.

A canary file marks an injection: every generated input must either be refused with forklift's own error (naming
the key or target and the fix) or pass through as inert data, and the canary must never appear. The same inputs
over a real sshd in a network namespace are in tests/cluster/test_security_ssh.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from forklift import recipe as recipes
from forklift.errors import EnvNameError, RecipeError, RunNameError, SshTargetError
from forklift.names import ENV_NAME
from forklift.record import run_dir, validate_name
from forklift.runner import LocalRunner
from forklift.runner.ssh import SshRunner
from tests.helpers import forklift

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
POC_KEY = "-Sbash -c 'touch pwned' #"
"""The issue's proof of concept: an env key that `env` read as its -S option, running bash on the node."""
ATTACKS = ["$(touch {c})", "`touch {c}`", "'; touch {c}; '", '"; touch {c}; "', "x\ntouch {c}", "-S touch {c}",
           "--split-string=touch {c}", "a=b; touch {c}", "${{IFS}}touch${{IFS}}{c}", "\\'$(touch {c})"]
KEYS = st.one_of(st.text(max_size=20), st.sampled_from([POC_KEY, "A=B", "A;B", "-i", "--", "1ABC", "A B", "A\nB",
                                                        "-u", "PATH", "_OK", "--ignore-environment"]))


def _canary(tmp_path: Path) -> Path:
    return tmp_path / "CANARY"


def _attack_values(canary: Path) -> st.SearchStrategy[str]:
    surrogates: tuple[Literal["Cs"]] = ("Cs",)  # typed: hypothesis's decorator loses the Literal context
    chars = st.characters(exclude_characters="\0", exclude_categories=surrogates)  # no NUL, no lone surrogate
    return st.one_of(st.sampled_from([a.format(c=canary) for a in ATTACKS]), st.text(chars, max_size=40))


@FUZZ
@given(key=KEYS)
def test_recipe_env_keys_are_names_or_refused_naming_the_key(key: str) -> None:
    for where in ("env", "nodes.0.env"):
        raw = recipes.load("default").model_dump(mode="json")
        if where == "env":
            raw["env"] = {key: "1"}
        else:
            raw["nodes"][0]["env"] = {key: "1"}
        try:
            recipes.validate(raw)
        except RecipeError as exc:
            assert not ENV_NAME.fullmatch(key), f"a valid name was refused: {key!r}"
            assert "environment variable name" in str(exc) and exc.fix
        else:
            assert ENV_NAME.fullmatch(key), f"{key!r} was accepted as an env name"


def test_the_issue_poc_key_is_refused_in_a_recipe_file_and_a_cluster_file(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f'extends: default\nenv: {{"{POC_KEY}": "1"}}\n')
    with pytest.raises(RecipeError, match="not an environment variable name"):
        recipes.resolve(str(recipe), facts=False)
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f'nodes:\n  - {{host: n1, ssh: root@10.0.0.1, env: {{"{POC_KEY}": "1"}}}}\n')
    recipe.write_text(f"extends: default\ncluster: {cluster}\n")
    with pytest.raises(RecipeError, match="not an environment variable name"):
        recipes.resolve(str(recipe), facts=False)


@FUZZ
@given(data=st.data())
def test_remote_command_passes_values_as_data_and_runs_only_argv(tmp_path: Path, data: st.DataObject) -> None:
    """What sshd does with the command string (the login shell's `sh -c`), here: the value comes back byte for
    byte and nothing else runs."""
    canary = _canary(tmp_path)
    name = data.draw(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True))
    value = data.draw(_attack_values(canary))
    command = SshRunner("node-a").remote_command(["printenv", name], {name: value})
    res = subprocess.run(["sh", "-c", command], capture_output=True, cwd=tmp_path, check=False)
    assert not canary.exists(), command
    assert res.returncode == 0 and res.stdout == (value + "\n").encode(), (command, res.stdout, res.stderr)


@FUZZ
@given(key=KEYS)
def test_runners_refuse_env_names_that_are_not_names(tmp_path: Path, key: str) -> None:
    assume(not ENV_NAME.fullmatch(key))
    with pytest.raises(EnvNameError) as caught:
        SshRunner("node-a").remote_command(["true"], {key: "1"})
    assert caught.value.fix and caught.value.exit_code == 2
    with pytest.raises(EnvNameError):
        LocalRunner().run(["true"], env={key: "1"})
    with pytest.raises(EnvNameError):
        LocalRunner().spawn(["true"], log_path=str(tmp_path / "x.log"), env={key: "1"})


def test_a_nul_byte_in_a_value_is_a_clear_error_not_a_popen_traceback(tmp_path: Path) -> None:
    with pytest.raises(EnvNameError, match="NUL"):
        LocalRunner().spawn(["true"], log_path=str(tmp_path / "x.log"), env={"A": "x\0y"})


TARGETS = st.one_of(st.text(max_size=30), st.sampled_from([
    "-oProxyCommand=touch {c}", "-oProxyCommand=sh -c 'touch {c}'", "-F/dev/null", "--", "-p 22",
    "root@-oProxyCommand=touch {c}", "-oProxyCommand=touch@host", "host;touch {c}", "host$(touch {c})",
    "user@host:22", "node-a", "[::1]:2222", "10.0.0.1", "a b", "host\n-oProxyCommand=touch {c}"]))


@FUZZ
@given(data=st.data())
def test_ssh_destinations_are_hosts_or_refused_and_never_ssh_options(tmp_path: Path, data: st.DataObject) -> None:
    canary = _canary(tmp_path)
    target = data.draw(TARGETS).replace("{c}", str(canary))
    try:
        runner = SshRunner(target)
    except SshTargetError as exc:
        assert exc.fix and exc.exit_code == 2
        return
    argv = runner.base_argv()
    assert argv[-2] == "--" and not argv[-1].startswith("-")
    # ssh's own parser, without connecting: the destination is read as a host, no option comes from it
    res = subprocess.run([*runner.options(), "-G", "--", runner.target], capture_output=True, text=True,
                         cwd=tmp_path, check=False, timeout=10)
    assert not canary.exists()
    assert res.returncode == 0, res.stderr
    config = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    assert config.get("proxycommand", "none") == "none"
    host = runner.target.rpartition("@")[2]
    if not re.fullmatch(r"[0-9.]+", host):  # ssh turns numeric forms into dotted quads ('0' -> 0.0.0.0)
        assert config["hostname"] == host.lower()


@FUZZ
@given(name=st.one_of(st.text(max_size=70), st.sampled_from(["../x", "..", "-rf", "a/b", "x\n", ".hidden", "ok-1"])))
def test_run_names_never_leave_the_runs_folder(name: str) -> None:
    try:
        validate_name(name)
    except RunNameError as exc:
        assert exc.fix
        return
    folder = run_dir(name).resolve()
    assert folder.parent == run_dir("x").resolve().parent and not name.startswith("-")


@pytest.mark.parametrize("argv", [
    ["hw", "--node", "-oProxyCommand=touch {c}"],
    ["hw", "--node", "x", "--ssh", "-oProxyCommand=touch {c}"],
    ["patch", "verify", "kv-scale-loader-args", "--ssh", "-oProxyCommand=touch {c}"],
    ["node", "check", "--", "-oProxyCommand=touch {c}"],
])
def test_cli_ssh_targets_are_refused_before_ssh_runs(tmp_path: Path, argv: list[str]) -> None:
    canary = _canary(tmp_path)
    res = forklift(*(a.replace("{c}", str(canary)) for a in argv))
    assert not canary.exists()
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "ssh" in res.stderr.lower()


@FUZZ
@given(host=st.one_of(st.text(max_size=30), st.sampled_from(["-oProxyCommand=touch x", "a;b", "a b", "-h", "n1",
                                                            "spark-a.lan", "10.0.0.2", "$(id)"])))
def test_node_hosts_are_names_and_reach_ssh_only_as_a_destination(host: str) -> None:
    raw = recipes.load("default").model_dump(mode="json")
    raw["nodes"] = [{"host": host}]
    try:
        recipe = recipes.validate(raw)
    except RecipeError as exc:
        assert "nodes.0.host" in str(exc)
        return
    node = recipe.nodes[0]
    assert not node.host.startswith("-") and not set(node.host) & set(" ;$`'\"\n")
    if not node.is_local:
        from forklift.launch.hosts import runner_for

        try:
            runner = runner_for(node)
        except SshTargetError:
            return  # a name recipes accept that ssh could not take as given: refused before any ssh runs
        assert isinstance(runner, SshRunner)
        assert runner.base_argv()[-2:] == ["--", node.host]


@FUZZ
@given(src=st.text(max_size=25), dst=st.text(max_size=25), ro=st.booleans())
def test_docker_mounts_are_one_argument_each_and_never_add_a_mount(src: str, dst: str, ro: bool) -> None:
    """`docker run -v SRC:DST[:ro]` splits at ':': a path holding one would mount something else, or rw."""
    from forklift.launch.render import render
    from forklift.plan import for_launch

    raw = recipes.load("default").model_dump(mode="json")
    raw["runtime"] = {"kind": "docker", "image": "vllm-cpu:test", "gpus": None,
                      "mounts": [{"host": "/" + src, "container": "/" + dst, "read_only": ro}]}
    try:
        recipe = recipes.validate(raw)
    except RecipeError as exc:
        assert "mounts" in str(exc)
        return
    launch = render(for_launch(recipe, force=True))
    argv = launch.ranks[0].argv
    values = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    wanted = f"/{src}:/{dst}" + (":ro" if ro else "")
    assert wanted in values
    assert all(v.count(":") == (2 if v.endswith(":ro") else 1) for v in values)
