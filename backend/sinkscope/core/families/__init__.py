"""One adapter per decoder family, and the registry that finds a model's.

Adding a family is one file here (a ``Family`` record, or a subclass where a lookup differs) and one row of
the family matrix in tests/test_families.py. A model type outside the registry gets Llama's layout, marked
untested; ``sinkscope.core.models`` then checks at load that every layer's attention reaches Sinkscope.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sinkscope.core.errors import ModelLoadError
from sinkscope.core.families import gemma, gpt2, gpt_neox, gpt_oss, llama, olmo2, smollm3
from sinkscope.core.families.base import Family, Refused
from sinkscope.core.families.refused import REFUSED
from sinkscope.core.i18n import Message

FAMILIES: tuple[Family, ...] = (
    *llama.FAMILIES, *gemma.FAMILIES, *gpt2.FAMILIES, *gpt_neox.FAMILIES, *olmo2.FAMILIES, *gpt_oss.FAMILIES,
    *smollm3.FAMILIES,
)  # fmt: skip
_BY_TYPE: dict[str, Family] = {model_type: family for family in FAMILIES for model_type in family.model_types}
_REFUSED: dict[str, Refused] = {model_type: refused for refused in REFUSED for model_type in refused.model_types}

__all__ = ["FAMILIES", "REFUSED", "Family", "Refused", "check_supported", "family_of", "supported_names"]


def _model_type(config: Any) -> str:
    return config.get_text_config().model_type


def supported_names() -> str:
    """The measured families, for messages: "Llama, Mistral, ..."."""
    return ", ".join(family.name for family in FAMILIES)


def check_supported(config: Any) -> None:
    """Refuse a family Sinkscope cannot measure exactly, naming it and what is supported (a ModelLoadError)."""
    refused = _REFUSED.get(_model_type(config))
    if refused is not None:
        raise ModelLoadError(
            "error.family_refused", family=refused.name, reason=Message.of(refused.reason), supported=supported_names()
        )


def family_of(config: Any) -> Family:
    """The family of a model's config; an unknown model type gets Llama's layout, marked untested."""
    model_type = _model_type(config)
    return _BY_TYPE.get(model_type) or replace(llama.LLAMA, name=model_type, model_types=(model_type,), tested=False)
