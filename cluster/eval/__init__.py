"""Accuracy runs: lm-evaluation-harness against the cluster from the CPU-only client container.

`catalog` (pure) holds the presets of the field report's benchmarks and the named suites;
`presets` (pure) the stop cap and max length; `taskdefs` reads lm-eval's own task YAMLs;
`plan` (pure) builds each task's lm-eval argv; `results` (pure) reads lm-eval's output into rows
and compares runs; `progress` (pure) measures request rates, ETAs and the suite summary;
`runner` applies the plan through the head's Docker gateway (`client`: one container) and keeps
the run directory; `datasets` packs the tasks' Hugging Face data and `cache` loads it into the
head's cache; `image_build` (pure) and `image_head` build the client image on the head.
"""
