"""Verdicts about one node: its data_ip, link speed, NCCL library, and the NCCL / Gloo settings it will get.
Small pure functions of facts; each returns CheckResults naming the node, the interface and the change."""

from __future__ import annotations

from collections.abc import Mapping

from forklift.hardware.profiles import NetworkProfile
from forklift.hardware.profiles import get as hardware_profile
from forklift.net.derive import NodeSettings
from forklift.net.nccl_env import matches, rank_env
from forklift.net.parse import version_tuple
from forklift.net.topology import Interface, NodeNet
from forklift.recipe.schema import Recipe
from forklift.results import CheckResult

NCCL_AUTO_GID = (2, 21, 5)
"""NCCL_IB_GID_INDEX defaults to -1 (auto: the RoCE v2 IPv4 entry per HCA) since NCCL 2.21.5 (commit ab2b89c4)."""
APPLY = "`forklift net apply --write {ref}`"


def _iface_text(iface: Interface) -> str:
    speed = f"{iface.speed_mbps / 1000:g} Gb/s" if iface.speed_mbps else "speed unknown"
    return f"{iface.name} ({speed}, MTU {iface.mtu})"


def data_ip(recipe: Recipe, index: int, node: NodeNet, derived: NodeSettings, ref: str) -> CheckResult:
    spec = recipe.nodes[index]
    host, path = spec.host, f"nodes[{index}].data_ip"
    better = f"{derived.data_ip} ({derived.ifname})" if derived.data_ip else None
    fix = (f"Set {path}: {derived.data_ip} (on {derived.ifname}) or run " + APPLY.format(ref=ref)) if better else \
        f"Give {host} an address on a network every other node reaches."
    if spec.data_ip is None:
        if len(recipe.nodes) < 2:
            return CheckResult("data_ip", "skip", "single node: no data network needed", host=host)
        return CheckResult("data_ip", "warn", f"{path} is not set: ranks would use the ssh address; "
                           f"the data network's address is {better or 'unknown'}", fix=fix, host=host)
    owner = node.owner_of(spec.data_ip)
    if owner is None:
        return CheckResult("data_ip", "fail", f"data_ip {spec.data_ip} is on no interface of {host}", fix=fix,
                           host=host, details={"data_ip": spec.data_ip, "derived": derived.data_ip})
    if owner.wireless or (owner.name == node.default_dev and derived.data_ip not in (None, spec.data_ip)):
        kind = "Wi-Fi" if owner.wireless else "default-route (management)"
        return CheckResult("data_ip", "warn", f"data_ip {spec.data_ip} is on {owner.name}, the {kind} interface; "
                           f"{better} is a faster path", fix=fix, host=host)
    return CheckResult("data_ip", "ok", f"{spec.data_ip} on {_iface_text(owner)}", host=host,
                       details={"data_ip": spec.data_ip, "interface": owner.name})


def link_speed(node: NodeNet, ifname: str, profile: NetworkProfile) -> list[CheckResult]:
    """The interface's negotiated speed against the profile, and both PCIe halves of its port at equal width."""
    iface = node.interfaces.get(ifname)
    if iface is None:
        return []
    out: list[CheckResult] = []
    if profile.link_gbit and iface.speed_mbps and iface.speed_mbps < profile.link_gbit * 1000:
        out.append(CheckResult(
            "link speed", "warn", f"{ifname} negotiated {iface.speed_mbps / 1000:g} Gb/s, the {profile.name} profile "
            f"expects {profile.link_gbit:g} Gb/s", host=node.host,
            fix=f"Check the cable and the switch port of {ifname} on {node.host} (auto-negotiation: `ethtool "
                f"{ifname}`), or set network.profile to the link you have."))
    widths = {t.name: t.pcie_width for t in node.twins(ifname) if t.pcie_width}
    if len(set(widths.values())) > 1:
        listed = ", ".join(f"{n} x{w}" for n, w in sorted(widths.items()))
        out.append(CheckResult(
            "pcie width", "warn", f"the two PCIe halves of {ifname}'s port differ: {listed}", host=node.host,
            fix=f"Update {node.host}'s BIOS/firmware (ASUS GX10 before 2026-04 trains the second CX-7 link at x2)."))
    if not out and iface.speed_mbps:
        out.append(CheckResult("link speed", "ok", _iface_text(iface), host=node.host))
    return out


