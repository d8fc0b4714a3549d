"""`down` waits for the run's own GPUs to be released, not for other jobs' GPUs on a shared host."""

from __future__ import annotations

from forklift import recipe as recipes
from forklift.cluster.down import _accelerators
from forklift.cluster.up import visible_gpus
from forklift.launch.render import render
from forklift.plan import for_launch
from forklift.record import RunRecord
from forklift.runner import FakeRunner


def _smi(*used_mib: int) -> str:
    """The host probe's nvidia-smi answer: index, name, total, free, used (MiB), driver."""
    return "".join(f"{i}, NVIDIA H200, 143771, 0, {u}, 570.86\n" for i, u in enumerate(used_mib))


def test_a_run_limited_to_gpu_2_ignores_the_other_gpus() -> None:
    plan = for_launch(recipes.load("default", ["env.CUDA_VISIBLE_DEVICES=2"]), force=True)
    launch = render(plan)
    assert visible_gpus(plan.deployment.recipe, launch) == {"localhost": [2]}
    record = RunRecord(name="t", run_id="abc", plan=plan, launch=launch, endpoint=launch.endpoint,
                       served_name="m", gpu_baseline_mib={"localhost": [0, 0, 0, 0]},
                       gpu_indices=visible_gpus(plan.deployment.recipe, launch))
    # GPUs 0, 1 and 3 are busy with someone else's servers; GPU 2 (ours) is back to its baseline
    busy = FakeRunner("localhost").on(["nvidia-smi"], stdout=_smi(70000, 70000, 3, 50000))
    assert _accelerators(record, {0: busy}, plan.deployment.recipe, timeout_s=0) == {"localhost": "released"}
    ours = FakeRunner("localhost").on(["nvidia-smi"], stdout=_smi(0, 0, 60000, 0))
    verdict = _accelerators(record, {0: ours}, plan.deployment.recipe, timeout_s=0)["localhost"]
    assert verdict.startswith("still 60000 MiB")


def test_without_a_limit_every_gpu_counts() -> None:
    plan = for_launch(recipes.load("default"), force=True)
    launch = render(plan)
    record = RunRecord(name="t", run_id="abc", plan=plan, launch=launch, endpoint=launch.endpoint,
                       served_name="m", gpu_baseline_mib={"localhost": [0, 0]})
    busy = FakeRunner("localhost").on(["nvidia-smi"], stdout=_smi(0, 9000))
    assert _accelerators(record, {0: busy}, plan.deployment.recipe, timeout_s=0)["localhost"].startswith("still")
