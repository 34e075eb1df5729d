"""Families whose attention Sinkscope cannot measure exactly: refused at load with the reason (a catalogue key)."""

from sinkscope.core.families.base import Refused

REFUSED = (Refused("RWKV", ("rwkv",), "family.refused.rwkv"),)
