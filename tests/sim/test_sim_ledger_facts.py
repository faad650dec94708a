"""What the ledger reads of the simulator is what it reads of real vLLM: `vllm:cache_config_info`
(the KV size the boot computed, as blocks), and a GPU clock cap that slows every step, as a
lower clock slows a real GPU (the lab mounts each rank's NVML stand-in state)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from tpwarden.cluster.ledger.fingerprint import cache_config_rows
from tpwarden.cluster.vllm.metrics import info_labels

from .test_sim_load import LOAD_ENV, _run


def _state(path: Path, cap: int) -> None:
    path.write_text(f"sm_clock_max_mhz=3003\nlocked_clock_min_mhz=0\nlocked_clock_max_mhz={cap}\n")


def test_cache_config_info_says_the_kv_size(sim_factory) -> None:
    blocks16 = 0
    for gib in (16, 12):
        c = sim_factory(nnodes=1, k=3, extra=["--kv-cache-memory-bytes", f"{gib}G"]).start()
        c.wait_ready()
        page = httpx.get(c.url + "/metrics", timeout=10).text
        c.stop()
        (labels,) = info_labels(page, "vllm:cache_config_info")
        rows = cache_config_rows(labels)
        assert rows["engine.kv.kv_cache_memory_bytes"] == str(gib * 2**30)
        assert int(rows["engine.kv.num_gpu_blocks"]) > 0
        if gib == 16:
            blocks16 = int(rows["engine.kv.num_gpu_blocks"])
    assert int(rows["engine.kv.num_gpu_blocks"]) * 4 == blocks16 * 3  # 12 GiB: 3/4 the blocks


def test_a_lower_clock_cap_slows_the_steps(sim_factory, tmp_path: Path) -> None:
    states = [tmp_path / f"rank{i}" for i in range(1)]
    rates = {}
    for cap in (2000, 1000):
        for s in states:
            _state(s, cap)
        env = {**LOAD_ENV, "VLLM_SIM_GPU_STATES": ",".join(map(str, states))}
        c = sim_factory(nnodes=1, k=3, env=env).start()
        c.wait_ready()
        rates[cap] = max(asyncio.run(_run(c.url, 1))[1] for _ in range(2))
        c.stop()
    # steps scale by 2000 / clock: 1000 MHz takes twice as long a step (a busy machine adds the
    # same delay to both, and a request's own overhead does not scale: well above half speed)
    assert rates[1000] < 0.75 * rates[2000], rates
