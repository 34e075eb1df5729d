"""gpt-oss: a learned sink logit per head (``s_aux``), so a row's weights on real keys sum to less than one;
sliding-window and full layers alternate; YaRN rotary."""

from sinkscope.core.families.base import Family

GPT_OSS = Family("gpt-oss", ("gpt_oss",), learned_sinks=True, sliding_windows=True)

FAMILIES = (GPT_OSS,)
