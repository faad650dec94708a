"""Accuracy runs: lm-evaluation-harness against the cluster from the CPU-only client container.

`presets` (pure) decides per task which API path it takes, which stop strings it may send and
the lm-eval argv; `results` (pure) reads lm-eval's output into rows and compares runs; `runner`
applies the plan through the head's Docker gateway and keeps the run directory.
"""
