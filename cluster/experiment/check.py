"""Each variant's `set` checked against the inventory exactly as `tpwarden rollout` would apply
it (`rollout.layout.plan_edit` edits the file each value came from, `spec_with` loads the result
with every inventory check, the image's flag table included), in memory: nothing is written and
no node is contacted. A refusal is reported at the plan's own file:line, naming the key the
inventory refused and its fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.plan_file import LoadedPlan, PathKey
from tpwarden.cluster.rollout.edit import Change, describe_changes
from tpwarden.cluster.rollout.layout import plan_edit, spec_with
from tpwarden.cluster.spec import ClusterSpec


@dataclass(frozen=True)
class VariantCheck:
    """A variant as the inventory takes it: what it changes and the configuration it runs."""

    name: str
    restarts: bool
    summary: tuple[str, ...]  # "drafter: dflash k=3 -> off" (rollout's own words)
    config_hash: str  # the spec hash production is restored to for a request-only variant

    def to_json(self) -> JSONObject:
        return {
            "name": self.name,
            "restarts": self.restarts,
            "summary": list(self.summary),
            "config_hash": self.config_hash,
        }


def check_variants(
    loaded: LoadedPlan, inventory: str, production: ClusterSpec
) -> list[VariantCheck]:
    """Every variant of the plan against `inventory` (whose loaded spec is `production`)."""
    out = []
    for i, v in enumerate(loaded.plan.variants):
        changes = list(loaded.changes.get(v.name, ()))
        if not changes:
            out.append(
                VariantCheck(v.name, False, _request_summary(loaded, i), production.config_hash())
            )
            continue
        spec = _variant_spec(loaded, i, inventory, changes)
        summary = tuple(describe_changes(production, spec))
        if not summary and v.request is None:
            raise loaded.error(("variants", i, "set"), f"variant {v.name!r} changes nothing: "
                               "the inventory already has these values",
                               "drop the variant, or set a value production does not have")  # fmt: skip
        # a set that production already has, beside a request change: no restart needed
        out.append(VariantCheck(v.name, bool(summary), summary + _request_summary(loaded, i),
                                spec.config_hash()))  # fmt: skip
    return out


def _variant_spec(loaded: LoadedPlan, i: int, inventory: str, changes: list[Change]) -> ClusterSpec:
    try:
        return spec_with(inventory, plan_edit(inventory, changes).new)
    except ConfigError as exc:
        where = _where(loaded, i, changes, exc.key)
        what = f"{exc.key}: {exc.message}" if exc.key else exc.message
        raise loaded.error(where, f"the inventory refuses this change: {what}", exc.hint) from None


def _where(loaded: LoadedPlan, i: int, changes: list[Change], key: str | None) -> PathKey:
    """The plan entry of the change the inventory refused (else the variant's `set`)."""
    v = loaded.plan.variants[i]
    refused = (key or "").removeprefix("tpwarden.")
    for n, change in enumerate(changes):
        if refused == change.key or refused.startswith(change.key + "."):
            entry: str | int = list(v.set)[n] if isinstance(v.set, dict) else n
            return ("variants", i, "set", entry)
    return ("variants", i, "set")


def _request_summary(loaded: LoadedPlan, i: int) -> tuple[str, ...]:
    req = loaded.plan.variants[i].request
    if req is None:
        return ()
    out = [f"chat_template_kwargs.{k}: {v!r}" for k, v in sorted(req.chat_template_kwargs.items())]
    sampling = req.sampling.model_dump(exclude_none=True)
    out += [f"sampling.{k}: {v!r}" for k, v in sorted(sampling.items())]
    return tuple(f"request {line}" for line in out)
