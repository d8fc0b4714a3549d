"""The recipe: what the user wants deployed. Pure data, pydantic v2, unknown keys are errors.

Every knob that changes memory or speed is a typed field; ``serve.extra_args`` is the escape hatch
that ``plan`` warns about. ``Recipe`` is here; each section's models are in a module of their own (``model_section``,
``runtime``, ``topology``, ``serving``, ``supervision``, ``patch_refs``; the base ``strict``), re-exported here.
"""

from __future__ import annotations

from pydantic import Field

from forklift.recipe.model_section import BUNDLED_PREFIX as BUNDLED_PREFIX  # re-exported, with the names below
from forklift.recipe.model_section import Capabilities as Capabilities
from forklift.recipe.model_section import ModelSection as ModelSection
from forklift.recipe.model_section import is_hub_id as is_hub_id
from forklift.recipe.patch_refs import PatchEntry as PatchEntry
from forklift.recipe.patch_refs import PatchRef as PatchRef
from forklift.recipe.runtime import DockerRuntime as DockerRuntime
from forklift.recipe.runtime import Mount as Mount
from forklift.recipe.runtime import Runtime as Runtime
from forklift.recipe.runtime import VenvRuntime as VenvRuntime
from forklift.recipe.serving import KvCacheDtype as KvCacheDtype
from forklift.recipe.serving import Multimodal as Multimodal
from forklift.recipe.serving import Quantization as Quantization
from forklift.recipe.serving import Serve as Serve
from forklift.recipe.strict import EnvMap as EnvMap
from forklift.recipe.strict import Strict as Strict
from forklift.recipe.supervision import Supervise as Supervise
from forklift.recipe.supervision import Timeouts as Timeouts
from forklift.recipe.topology import Network as Network
from forklift.recipe.topology import Node as Node
from forklift.recipe.topology import Parallel as Parallel
from forklift.recipe.topology import Ray as Ray


class Recipe(Strict):
    """A deployment: model, nodes, parallelism, serving knobs, patches, env."""

    name: str | None = Field(default=None, description="Recipe name (filled from the file name).")
    description: str | None = None
    extends: str | None = Field(default=None, description="Another recipe (name or path) this one overrides.")
    model: ModelSection
    runtime: Runtime = Field(default_factory=VenvRuntime)
    nodes: list[Node] = Field(default_factory=lambda: [Node()], min_length=1)
    cluster: str | None = Field(
        default=None, description="A named cluster file (name under $FORKLIFT_HOME/clusters/ or a path) "
        "whose nodes (and network) replace this recipe's.",
    )
    parallel: Parallel = Field(default_factory=Parallel)
    serve: Serve = Field(default_factory=Serve)
    network: Network = Field(default_factory=Network)
    ray: Ray = Field(default_factory=Ray)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    supervise: Supervise = Field(default_factory=Supervise, description="The supervisor's probes, restarts, "
                                 "backoff, memory gate and event hook (used with `up --supervise`).")
    env: EnvMap = Field(default_factory=dict, description="Extra environment for every rank.")
    patches: list[PatchEntry] = Field(  # forklift-patches: an id, or {id, any_version, because}
        default_factory=list, description="Patches applied before vLLM starts: ids from `forklift patch list`, or "
        "{id: ID, any_version: true, because: WHY} to apply one outside its vLLM range.",
    )

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def patch_ids(self) -> list[str]:  # forklift-patches
        return [p.id for p in self.patches]

    @property
    def served_name(self) -> str:
        return self.model.default_served_name()