def nccl_libraries(recipe: Recipe, facts: Mapping[str, NodeNet]) -> list[CheckResult]:
    """Which NCCL each node's vLLM would load; a GPU node with none fails; versions must agree across nodes."""
    out: list[CheckResult] = []
    found: dict[str, NodeNet] = {}
    for spec in recipe.nodes:
        node = facts.get(spec.host)
        if node is None:
            continue
        lib = node.nccl
        gpu = _is_gpu(spec.hardware)
        if lib.status == "found":
            found[spec.host] = node
            out.append(CheckResult("nccl", "ok", f"NCCL {lib.version} from {lib.path}", host=spec.host,
                                   details={"path": lib.path, "version": lib.version, "build_id": lib.build_id,
                                            "how": lib.how, "size": lib.size}))
        elif gpu:
            out.append(CheckResult("nccl", "fail", f"vLLM would load no NCCL on {spec.host}: "
                                   f"{lib.error or lib.how or lib.status}", host=spec.host,
                                   fix=f"Install a CUDA build of torch (it brings nvidia-nccl) in {spec.host}'s vLLM "
                                       "environment, or point VLLM_NCCL_SO_PATH at libnccl.so.2."))
        else:
            out.append(CheckResult("nccl", "ok", f"none ({lib.how or lib.status}): a CPU node", host=spec.host))
    return out + _nccl_agreement(found)


def _is_gpu(hardware: str) -> bool:
    try:
        return hardware_profile(hardware).kind == "cuda"
    except Exception:  # noqa: BLE001 - an unknown profile is reported by plan; here it is just "not known GPU"
        return False


def _nccl_agreement(found: Mapping[str, NodeNet]) -> list[CheckResult]:
    if len(found) < 2:
        return []
    versions = {h: n.nccl.version for h, n in found.items()}
    first = next(iter(found))
    ref = found[first].nccl
    out: list[CheckResult] = []
    for host, node in found.items():
        lib = node.nccl
        if lib.version != ref.version:
            listing = ", ".join(f"{h} {v}" for h, v in versions.items())
            out.append(CheckResult("nccl versions", "fail", f"NCCL versions differ across nodes: {listing}",
                                   host=host, fix=f"Install NCCL {ref.version} on {host} (as {first}: {ref.path}), or "
                                   "point VLLM_NCCL_SO_PATH at the same library on every node."))
        elif ref.build_id and lib.build_id and lib.build_id != ref.build_id:
            out.append(CheckResult(
                "nccl versions", "warn", f"NCCL {lib.version} on {host} is a different build from {first}'s "
                f"({lib.path} build {lib.build_id[:12]} vs {ref.path} build {ref.build_id[:12]})", host=host,
                fix=f"Use one build everywhere (pip's nvidia-nccl and DGX OS's libnccl2 differ; vllm#42354): "
                    f"VLLM_NCCL_SO_PATH={ref.path} on every node, or the same wheel."))
    return out


def socket_ifnames(recipe: Recipe, index: int, node: NodeNet, want: str | None, ref: str) -> list[CheckResult]:
    """NCCL_SOCKET_IFNAME must select ``want`` (the interface holding the node's data_ip); GLOO_SOCKET_IFNAME must
    name an interface the node has."""
    env, host = rank_env(recipe, index), recipe.nodes[index].host
    out: list[CheckResult] = []
    nccl = env.get("NCCL_SOCKET_IFNAME")
    fix = f"Set nodes[{index}].nccl_socket_ifname: '={want}' (or run {APPLY.format(ref=ref)})"
    if nccl and want and not matches(nccl, want):
        picked = sorted(n for n in node.interfaces if matches(nccl, n) and n != "lo")
        out.append(CheckResult("nccl_socket_ifname", "fail", f"NCCL_SOCKET_IFNAME={nccl} on {host} does not select "
                               f"{want} (the data interface); it selects {', '.join(picked) or 'nothing'}",
                               fix=fix, host=host))
    elif nccl and want:
        out.append(CheckResult("nccl_socket_ifname", "ok", f"NCCL_SOCKET_IFNAME={nccl} selects {want}", host=host))
    gloo = env.get("GLOO_SOCKET_IFNAME")
    if gloo and gloo not in node.interfaces:
        out.append(CheckResult("gloo_socket_ifname", "fail", f"GLOO_SOCKET_IFNAME={gloo}: {host} has no such "
                               "interface", fix=f"Set nodes[{index}].gloo_socket_ifname: {want or 'IFNAME'} "
                               f"(or run {APPLY.format(ref=ref)})", host=host))
    elif gloo and want and gloo != want:
        out.append(CheckResult("gloo_socket_ifname", "warn", f"GLOO_SOCKET_IFNAME={gloo} on {host} is not the data "
                               f"interface {want}", fix=f"Set nodes[{index}].gloo_socket_ifname: {want}", host=host))
    return out


