"""The lab's model directories: tiny stand-ins with the files the toolkit and simulator read."""

from __future__ import annotations

import json
from pathlib import Path

from tpwarden.lab.host import write_atomic
from tpwarden.lab.paths import LabPaths, StepCallback, no_steps

SHARDS = 40


def _model_files(shards: int) -> dict[str, object]:
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map = {f"model.layers.{i}.weight": names[i % shards] for i in range(shards * 2)}
    return {
        "config.json": {
            "architectures": ["GlmMoeForCausalLM"],
            "model_type": "glm_lab",
            "max_position_embeddings": 1048576,
            "num_hidden_layers": 78,
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
            },
        },
        "model.safetensors.index.json": {
            "metadata": {"total_size": 185 * 10**9},
            "weight_map": weight_map,
        },
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "lab_placeholder": True,
        },
        "tokenizer.json": {"version": "1.0", "lab_placeholder": True},
        "generation_config.json": {"do_sample": False},
    }


def _drafter_files() -> dict[str, object]:
    return {
        "config.json": {
            "architectures": ["DFlashDraftModel"],
            "model_type": "dflash_lab",
            "num_hidden_layers": 2,
        },
        "model.safetensors.index.json": {
            "metadata": {"total_size": 2 * 10**9},
            "weight_map": {"draft.weight": "model.safetensors"},
        },
    }


def ensure_models(paths: LabPaths, on_step: StepCallback = no_steps) -> None:
    """Write the model and drafter directories (idempotent; shard files are left absent)."""
    for directory, files in (
        (paths.model, _model_files(SHARDS)),
        (paths.drafter, _drafter_files()),
    ):
        directory.mkdir(parents=True, exist_ok=True)
        for name, doc in files.items():
            text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
            target = directory / name
            if not target.is_file() or target.read_text() != text:
                write_atomic(target, text)
        (directory / ".vllm-sim").mkdir(exist_ok=True)
    if not paths.hf_token.is_file():  # a dummy: the lab never reaches a model hub
        paths.secrets.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(paths.hf_token, "hf_lab_dummy_token\n", 0o600)
    on_step("models", f"{paths.model.name} ({SHARDS} shards), {paths.drafter.name}")


def model_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
