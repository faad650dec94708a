"""The boot reader on real vLLM logs from public sources (tests/fixtures/real/boot, each file's
header names its source and version): every success reaches READY with its shard counts, every
crash is FAILED with its root cause in the message, every hang stops short of READY without a
failure; a coloured copy and a `docker logs -t` copy of each log read the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tpwarden.cluster.boot.phase import BootPhase
from tpwarden.cluster.boot.progress import BootProgress, read_boot_log

BOOT = Path(__file__).parents[1] / "fixtures" / "real" / "boot"

# file -> (verdict, phase, (shards loaded, total) or None, drafter total, text the error holds)
CORPUS = {
    "v0.6.x_two-node-ray_nccl-hang_issue8447.log": ("incomplete", "rendezvous", None, None, None),
    "v0.10.1_single_free-memory_crash_issue23192.log": (
        "failed",
        "failed",
        None,
        None,
        "free GPU memory below --gpu-memory-utilization: ValueError: Free memory on device "
        "(7.34/139.72 GiB)",
    ),
    "v0.10.2_single_llama3.1-8b_success.log": ("ready", "ready", (4, 4), None, None),
    "v0.10.x_single_free-memory_crash_issue25837.log": (
        "failed",
        "failed",
        None,
        None,
        "free GPU memory below --gpu-memory-utilization: ValueError: Free memory on device "
        "(3.22/4.0 GiB)",
    ),
    "v0.13-era_tp8-ep_attention-backend_crash_issue31480.log": (
        "failed",
        "failed",
        None,
        None,
        "ValueError: No valid attention backend found for cuda",
    ),
    "v0.15.0rc2_gb10_gpt-oss-120b_startup-error_pr31740.log": (
        "incomplete",
        "engine_init",
        None,
        None,
        None,
    ),
    "v0.18.0_ray-head_minimax-m2.5_startup-errors_minimax30.log": (
        "incomplete",
        "engine_init",
        None,
        None,
        None,
    ),
    "v0.19-pre_tp2_mistral4-small_success_error-after-ready.log": (
        "ready",
        "ready",
        (14, 14),
        None,
        None,
    ),
    "v0.20.0_docker-desktop_qwen3.6-nvfp4_success_error-after-ready.log": (
        "ready",
        "ready",
        (3, 3),
        None,
        None,
    ),
    "v0.23.0_rocm_single_never-serves_issue46169.log": (
        "incomplete",
        "engine_init",
        None,
        None,
        None,
    ),
    "v0.25.1_single_dflash_success.log": ("ready", "ready", (49, 49), 1, None),
    # the lab's real engine on a CPU with AMX (issue 49): the head came up, then every worker
    # died on the first request (a note after ready, the crash named: test_boot_crash.py); the
    # worker node's rank died by SIGILL
    "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node1.log": ("ready", "ready", (1, 1), None, None),
    "v0.32.0_lab-cpu_tp4-nnodes4_sigill_node2.log": (
        "failed",
        "failed",
        None,
        None,
        "rank 1 died by SIGILL: an instruction this CPU or its container does not allow",
    ),
    "v0.2x_single_cuda-driver-oom_crash_club3090-60.log": (
        "failed",
        "failed",
        None,
        None,
        "out of memory: RuntimeError: CUDA driver error: out of memory",
    ),
}


def _read(name: str) -> list[str]:
    return (BOOT / name).read_text(encoding="utf-8").splitlines()


def _header(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(":")
        out[key.strip()] = value.strip()
    return out


def _body(lines: list[str]) -> list[str]:
    return [ln for i, ln in enumerate(lines) if not all(x.startswith("# ") for x in lines[: i + 1])]


_PREFIX = re.compile(r"^(\([^)]*\) )?((?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )?")


def _coloured(line: str) -> str:
    """What a TTY shows: vLLM colours the process prefix and (0.11+) the level."""
    m = _PREFIX.match(line)
    proc, level = m.group(1) or "", m.group(2) or ""
    if proc:
        proc = f"\x1b[1;36m{proc.rstrip()}\x1b[0;0m "
    if level:
        level = f"\x1b[32m{level.rstrip()}\x1b[0m "
    return proc + level + line[m.end() :]


def _docker_ts(lines: list[str]) -> list[str]:
    return [f"2026-05-01T19:34:{i % 60:02d}.{i:09d}Z {ln}" for i, ln in enumerate(lines)]


def _summary(p: BootProgress) -> tuple:
    return (
        p.verdict,
        p.phase,
        p.shards_loaded,
        p.shards_total,
        p.drafter_shards_total,
        p.version,
        p.kv_cache_tokens,
        p.error,
        len(p.notes),
    )


def test_the_corpus_is_all_here_with_source_and_version():
    files = sorted(p.name for p in BOOT.glob("*.log"))
    assert files == sorted(CORPUS), "a fixture without an expectation (or the reverse)"
    assert len(files) >= 12
    for name in files:
        head = _header(_read(name))
        assert "source" in head and "vllm version" in head and "kind" in head, name


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_verdict_on_real_log(name):
    verdict, phase, shards, drafter_total, error = CORPUS[name]
    p = read_boot_log(_read(name))
    assert p.verdict == verdict, (name, p.describe())
    assert p.phase is BootPhase(phase)
    assert not (p.ready and p.failed)
    if shards is not None:
        assert (p.shards_loaded, p.shards_total) == shards
    assert p.drafter_shards_total == drafter_total
    if verdict == "failed":
        assert error in p.error
        assert error in p.failure_text
    else:
        assert p.error is None


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_coloured_and_timestamped_copies_read_the_same(name):
    lines = _body(_read(name))
    plain = _summary(read_boot_log(lines))
    assert _summary(read_boot_log([_coloured(ln) for ln in lines])) == plain
    assert _summary(read_boot_log(_docker_ts(lines))) == plain
    assert _summary(read_boot_log(_docker_ts([_coloured(ln) for ln in lines]))) == plain


def test_errors_before_and_after_ready_are_notes_not_failures():
    p = read_boot_log(_read("v0.20.0_docker-desktop_qwen3.6-nvfp4_success_error-after-ready.log"))
    assert p.ready
    after = [n for n in p.notes if n.after_ready]
    assert [n.level for n in after] == ["ERROR"]
    assert "does not exist" in after[0].message
    p = read_boot_log(_read("v0.18.0_ray-head_minimax-m2.5_startup-errors_minimax30.log"))
    assert not p.failed
    assert [n.level for n in p.notes] == ["ERROR", "ERROR"]
    assert "Failed to import Triton kernels" in p.notes[0].message


def test_ray_worker_lines_are_read_with_their_ip_prefix():
    p = read_boot_log(_read("v0.6.x_two-node-ray_nccl-hang_issue8447.log"))
    assert p.phase is BootPhase.RENDEZVOUS and not p.failed
