"""Deployment settings, read from environment variables (Streamlit also exports root-level secrets there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sinkscope.core.bundled import BUNDLED

TRUE = {"1", "true", "yes", "on"}
MB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """What a deployment allows. ``hosted`` is the public mode: bundled models only, tighter limits."""

    hosted: bool
    models: tuple[str, ...]  # allowlist in hosted mode; empty means any model outside it
    max_tokens: int
    max_upload_bytes: int
    cache_bytes: int  # every cached result (analyses, maps, lessons, lab runs) together
    session_cache_bytes: int  # what one session's results may hold
    max_lab_steps: int  # the longest training run the lab will start
    max_census_rows: int  # an uploaded or opened census table, checked from its metadata before it is read
    max_census_mb: int  # the same table decompressed

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Settings:
        hosted = str(env.get("SINKSCOPE_HOSTED", "0")).strip().lower() in TRUE
        listed = [m.strip() for m in str(env.get("SINKSCOPE_MODELS", "")).split(",") if m.strip()]
        models = tuple(listed) if listed else tuple(BUNDLED) if hosted else ()
        return Settings(
            hosted=hosted,
            models=models,
            max_tokens=int(env.get("SINKSCOPE_MAX_TOKENS", 512 if hosted else 2048)),
            max_upload_bytes=int(env.get("SINKSCOPE_MAX_UPLOAD_KB", 200 if hosted else 5000)) * 1024,
            cache_bytes=int(env.get("SINKSCOPE_CACHE_MB", 768 if hosted else 2048)) * MB,
            session_cache_bytes=int(env.get("SINKSCOPE_SESSION_CACHE_MB", 160 if hosted else 1024)) * MB,
            max_lab_steps=int(env.get("SINKSCOPE_MAX_LAB_STEPS", 2000 if hosted else 10_000)),
            max_census_rows=int(env.get("SINKSCOPE_MAX_CENSUS_ROWS", 300_000 if hosted else 5_000_000)),
            max_census_mb=int(env.get("SINKSCOPE_MAX_CENSUS_MB", 64 if hosted else 1024)),
        )

    @property
    def max_text_chars(self) -> int:
        """The most characters the text box takes, pasted or from a link: as many as an upload may have bytes."""
        return self.max_upload_bytes

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models
