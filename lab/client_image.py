"""The lab's benchmark client: a local tokenizer for the lab model and an image with real vLLM.

- ``tpwarden-lab/vllm-client:<hash>`` (and ``:latest``): the lab base image plus the CPU vLLM
  0.33.0 venv that ``tools/vllm/install-cpu.sh`` built on this machine
  (``/opt/tpwarden-vllm-0.33.0``), so the real ``vllm bench serve`` runs against the simulator.
  That venv was made by pyenv's CPython 3.11.7; the base image has Debian bookworm's 3.11.2.
  Both are CPython 3.11 on the same glibc (the host is bookworm too), and extension modules
  are built for the cp311 ABI, so the venv is copied as is (same path, so script shebangs
  still hold) and only re-pointed at ``/usr/bin/python3.11`` (pyvenv.cfg ``home`` and the
  ``bin/python*`` links). Offline, no pip, no compiler; the build checks
  ``vllm bench serve --help``. The build context hard-links the venv (same filesystem) or
  copies it. Hash = the venv's install stamp + pyvenv.cfg + Dockerfile + base tag.
- The lab model directory gets a real tokenizer (``tokenizer.json`` + ``tokenizer_config.json``
  with a chat template): a byte-level BPE trained with the ``tokenizers`` library (from that
  venv, run as a subprocess) on the shipped prompt set. No model hub involved. Its counts
  differ from the simulator's own ``textgen.tokenize`` (see ``TOKENIZER_NOTE``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tpwarden.cluster.bench.plan import DEFAULT_PROMPTS
from tpwarden.cluster.errors import LabError
from tpwarden.lab import host
from tpwarden.lab.paths import StepCallback, no_steps
from tpwarden.lab.venv_image import RELOCATE, digest, ensure_venv_image, install_stamp

CLIENT_REPO = "tpwarden-lab/vllm-client"
CLIENT_LATEST = f"{CLIENT_REPO}:latest"
VLLM_VENV = Path(os.environ.get("TPWARDEN_LAB_VLLM_VENV", "/opt/tpwarden-vllm-0.33.0"))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
TOKENIZER_NOTE = (
    "client token counts come from a 2k-entry byte-level BPE trained on the shipped prompts; "
    "the simulator counts with its own regex tokenizer (one token per Hangul syllable, words "
    "for ASCII). Input token totals in results are the client's; output lengths are forced "
    "by max_tokens + ignore_eos and counted by the server (usage) when reported."
)

DOCKERFILE = (
    """\
FROM {base}
COPY venv {venv}
RUN cd {venv} \\
"""
    + RELOCATE
    + """\
 && VLLM_TARGET_DEVICE=cpu bin/vllm bench serve --help > /dev/null
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \\
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
LABEL io.tpwarden.lab.inputs={digest}
ENTRYPOINT []
CMD ["vllm", "bench", "serve", "--help"]
"""
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>\n{% endif %}"
    "{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<think>", "</think>"]

_TRAIN = r"""
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
prompts, out = sys.argv[1], sys.argv[2]
special = json.loads(sys.argv[3])
texts = [json.loads(line)["prompt"] for line in open(prompts, encoding="utf-8") if line.strip()]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              show_progress=False)
tok.train_from_iterator(texts * 4, trainer)
tok.save(out)
"""


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1048576,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "tpwarden_note": TOKENIZER_NOTE,
    }


def ensure_lab_tokenizer(
    model_dir: Path,
    cache: Path,
    venv: Path = VLLM_VENV,
    prompts: Path = DEFAULT_PROMPTS,
    on_step: StepCallback = no_steps,
) -> bool:
    """Train (once, cached) and install the tokenizer into `model_dir`. False if the vLLM venv
    (which has `tokenizers`) is absent here: the lab then keeps its placeholder tokenizer."""
    python = venv / "bin" / "python"
    if not prompts.is_file():
        # a broken checkout, not a machine without vLLM: say so instead of serving a placeholder
        raise LabError(f"the lab tokenizer's prompt set {prompts} is missing")
    if not python.exists():
        on_step("tokenizer", f"WARNING: no {python}: placeholder tokenizer kept")
        return False
    key = digest(prompts.read_bytes(), _TRAIN.encode(), json.dumps(SPECIAL).encode())
    cached = cache / "bench-tokenizer" / key
    if not (cached / "tokenizer.json").is_file():
        cached.mkdir(parents=True, exist_ok=True)
        tmp = cached / "tokenizer.json.tmp"
        try:
            subprocess.run(
                [str(python), "-c", _TRAIN, str(prompts), str(tmp), json.dumps(SPECIAL)],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise LabError(f"training the lab tokenizer failed: {exc}") from exc
        tmp.rename(cached / "tokenizer.json")
    host.write_atomic(
        cached / "tokenizer_config.json", json.dumps(tokenizer_config(), indent=1) + "\n"
    )
    for name in TOKENIZER_FILES:
        data = (cached / name).read_bytes()
        target = model_dir / name
        if not target.is_file() or target.read_bytes() != data:
            host.write_atomic(target, data)
    on_step("tokenizer", f"byte-level BPE {key} in {model_dir}")
    return True


def client_inputs_hash(venv: Path, base_tag: str) -> str:
    return digest(
        base_tag.encode(),
        DOCKERFILE.encode(),
        install_stamp(venv),
        (venv / "pyvenv.cfg").read_bytes(),
    )


def ensure_client_image(
    base_tag: str, cache: Path, venv: Path = VLLM_VENV, on_step: StepCallback = no_steps
) -> str | None:
    """Build ``tpwarden-lab/vllm-client:<hash>`` if missing; tag ``:latest``. None (with a
    warning step) when the vLLM venv is not installed on this machine."""
    if not (venv / "bin" / "vllm").exists():
        on_step("image vllm-client", f"WARNING: {venv} missing (tools/vllm/install-cpu.sh)")
        return None
    key = client_inputs_hash(venv, base_tag)
    text = DOCKERFILE.format(base=base_tag, venv=venv, digest=key)
    return ensure_venv_image(
        CLIENT_REPO, key, text, venv, cache=cache, step="image vllm-client", on_step=on_step
    )


def ensure_lab_client(paths, base_tag: str, on_step: StepCallback = no_steps) -> str | None:
    """`lab up` hook: the tokenizer in the lab model dir, then the client image. A failure
    here is a warning (the lab still serves); `tpwarden bench` then lacks its client."""
    try:
        ensure_lab_tokenizer(paths.model, paths.cache, on_step=on_step)
        return ensure_client_image(base_tag, paths.cache, on_step=on_step)
    except LabError as exc:
        on_step("bench client", f"WARNING: {exc}")
        return None
