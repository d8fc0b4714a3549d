"""GPU-name matching and per-platform choices are profile data (hardware/profiles.yaml), read through the probe."""

from __future__ import annotations

import pytest

from forklift.hardware.detect import profile_for_gpu
from forklift.hardware.profiles import bundled, node_profile
from forklift.node import resolve_profile
from forklift.runner import FakeRunner

# The table that was code before it became data: every name keeps its profile.
WAS = [("GB10", "gb10"), ("GH200", "gh200"), ("H200", "h200"), ("H100", "h100"), ("H20", "h20"),
       ("B200", "b200"), ("A100-SXM4-80GB", "a100-80"), ("A100 80GB", "a100-80"), ("A100-PCIE-80GB", "a100-80"),
       ("A100", "a100-40"), ("L40S", "l40s"), ("RTX 3090", "rtx3090"), ("RTX 4090", "rtx4090"),
       ("RTX 5090", "rtx5090"), ("RTX 5070 Ti", "rtx5070ti")]


@pytest.mark.parametrize(("part", "profile"), WAS)
def test_nvidia_smi_names_match_the_profile_they_always_did(part: str, profile: str) -> None:
    assert profile_for_gpu(f"NVIDIA {part}") == profile
    assert profile_for_gpu(f"NVIDIA {part} NVL") == profile


def test_most_specific_name_wins_and_unknown_names_match_nothing() -> None:
    assert profile_for_gpu("NVIDIA GH200 480GB") == "gh200"
    assert profile_for_gpu("NVIDIA H200 NVL") == "h200"
    assert profile_for_gpu("NVIDIA A100-SXM4-80GB") == "a100-80"
    assert profile_for_gpu("Tesla T4") is None


def test_every_cuda_profile_names_its_gpus_and_only_gb10_implies_a_node_profile() -> None:
    assert all(p.gpu_names for p in bundled().values() if p.kind == "cuda")
    assert {n: p.node_profile for n, p in bundled().items() if p.node_profile} == {"gb10": "gb10"}
    assert node_profile("spark") == "gb10" and node_profile("h200") is None and node_profile("nope") is None


def test_auto_node_profile_follows_the_probed_gpu() -> None:
    spark = FakeRunner("spark-1").on(["nvidia-smi"], stdout="0, NVIDIA GB10, [N/A], [N/A], [N/A], 580.95.05\n")
    assert resolve_profile(spark, "auto").name == "gb10"
    h200 = FakeRunner("h").on(["nvidia-smi"], stdout="0, NVIDIA H200, 143771, 143000, 771, 570.86.15\n")
    assert resolve_profile(h200, None).name == "default"
    cpu = FakeRunner("c").on(["nvidia-smi"], returncode=127)
    assert resolve_profile(cpu, "auto").name == "default"
