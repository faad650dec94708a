"""Kernel log matching on real lines from public issues (tests/fixtures/kernlog) (issue 32)."""

from __future__ import annotations

from pathlib import Path

from tpwarden.node.kernlog import match_line, match_lines, xid_name

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kernlog" / "public-lines.txt"


def log_lines() -> list[str]:
    return [ln for ln in FIXTURE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_every_public_line_is_classified() -> None:
    events = match_lines(log_lines())
    kinds = [e.kind for e in events]
    assert kinds == ["xid", "xid", "xid", "xid", "xid", "xid", "nvrm", "nvrm", "oom", "oom", "oom"]


def test_xid_with_pid_and_name() -> None:
    [line] = [ln for ln in log_lines() if "): 31," in ln]
    e = match_line(line)
    assert e is not None and e.kind == "xid"
    assert (e.xid, e.pci, e.pid, e.name) == (31, "0000:0a:00", 13332, "cuda_plot_k32_v")
    assert e.message is not None and e.message.startswith("Ch 00000010, intr 00000000. MMU Fault")


def test_xid_with_unknown_pid_and_journal_prefix() -> None:
    e62 = match_line([ln for ln in log_lines() if "): 62," in ln][0])
    assert e62 is not None and (e62.xid, e62.pid, e62.name) == (62, None, None)
    e45 = match_line([ln for ln in log_lines() if ln.startswith("kernel: NVRM")][0])
    assert e45 is not None and (e45.xid, e45.pci, e45.pid, e45.name) == (
        45,
        "0000:dc:00",
        1818990,
        "python3",
    )
    assert e45.message == "Ch 00000001 caused by previous Xid 149"


def test_xid_79_in_the_older_form_and_ctx_switch_timeout() -> None:
    e79 = match_line("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus")
    assert e79 is not None and (e79.xid, e79.pid, e79.message) == (
        79,
        None,
        "GPU has fallen off the bus",
    )
    assert xid_name(79) == "GPU has fallen off the bus"
    e109 = match_line([ln for ln in log_lines() if "): 109," in ln][0])
    assert e109 is not None and (e109.xid, e109.pid, e109.name) == (109, 1797828, "pt_main_thread")


def test_other_nvrm_errors_but_not_informational_nvrm_lines() -> None:
    nvrm = [e for e in match_lines(log_lines()) if e.kind == "nvrm"]
    assert [e.message for e in nvrm] == [
        "fallen off the bus and is not responding to commands.",
        "The NVIDIA probe routine failed for 1 device(s).",
    ]
    assert match_line("[14328.198496] NVRM: GPU at PCI:0000:0a:00: GPU-760d0170") is None


def test_oom_killer_lines() -> None:
    oom = [e for e in match_lines(log_lines()) if e.kind == "oom"]
    assert [(e.pid, e.name) for e in oom] == [
        (None, "pool"),
        (1440763, "perl"),
        (15784, "python3"),
    ]
    assert match_line("[4018.45] Killed process 935 (python) total-vm:113656kB") is not None


def test_unrelated_lines_and_the_limit() -> None:
    assert match_line("Feb 14 05:03:41 h kernel: mlx5_core 0000:ab:00.0 Link ACTIVE") is None
    assert match_line("[14372.273528] sched: RT throttling activated") is None
    assert len(match_lines(log_lines(), limit=2)) == 2
    assert match_lines(log_lines(), limit=2)[-1].name == "python3"  # the newest are kept
