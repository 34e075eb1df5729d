"""OLMo-2 and OLMo-3: post-norm blocks (the norm follows attention), so attention reads h^l itself, through q/k
norms; OLMo-3 mixes sliding-window and full layers."""

from sinkscope.core.families.base import Family
from sinkscope.core.families.gemma import POST_NORMS

OLMO2 = Family("OLMo-2", ("olmo2",), input_norm=None, **POST_NORMS)

OLMO3 = Family("OLMo-3", ("olmo3",), input_norm=None, sliding_windows=True, **POST_NORMS)

FAMILIES = (OLMO2, OLMO3)
