"""The `vllm serve` flag table read from the serving image on the head (`tpwarden flags fetch`,
and `tpwarden provision` once the image is there): cluster control's connection to the head,
the parser run there (`tpwarden.cluster.vllm.flag_fetch`), the table cached here."""

from __future__ import annotations

from dataclasses import dataclass

from tpwarden.cluster import flag_tables
from tpwarden.cluster.control.nodes import NodeConnector
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.vllm.flag_fetch import FetchResult, fetch_table


def fetch_on_head(spec: ClusterSpec, *, refresh: bool = False) -> FetchResult:
    """Run the image's own vLLM argument parser on the head; the table, cached by image ID."""
    connector = NodeConnector(spec.ssh)
    try:
        return fetch_table(spec, connector.docker(spec.head), refresh=refresh)
    finally:
        connector.close()


@dataclass(frozen=True)
class ProvisionedTable:
    """The flag table after a provisioning run: read (``result``), or not (``error``), in which
    case a shipped table for the version (``fallback``) keeps `plan` checking."""

    result: FetchResult | None = None
    error: str | None = None
    fallback: bool = False

    @property
    def ok(self) -> bool:
        if self.result is not None:
            return self.result.mismatch is None
        return self.fallback

    def to_json(self) -> JSONObject:
        if self.result is None:
            return {"ok": self.ok, "error": self.error}
        return {"ok": self.ok, **self.result.to_json()}


def after_provision(spec: ClusterSpec) -> ProvisionedTable:
    """`provision` fetches the image's table once the image is on the head. A failure is fatal
    (not ``ok``) only where no shipped table covers the version; else it is a warning."""
    try:
        return ProvisionedTable(fetch_on_head(spec))
    except TpwardenError as exc:
        shipped = flag_tables.shipped(spec.serving.vllm_version) is not None
        return ProvisionedTable(error=str(exc), fallback=shipped)
