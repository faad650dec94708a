"""THE `/metrics` parser: Prometheus text -> sample values summed over label sets.

One parser for every reader of a vLLM `/metrics` page (`tpwarden status`'s gauges, the bench's
spec-decode counters, the watchdog's progress snapshot): prometheus_client's own
`text_string_to_metric_families`, so names, labels, escapes and `NaN`/`+Inf` are read exactly
as the exporter wrote them. Pure; tested on pages captured from real servers.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sum_by_sample(text: str) -> dict[str, float]:
    """{sample name: sum over its label sets}. Sample names as exported (`*_total`, `*_count`,
    `*_bucket`, `*_created` each their own). ValueError when the text is not exposition format
    (the parser gives up on the first bad line: nothing half-read is returned)."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    except (TypeError, IndexError) as exc:  # what the parser raises on some malformed lines
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return out


def info_labels(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of an info-style gauge (`vllm:cache_config_info`, value 1): one dict per
    sample, in page order; [] when the page has none. ValueError as `sum_by_sample`."""
    out: list[dict[str, str]] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    out.append(dict(sample.labels))
    except (TypeError, IndexError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return out
