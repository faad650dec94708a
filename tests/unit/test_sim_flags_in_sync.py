"""The simulator accepts exactly the flags of the real `vllm serve` (the generated table)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_simulator_flag_table_is_the_generated_one():
    generated = ROOT / "cluster" / "data" / "vllm_serve_flags_0.33.0.json"
    shipped = ROOT / "lab" / "vllm_sim" / "vllm_serve_flags.json"
    assert shipped.read_bytes() == generated.read_bytes(), f"cp {generated} {shipped}"
