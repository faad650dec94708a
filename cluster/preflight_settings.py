"""`tpwarden.memory` and `tpwarden.fabric`: what pre-flight checks on a node before a start
(issue 52 items 2 and 3). Validated once with the other settings (cluster/settings.py); neither
changes what runs, so neither is part of the config hash."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    # as cluster/settings.py's models: unknown keys and wrong types are errors at load time
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class MemorySpec(_Model):
    """Memory before a (re)start: vLLM refuses to start when free memory is below
    gpu_memory_utilization x total; on GB10 the CPU and GPU share that memory."""

    check: bool = Field(
        True,
        description="Before up, restart and every watchdog restart, check each node's available "
        "memory against what the engine will ask (gpu_memory_utilization x total); a node short "
        "of it fails pre-flight with the figures, before any container stops.",
    )
    drop_page_cache: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Drop the page cache first (sync; echo 3 > /proc/sys/vm/drop_caches, as "
        "root, as NVIDIA's GB10 playbooks do before vLLM): auto = on unified-memory nodes "
        "(NVML reports no memory of the GPU's own).",
    )


class FabricSpec(_Model):
    """Which transport NCCL is expected to use between the nodes."""

    transport: Literal["auto", "rdma", "socket"] = Field(
        "auto",
        description="rdma: pre-flight checks the HCAs, ports and RoCE GIDs and a socket "
        "fall-back after boot is a warning; socket: none expected; auto: rdma when NCCL_IB_HCA "
        "is set or /dev/infiniband is passed to the containers.",
    )
    note: str | None = Field(
        None,
        max_length=40,
        description='Why sockets are expected, shown with them ("sockets (lab)").',
    )
