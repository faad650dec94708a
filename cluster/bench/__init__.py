"""Benchmarks from a CPU-only client container.

`runner` (plans and the runner: sweeps, prefill, run directories), `parse` (vLLM's saved results
and spec-decode counters), `manifest` (what a run records about the cluster), `node` (the facts
script run on a node for the manifest).
"""
