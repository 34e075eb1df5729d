"""SmolLM3: Llama's names, but every fourth layer has no rotary embedding (NoPE): ``no_rope_layers`` is 1 where
a layer rotates."""

from dataclasses import dataclass
from typing import Any

from sinkscope.core.families.base import Family


@dataclass(frozen=True)
class SmolLM3(Family):
    def rope_layers(self, config: Any) -> tuple[bool, ...]:
        return tuple(bool(uses) for uses in config.no_rope_layers)


SMOLLM3 = SmolLM3("SmolLM3", ("smollm3",), sliding_windows=True)

FAMILIES = (SMOLLM3,)