def ib_settings(recipe: Recipe, index: int, node: NodeNet, derived: NodeSettings, ref: str) -> list[CheckResult]:
    """NCCL_IB_HCA against the peer-facing HCAs, and the RoCE v2 GID index per HCA."""
    host, env = recipe.nodes[index].host, rank_env(recipe, index)
    active = sorted(h for h, d in node.rdma.items() if any(p.active for p in d.ports))
    if not active:
        return []
    want = derived.ib_hca
    configured = env.get("NCCL_IB_HCA")
    used = [h for h in active if matches(configured, h)] if configured else active
    out: list[CheckResult] = []
    value = "=" + ",".join(want)
    if sorted(used) != sorted(want):
        extra, missing = sorted(set(used) - set(want)), sorted(set(want) - set(used))
        what = "; ".join(x for x in (f"also {', '.join(extra)} (a port that does not reach the peers: NCCL pairs "
                                     "HCAs by position and times out)" if extra else "",
                                     f"not {', '.join(missing)} (half the bandwidth of the port)" if missing else "")
                         if x)
        out.append(CheckResult("nccl_ib_hca", "warn", f"NCCL would use {', '.join(used) or 'no HCA'} on {host}: "
                               f"{what}", fix=f"Set nodes[{index}].nccl_ib_hca: '{value}' (or run "
                               f"{APPLY.format(ref=ref)})", host=host))
    else:
        out.append(CheckResult("nccl_ib_hca", "ok", f"NCCL uses {', '.join(used)}", host=host))
    return out + [gid_verdict(recipe, index, node, derived)]


def gid_verdict(recipe: Recipe, index: int, node: NodeNet, derived: NodeSettings) -> CheckResult:
    host, env = recipe.nodes[index].host, rank_env(recipe, index)
    shown = ", ".join(f"{h}={'none' if i is None else i}" for h, i in derived.gid_index.items())
    forced = env.get("NCCL_IB_GID_INDEX")
    details = {"gid_index": dict(derived.gid_index)}
    if forced is not None:
        bad = [h for h, i in derived.gid_index.items() if str(i) != forced.strip()]
        if bad:
            return CheckResult("gid index", "fail", f"NCCL_IB_GID_INDEX={forced!r} on {host} but the RoCE v2 IPv4 "
                               f"entries are {shown}", details=details, host=host,
                               fix=f"Remove NCCL_IB_GID_INDEX for {host} (unset, not empty: an empty value means 0); "
                                   "NCCL >= 2.21.5 picks each HCA's entry itself.")
    old = node.nccl.version and version_tuple(node.nccl.version) < NCCL_AUTO_GID
    if old and forced is None:
        uniform = derived.uniform_gid_index
        fix = (f"Set nodes[{index}].nccl_ib_gid_index: {uniform}" if uniform is not None else
               "Upgrade NCCL to 2.21.5 or later (the HCAs need different indices)")
        return CheckResult("gid index", "warn", f"NCCL {node.nccl.version} on {host} defaults to GID index 0 "
                           f"(link-local); the RoCE v2 IPv4 entries are {shown}", fix=fix, details=details, host=host)
    if any(i is None for i in derived.gid_index.values()):
        return CheckResult("gid index", "warn", f"no RoCE v2 IPv4 GID on some HCA of {host}: {shown}",
                           fix=f"Give the netdev of that HCA an IPv4 address on {host} (each twin its own subnet).",
                           details=details, host=host)
    spread = "" if derived.uniform_gid_index is not None else " (they differ: never force one NCCL_IB_GID_INDEX)"
    return CheckResult("gid index", "ok", f"RoCE v2 IPv4 GID per HCA: {shown}{spread}; NCCL picks these itself",
                       details=details, host=host)
