"""One prefix grammar for every form a vLLM log line reaches us in; each form is a real line
(source in the comment)."""

from __future__ import annotations

import pytest
from tpwarden.cluster.boot.rules import parse_line
from tpwarden.cluster.vllm.log_prefix import parse_prefix

FORMS = [
    # (line, process, pid, ip, level, text starts with); sources:
    # plain 0.8+ (0.25.1 reference boot)
    (
        "(EngineCore pid=23397) INFO 08-01 20:59:16 [core.py:114] Initializing a V1 LLM engine "
        "(v0.25.1) with config: model='x'",
        "EngineCore",
        23397,
        None,
        "INFO",
        "Initializing a V1 LLM engine",
    ),
    # ANSI-coloured prefix, 0.5 (vllm-project/vllm#5084)
    (
        "\x1b[1;36m(VllmWorkerProcess pid=1078909)\x1b[0;0m ERROR 06-17 15:30:29 "
        "multiproc_worker_utils.py:226]     data = broadcast_tensor_dict(src=0)",
        "VllmWorkerProcess",
        1078909,
        None,
        "ERROR",
        "    data = broadcast_tensor_dict(src=0)",
    ),
    # Ray worker with ip= (vllm-project/vllm#8447, 0.6.x; IP replaced)
    (
        "(RayWorkerWrapper pid=248, ip=192.0.2.68) INFO 09-12 23:40:47 pynccl.py:63] vLLM is "
        "using nccl==2.20.5",
        "RayWorkerWrapper",
        248,
        "192.0.2.68",
        "INFO",
        "vLLM is using nccl==2.20.5",
    ),
    # CI runner timestamp + Ray failure (pytorch/pytorch#175666)
    (
        "[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ray.exceptions.RayTaskError(ValueError)"
        ": ray::RayWorkerWrapper.execute_method() (pid=7106, ip=192.0.2.10)",
        "EngineCore_DP0",
        6940,
        None,
        None,
        "ray.exceptions.RayTaskError(ValueError)",
    ),
    # docker logs -t / kubectl logs --timestamps (RFC 3339, nanoseconds)
    (
        "2026-05-01T19:38:43.315123456Z (APIServer pid=1) INFO:     Application startup complete.",
        "APIServer",
        1,
        None,
        "INFO",
        "Application startup complete.",
    ),
    # Docker Desktop's view (0.20.0 fixture)
    (
        "2026-05-01 21:36:09.624 | Loading safetensors checkpoint shards:  33% Completed | 1/3 "
        "[00:54<01:48, 54.34s/it]",
        None,
        None,
        None,
        None,
        "Loading safetensors checkpoint shards",
    ),
    # docker compose logs on top of docker -t
    (
        "vllm-1  | 2026-05-01T19:41:37.117Z (APIServer pid=1) ERROR 05-01 19:41:37 "
        "[serving.py:218] Error with model",
        "APIServer",
        1,
        None,
        "ERROR",
        "Error with model",
    ),
    # 0.8 worker naming with rank (vllm-project/vllm#17939)
    (
        "(VllmWorker rank=1 pid=2445156)     worker.shutdown()",
        "VllmWorker",
        2445156,
        None,
        None,
        "    worker.shutdown()",
    ),
    # <= 0.7 format without the opening bracket (vllm-project/vllm#11903)
    (
        "INFO 01-09 07:33:45 llm_engine.py:431] init engine (profile, create kv cache, warmup "
        "model) took 57.23 seconds",
        None,
        None,
        None,
        "INFO",
        "init engine",
    ),
]


@pytest.mark.parametrize("line,proc,pid,ip,level,text", FORMS)
def test_prefix_forms(line, proc, pid, ip, level, text):
    ln = parse_prefix(line)
    assert (ln.process, ln.pid, ln.ip, ln.level) == (proc, pid, ip, level)
    assert ln.text.startswith(text)


def test_a_ray_workers_error_is_an_event():
    (ev,) = parse_line(
        "(RayWorkerWrapper pid=581, ip=192.0.2.18) ERROR 09-12 23:41:00 worker_base.py:464] "
        "Error executing method determine_num_available_blocks. This might cause deadlock in "
        "distributed execution."
    )
    assert ev.kind == "note" and ev.level == "ERROR"
    assert ev.who == "RayWorkerWrapper pid=581 ip=192.0.2.18"


def test_coloured_level_and_prefix_give_the_same_events():
    plain = (
        "(EngineCore_DP0 pid=9) INFO 12-02 10:38:00 [kv_cache_utils.py:1149] GPU KV cache size:"
        " 643,232 tokens"
    )
    coloured = (
        "\x1b[1;36m(EngineCore_DP0 pid=9)\x1b[0;0m \x1b[32mINFO\x1b[0m 12-02 10:38:00 "
        "[kv_cache_utils.py:1149] GPU KV cache size: 643,232 tokens"
    )
    (a,) = parse_line(plain)
    (b,) = parse_line(coloured)
    assert (a.kind, dict(a.data), a.who, a.level) == (b.kind, dict(b.data), b.who, b.level)
