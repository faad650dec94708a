"""The labels tpwarden puts on its containers: one home for their names (issue 31).

The launch plans write them, the Docker gateway finds containers by them, and the bench and
eval clients carry them too; all import from here.
"""

from __future__ import annotations

LABEL_PREFIX = "io.tpwarden."
LABEL_CLUSTER = LABEL_PREFIX + "cluster"
LABEL_COMPONENT = LABEL_PREFIX + "component"
LABEL_NODE = LABEL_PREFIX + "node"
LABEL_ROLE = LABEL_PREFIX + "role"
LABEL_RANK = LABEL_PREFIX + "rank"
LABEL_CONFIG_HASH = LABEL_PREFIX + "config-hash"
LABEL_EVAL_RUN = LABEL_PREFIX + "eval-run"
LABEL_BENCH_RUN = LABEL_PREFIX + "bench-run"
