"""OLMo-2: post-norm blocks (the norm follows attention), so attention reads h^l itself, through q/k norms."""

from sinkscope.core.families.base import Family

OLMO2 = Family("OLMo-2", ("olmo2",), input_norm=None)

FAMILIES = (OLMO2,)
