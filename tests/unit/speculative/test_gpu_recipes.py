"""The H200 measurement's recipes (scripts/gpu/specdec/) load, plan and render what the device script expects."""

from __future__ import annotations

import json

from forklift import recipe as recipes
from forklift.plan import make
from tests.helpers import REPO, launch_of

D = REPO / "scripts" / "gpu" / "specdec"


def _config(name: str) -> dict[str, object]:
    launch = launch_of(recipes.load(str(D / "recipes" / f"{name}.yaml")))
    argv = launch.ranks[0].argv
    return json.loads(argv[argv.index("--speculative-config") + 1]) if "--speculative-config" in argv else {}


def test_baseline_has_no_draft_and_the_ngram_server_the_cpu_benchmarks_config() -> None:
    assert _config("smollm2-base") == {}
    assert _config("smollm2-ngram") == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                                        "prompt_lookup_max": 5}


def test_the_mtp_model_plans_with_its_mtp_layer_on_the_last_stage() -> None:
    cfg = D / "models" / "glm45air-4L-mtp-like.config.json"
    assert json.loads(cfg.read_text())["num_nextn_predict_layers"] == 1
    recipe = recipes.load(str(D / "recipes" / "glm-mtp-dummy.yaml"), [f"model.config={cfg}"])
    plan = make(recipe)
    assert plan.fits and _config("glm-mtp-dummy") == {"method": "mtp", "num_speculative_tokens": 1}
    assert any("1 draft layer(s) of target-shaped KV" in n for n in plan.notes)
