"""The recipe's ``patches:`` entries: a catalog id, or ``{id, any_version, because}``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from forklift.recipe.strict import Strict

# --- forklift-patches: typed recipe patch entries (owned by the patches helper) -----------------------


def _patch_entry_from_text(value: object) -> object:
    """``kv-scale-loader-args`` -> {id: kv-scale-loader-args}."""
    return {"id": value} if isinstance(value, str) else value


class PatchRef(Strict):
    """One recipe patch: a catalog id, optionally allowed outside the patch's vLLM range (say why)."""

    id: str = Field(min_length=1, description="A patch id from `forklift patch list` (or a path to a patch file).")
    any_version: bool = Field(
        default=False, description="Apply even when the vLLM version is outside the patch's range (a nightly or a "
        "fork build); `because` is required.",
    )
    because: str | None = Field(default=None, description="Why the patch fits this vLLM although its range does "
                                "not say so, e.g. 'nightly 0.1.dev16581 carries the same code'.")

    @model_validator(mode="after")
    def _because_with_any_version(self) -> PatchRef:
        if self.any_version and not (self.because or "").strip():
            raise ValueError(f"patch {self.id!r}: any_version needs `because` (why this vLLM carries the same code)")
        if self.because is not None and not self.any_version:
            raise ValueError(f"patch {self.id!r}: `because` explains any_version; set any_version: true or drop it")
        return self

    @model_serializer(mode="wrap")
    def _plain_id(self, handler: SerializerFunctionWrapHandler) -> object:
        return self.id if not self.any_version else handler(self)


PatchEntry = Annotated[PatchRef, BeforeValidator(_patch_entry_from_text)]

# --- end forklift-patches ------------------------------------------------------------------------------
