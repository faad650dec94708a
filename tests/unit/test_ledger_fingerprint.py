"""Fingerprint rows: real `vllm:cache_config_info` lines (two real /metrics pages), the plan's own
argv behind the API key wrapper, env with secrets redacted as the plan redacts them, the
collector's node facts and state sample, and a whole fingerprint read through a fake cluster."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from tpwarden.cluster.containers.info import ContainerInfo, container_info_from_inspect
from tpwarden.cluster.errors import NodeUnreachable
from tpwarden.cluster.inventory.load import load_inventory, parse_inventory
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.ledger import fingerprint as fp
from tpwarden.cluster.ledger.collect import collect_fingerprint, state_rows
from tpwarden.cluster.ledger.record import record_if_healthy
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.tables import KeyValue
from tpwarden.cluster.vllm.metrics import info_labels

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real" / "metrics"
EXAMPLE = ROOT / "inventory.example.yml"


def _env_token_spec():  # noqa: ANN202 - the example, with the HF token read from an env var
    text = EXAMPLE.read_text().replace(
        "hf_token:\n          file: /etc/tpwarden/secrets/hf_token",
        "hf_token:\n          env: HF_TOKEN",
    )
    assert "env: HF_TOKEN\n" in text
    return parse_inventory(text, str(EXAMPLE))


def test_cache_config_info_of_a_real_v1_page() -> None:
    page = (REAL / "v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt").read_text()
    (labels,) = info_labels(page, "vllm:cache_config_info")
    rows = fp.cache_config_rows(labels)
    assert rows["engine.kv.num_gpu_blocks"] == "2452" and rows["engine.kv.block_size"] == "16"
    assert rows["engine.kv.tokens"] == str(2452 * 16)
    assert rows["engine.kv.gpu_memory_utilization"] == "0.25"
    assert rows["engine.kv.cache_dtype"] == "auto"
    assert rows["engine.kv.kv_cache_memory_bytes"] == "None"  # as vLLM writes it
    assert "engine.kv.engine" not in rows  # the engine index is not configuration


def test_cache_config_info_of_a_real_v0_page_sized_by_utilisation() -> None:
    page = (REAL / "v0-era_aibrix-runtime-docs_qwen2.5-coder-1.5b.prom.txt").read_text()
    (labels,) = info_labels(page, "vllm:cache_config_info")
    rows = fp.cache_config_rows(labels)
    assert rows["engine.kv.num_gpu_blocks"] == "81767"
    assert rows["engine.kv.tokens"] == str(81767 * 16)
    assert rows["engine.kv.gpu_memory_utilization"] == "0.9"
    assert rows["engine.kv.num_cpu_blocks"] == "9362"


def test_a_page_without_the_info_gauge_gives_no_kv_rows_but_no_error() -> None:
    assert info_labels("vllm:num_requests_running 0.0\n", "vllm:cache_config_info") == []
    assert fp.cache_config_rows({}) == {}


def test_the_plans_argv_behind_the_key_wrapper_becomes_flag_rows() -> None:
    spec = load_inventory(EXAMPLE)
    head = plan_cluster(spec).containers[0]
    argv = ["sh", "-c", 'exec "$@"', "sh", *head.vllm_argv]
    rows = fp.argv_rows(argv)
    assert rows["argv.wrapper"] == json.dumps(
        ["sh", "-c", 'exec "$@"', "sh"], separators=(",", ":")
    )
    assert rows["argv.command"] == "vllm serve /models/GLM-5.3-Flash-NVFP4"
    assert rows["flag.--kv-cache-memory-bytes"] == str(16 * 2**30)
    assert rows["flag.--enforce-eager"] == "true"
    assert json.loads(rows["flag.--speculative-config"])["num_speculative_tokens"] == 3
    assert fp.drafter_rows(rows) == {"engine.drafter.method": "dflash", "engine.drafter.k": "3"}
    assert "flag.--headless" not in rows  # the head is not headless
    worker = fp.argv_rows(plan_cluster(spec).containers[1].vllm_argv)
    assert worker["flag.--headless"] == "true" and worker["flag.--node-rank"] == "1"


def test_argv_values_that_are_secrets_are_redacted_and_repeats_kept() -> None:
    rows = fp.argv_rows(
        ["vllm", "serve", "m", "--api-key", "sk-abcdefghijklmnopqrstuvwxyz123456",
         "--middleware", "a", "--middleware", "b", "--seed=-1"]
    )  # fmt: skip
    assert rows["flag.--api-key"] == "<redacted>"
    assert json.loads(rows["flag.--middleware"]) == ["a", "b"]
    assert rows["flag.--seed"] == "-1"
    assert fp.drafter_rows(rows)["engine.drafter.method"] == "none"


def test_env_secrets_read_as_the_plan_shows_them() -> None:
    spec = _env_token_spec()
    head = plan_cluster(spec).containers[0]
    shown = head.to_json()["env"]
    secret_text = {k: shown[k] for k in head.secret_env}
    env = ["HF_TOKEN=hf_realvalueXXXXXXXXXXXXXXXXXXXXXXXXXX", "VLLM_HOST_IP=192.168.100.11",
           "OTHER_PASSWORD=hunter2", "PATH=/usr/bin"]  # fmt: skip
    rows = fp.env_rows(env, secret_text)
    assert rows["env.HF_TOKEN"] == shown["HF_TOKEN"] and "hf_real" not in rows["env.HF_TOKEN"]
    assert rows["env.HF_TOKEN"] == "<secret from env HF_TOKEN>"
    assert rows["env.OTHER_PASSWORD"] == "<redacted>"
    assert rows["env.VLLM_HOST_IP"] == "192.168.100.11" and rows["env.PATH"] == "/usr/bin"


def test_config_id_names_the_rows_not_their_order() -> None:
    a = [KeyValue("*", "x", "1"), KeyValue("node1", "y", "2")]
    assert fp.config_id(a) == fp.config_id(list(reversed(a)))
    assert fp.config_id(a) != fp.config_id([KeyValue("*", "x", "1"), KeyValue("node1", "y", "3")])
    assert fp.config_id(a).startswith("cfg:") and len(fp.config_id(a)) == 16


def test_value_text() -> None:
    assert fp.value_text(2000.0) == "2000" and fp.value_text(0.25) == "0.25"
    assert fp.value_text(True) == "true" and fp.value_text(None) is None
    assert fp.value_text(["b", "a"]) == '["b","a"]'


SHOWN = {
    "kernel": "6.11.0-1016-nvidia", "os": "Ubuntu 24.04.3 LTS", "cpu_count": 20,
    "nvml": {"available": True, "driver_version": "580.95.05", "cuda_driver_version": 13000},
    "memory": {"total_bytes": 128 * 2**30},
    "gpus": [{"index": 0, "name": "NVIDIA GB10", "locked_clock_max_mhz": 2000,
              "sm_clock_max_mhz": 3003, "missing": {}}],
    "gpu_extras": [{"index": 0, "power_limit_w": None,
                    "missing": {"power_limit_w": "nvmlDeviceGetEnforcedPowerLimit: not supported"}}],
}  # fmt: skip


def test_node_facts_rows_and_their_missing_reasons() -> None:
    rows = fp.node_fact_rows(SHOWN)
    assert rows["gpu.clock_cap_mhz"] == "2000" and rows["nvidia.driver"] == "580.95.05"
    assert rows["nvidia.cuda"] == "13000" and rows["kernel"] == "6.11.0-1016-nvidia"
    assert rows["memory.total_bytes"] == str(128 * 2**30)


def test_state_rows_from_a_collector_state_document() -> None:
    doc = {
        "state": {"cotenants": [{"comm": "ollama", "cpu_pct": 187.5, "rss_mib": 2048.0}],
                  "gpu_users": {"serving_procs": 3, "others": ["ollama"]}, "loadavg": [3.2, 2, 1]},
        "gpus": [{"index": 0, "sm_clock_mhz": 1500, "clock_event_reasons": ["sw_power_cap"],
                  "temp_c": 63, "power_w": 41.2, "util_pct": 97}],
    }  # fmt: skip
    rows = state_rows(doc)
    assert rows["cotenant.ollama.cpu_pct"] == "187.5"
    assert rows["gpu_users.others"] == '["ollama"]'
    assert (
        rows["gpu.sm_clock_mhz"] == "1500" and rows["gpu.clock_event_reasons"] == '["sw_power_cap"]'
    )
    assert rows["load1"] == "3.2"
    idle = {**doc, "gpus": [{**doc["gpus"][0], "sm_clock_mhz": 208,
                             "clock_event_reasons": ["gpu_idle"]}]}  # fmt: skip
    assert state_rows(idle)["gpu.sm_clock_mhz"] is None  # not a clock under load


# --- a whole fingerprint through a fake cluster ---------------------------------------------------


@dataclass
class FakeDocker:
    found: list[ContainerInfo]

    def list_tpwarden(self, cluster: str) -> list[ContainerInfo]:
        return self.found

    def repo_digests(self, image: str) -> tuple[str, ...]:
        return ("vllm-glm@sha256:" + "ab" * 32,)


@dataclass
class FakeCtl:
    spec: object
    page: str
    unreachable: set[str] = field(default_factory=set)

    def docker(self, node):  # noqa: ANN001, ANN201
        planned = plan_cluster(self.spec).for_node(node.name)
        attrs = {
            "Id": "c" * 64, "Name": "/" + planned.name, "Image": "sha256:" + "1" * 64,
            "Path": planned.key_wrapper[0] if planned.key_wrapper else planned.command[0],
            "Args": [*planned.key_wrapper[1:], *planned.command] if planned.key_wrapper
            else list(planned.command[1:]),
            "State": {"Status": "running", "Running": True, "Pid": 42},
            "Config": {"Image": planned.image, "Labels": planned.labels,
                       "Env": ["HF_TOKEN=hf_secretvalueXXXXXXXXXXXXXXXXXXXXXXXX",
                               *(f"{k}={v}" for k, v in planned.env.items())]},
        }  # fmt: skip
        return FakeDocker([container_info_from_inspect(node.name, attrs)])

    def collector(self, node, args, timeout=0):  # noqa: ANN001, ANN201
        if node.name in self.unreachable:
            raise NodeUnreachable(node.name, "connection refused")
        return SHOWN

    def fan_out(self, nodes, fn, timeout=None):  # noqa: ANN001, ANN201
        out = {}
        for n in nodes:
            try:
                out[n.name] = fn(n)
            except NodeUnreachable as e:
                out[n.name] = e
        return out

    def metrics_page(self, timeout_s=5.0):  # noqa: ANN001, ANN201
        return 200, self.page


def _http() -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/version"
        return httpx.Response(200, json={"version": "0.33.0"})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_a_whole_fingerprint_from_nodes_and_engine() -> None:
    spec = _env_token_spec()
    page = (REAL / "v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt").read_text()
    got = collect_fingerprint(FakeCtl(spec, page, {"node3"}), _http())  # type: ignore[arg-type]
    rows = {(r.node, r.key): r.value for r in got.rows}
    assert rows[("*", "vllm.version")] == "0.33.0"
    assert rows[("*", "engine.kv.num_gpu_blocks")] == "2452"
    assert rows[("*", "engine.drafter.k")] == "3"
    assert rows[("*", "setting.kv_cache.memory")] == str(16 * 2**30)
    assert rows[("node2", "flag.--kv-cache-memory-bytes")] == str(16 * 2**30)
    assert rows[("node1", "gpu.clock_cap_mhz")] == "2000"
    assert rows[("node1", "image.id")] == "sha256:" + "1" * 64
    assert "hf_secretvalue" not in json.dumps(sorted(map(str, rows.values())))
    assert rows[("node1", "env.HF_TOKEN")].startswith("<secret from")
    # node3's collector failed: its facts are missing with the reason, its rank still recorded
    assert "connection refused" in got.missing["node3.facts"]
    assert ("node3", "gpu.clock_cap_mhz") not in rows and ("node3", "argv.command") in rows
    assert "not supported" in got.missing["node1.gpu0.power_limit_w"]


def test_record_if_healthy_records_only_a_healthy_server_and_never_raises(tmp_path) -> None:
    spec = _env_token_spec()
    page = (REAL / "v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt").read_text()
    ctl = FakeCtl(spec, page)
    ctl.state_dir = tmp_path  # type: ignore[attr-defined]
    ctl.server = type("S", (), {"http": _http()})()  # type: ignore[attr-defined]
    ctl.now = lambda: datetime.now(UTC)  # type: ignore[attr-defined]

    class Result:  # an ApplyResult's shape: ok and boot.ready
        def __init__(self, ok: bool, ready: bool | None) -> None:
            self.ok = ok
            self.boot = None if ready is None else type("B", (), {"ready": ready})()

    assert record_if_healthy(ctl, Result(True, None), action="up", reason="t") is None  # --no-wait
    assert record_if_healthy(ctl, Result(True, False), action="up", reason="t") is None
    got = record_if_healthy(ctl, Result(True, True), action="up", reason="t")  # type: ignore[arg-type]
    assert got is not None and got.outcome is not None and got.error is None
    doc = got.to_json()  # what `up --json` shows under "ledger"
    assert doc["changed"] and doc["cfg"].startswith("cfg:") and doc["id"] == got.outcome.record.id
    with Ledger.open(doc["path"], readonly=True) as led:
        assert [r.action for r in led.records()] == ["up"]
    ctl.metrics_page = None  # type: ignore[assignment]  # a broken collaborator: logged, not raised
    broken = record_if_healthy(ctl, Result(True, True), action="restart", reason="t")  # type: ignore[arg-type]
    assert broken is not None and broken.outcome is None and broken.error
    assert "error" in broken.to_json()
