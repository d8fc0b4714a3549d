"""`forklift net check` on three nodes: the namespace cluster of tests/cluster/net_faults.py (real sshd per node,
iperf3 between namespaces), healthy data IPs on the shared bridge. Target: under 30 s for 3 nodes (issue 18).

Measures the CLI's wall time (process start to exit, including Python start-up and imports) and the report's own
``seconds`` (gather, routes, ports, three iperf3 pairs). Root only; skipped with the reason elsewhere. Writes
bench-results/net_check.json. Run: `python -m benchmarks.net_check [RUNS]`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path("bench-results")
TARGET_S = 30.0


def _recipe(folder: Path) -> Path:
    nodes = "\n".join(f"  - {{host: node-{x}, ssh: root@10.231.0.{i + 1}, data_ip: 10.231.0.{i + 1}}}"
                      for i, x in enumerate("abc"))
    path = folder / "bench-net.yaml"
    path.write_text(f"""model: {{source: "bundled:smollm2-135m-instruct"}}
runtime: {{kind: venv, python: {sys.executable}}}
nodes:
{nodes}
parallel: {{pp: 3}}
network: {{master_port: 29531, profile: ethernet-1g}}
""")
    return path


def _once(cluster: object, recipe: Path, home: Path) -> dict[str, float | int]:
    from tests.cluster.netns import NetCluster

    assert isinstance(cluster, NetCluster)
    env = dict(os.environ, FORKLIFT_HOME=str(home), FORKLIFT_SSH_CONFIG=str(cluster.ssh_config))
    argv = cluster.exec_argv(0, sys.executable, "-m", "forklift.cli.main", "net", "check", str(recipe), "--json")
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=300)  # noqa: S603
    wall = time.monotonic() - t0
    if res.returncode not in (0, 1):
        raise RuntimeError(f"net check failed ({res.returncode}): {res.stderr[-800:]}")
    report = json.loads(res.stdout)
    fails = sum(1 for c in report["checks"] if c["status"] == "fail")
    return {"wall_s": round(wall, 2), "report_s": report["seconds"], "checks": len(report["checks"]), "fails": fails,
            "iperf3_pairs": sum(1 for b in report["bandwidth"] if b["tool"] == "iperf3")}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    runs = int(args[0]) if args else 3
    OUT.mkdir(exist_ok=True)
    from tests.cluster import net_faults, netns

    reason = net_faults.unavailable_reason()
    if reason:
        print(f"net_check: skipped ({reason})")
        (OUT / "net_check.json").write_text(json.dumps({"skipped": reason}, indent=2))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="fl-bench-net-"))
    cluster = net_faults.build(tmp / "cluster", "bench")
    try:
        recipe = _recipe(tmp)
        results = [_once(cluster, recipe, tmp / "home") for _ in range(runs)]
    finally:
        netns.stop(cluster)
        shutil.rmtree(tmp, ignore_errors=True)
    wall = statistics.median(r["wall_s"] for r in results)
    summary = {"nodes": 3, "runs": results, "median_wall_s": wall,
               "median_report_s": statistics.median(r["report_s"] for r in results), "target_s": TARGET_S,
               "under_target": wall < TARGET_S, "host": platform.node(), "cpus": os.cpu_count(),
               "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (OUT / "net_check.json").write_text(json.dumps(summary, indent=2))
    print(f"net check, 3 nodes: median {wall:.1f} s wall ({summary['median_report_s']:.1f} s in the report), "
          f"target {TARGET_S:.0f} s")
    return 0 if summary["under_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
