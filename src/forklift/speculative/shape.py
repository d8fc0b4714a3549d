"""What the speculative rules and sizing read of the target model (``forklift.model.spec.ModelSpec`` has it;
this package sits beside ``forklift.model`` and takes it structurally)."""

from __future__ import annotations

from typing import Protocol


class ModelShape(Protocol):
    @property
    def architecture(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def mtp_layers(self) -> int: ...

    @property
    def hidden_size(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def num_layers(self) -> int: ...
