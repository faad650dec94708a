"""The simulator's engine steps keep their scripted length when the host's own work is slow.

In vLLM the API server streams a step's tokens while the next step runs on the GPUs; in the
simulator both share one event loop, so without pacing every chunk written and every scheduling
delay of a busy machine lengthened the step. CI measured it: beside both lab lanes, at 32 streams
and k=0 (the most steps, so the most host work per token) the simulator gave 192 tok/s where its
load model says 227, k=0 and k=1 came out 0.5 % apart instead of ~10 %, and the tune test could not
tell them apart. The clock is injected: these are exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.lab.vllm_sim.engine import Engine
from tpwarden.lab.vllm_sim.faults import FaultWatcher
from tpwarden.lab.vllm_sim.logfmt import VllmLog
from tpwarden.lab.vllm_sim.metrics import Metrics

STEP = 0.040


async def _no_collective(kind: str, dur: float) -> None:
    return None


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine(
        k=0,
        max_num_seqs=32,
        max_batched=8192,
        kv_capacity=100_000,
        collective=_no_collective,
        faults=FaultWatcher(tmp_path / "faults.json", 0, argv=[]),
        metrics=Metrics("glm-sim", 0),
        log=VllmLog(),
        step_scale=1.0,
        timeout_s=300.0,
        ring_warn_s=60.0,
        seed=0,
    )


def test_a_step_after_an_idle_wait_sleeps_its_whole_length(engine: Engine) -> None:
    assert engine._pace(STEP, now=100.0) == pytest.approx(STEP)


def test_the_hosts_work_between_steps_is_taken_from_the_next_step(engine: Engine) -> None:
    engine._pace(STEP, now=100.0)  # due at 100.040
    # the sleep ended 12 ms late (a busy loop) and emitting took 5 ms more: 17 ms of host work
    assert engine._pace(STEP, now=100.057) == pytest.approx(STEP - 0.017)
    # so the steps end on the scripted clock: 100.040, 100.080, 100.120
    assert engine._due == pytest.approx(100.080)
    assert engine._pace(STEP, now=100.080) == pytest.approx(STEP)
    assert engine._due == pytest.approx(100.120)


def test_a_host_slower_than_a_step_slows_the_engine_without_a_burst(engine: Engine) -> None:
    engine._pace(STEP, now=100.0)
    # 300 ms of host work (a stall): this step is owed at most its own length, so it does not
    # sleep, and the step after it is a whole step again, not a catch-up of the other 260 ms
    assert engine._pace(STEP, now=100.340) == 0.0
    assert engine._pace(STEP, now=100.340) == pytest.approx(STEP)


def test_steps_of_different_lengths_each_keep_their_own(engine: Engine) -> None:
    engine._pace(0.100, now=10.0)  # a prefill chunk, due at 10.100
    assert engine._pace(0.020, now=10.105) == pytest.approx(0.015)
    assert engine._due == pytest.approx(10.120)
