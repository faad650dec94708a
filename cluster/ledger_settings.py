"""`tpwarden.ledger`: where the configuration ledger lives and what its canary measures (issue
53). Validated once with the other settings (cluster/settings.py); docs/ledger.md explains
them. The defaults keep a canary's cost within 1 % of a 12-hour night (bench/ledger_cost.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from tpwarden.cluster.report_settings import clock_time, zone_name


class _Model(BaseModel):
    # as cluster/settings.py's models: unknown keys and wrong types are errors at load time
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class CanarySpec(_Model):
    levels: list[int] = Field(
        default_factory=lambda: [1, 4],
        min_length=1,
        max_length=4,
        description="Concurrency levels: 1 (one stream, what the field report lost) and one "
        "higher level.",
    )
    repeats: int = Field(
        5, ge=2, le=20, description="Measured repeats per level (the median kept)."
    )
    warmups: int = Field(1, ge=0, le=5, description="Unmeasured warm-up runs per level.")
    num_prompts: int = Field(4, ge=1, le=64, description="Requests per repeat.")
    output_len: int = Field(
        64, ge=8, le=4096, description="Output tokens per request (--ignore-eos)."
    )
    seed: int = Field(
        0, ge=0, description="--seed of every repeat: the same prompts in the same order."
    )
    prompts: str | None = Field(
        None, description="JSONL prompt set ({\"prompt\": ...} per line); default: the shipped "
        "canary set (Korean and English prose, code).",
    )  # fmt: skip
    quiet_hours: list[str] = Field(
        default_factory=lambda: ["03:30"],
        max_length=24,
        description="Times of day (HH:MM in `tz`) at which the watchdog runs a canary if the "
        "server is idle; [] for none.",
    )
    tz: str = Field("UTC", description="IANA time zone of quiet_hours, e.g. Asia/Seoul.")
    after_change: bool = Field(
        True, description="Run a canary once the server is idle after each new configuration."
    )
    idle_window_s: float = Field(
        3.0, ge=1.0, le=60.0, description="Seconds of idle /metrics before a canary starts."
    )
    client_node: str | None = Field(
        None, description="Node of the client container (default: head)."
    )
    timeout_s: float = Field(1800.0, ge=60.0, description="A canary stops (failed) after this.")

    @field_validator("prompts")
    @classmethod
    def _prompts(cls, value: str | None) -> str | None:
        return _absolute(value)

    @field_validator("quiet_hours")
    @classmethod
    def _clocks(cls, value: list[str]) -> list[str]:
        for v in value:
            clock_time(v)
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str) -> str:
        return zone_name(value)

    @field_validator("levels")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        if any(v < 1 or v > 256 for v in value) or len(set(value)) != len(value):
            raise ValueError("levels are distinct concurrencies from 1 to 256, e.g. [1, 4]")
        return sorted(value)


class LedgerSpec(_Model):
    path: str | None = Field(
        None,
        description="The ledger's SQLite file; default <state dir>/ledger/<cluster>.sqlite on the "
        "machine that records (the control machine, or the watchdog's host).",
    )
    canary: CanarySpec = CanarySpec()

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return _absolute(value)


def _absolute(value: str | None) -> str | None:
    if value is not None and not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return value
