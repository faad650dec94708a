"""What runs on the nodes: the collector (GPU and memory facts for control, status and bench),
the GPU gateway (NVML), and the thermal agent (`node.thermal`).

Node-side code depends on nothing control-side: of servectl it imports only the error root
(`servectl.cluster.errors`) and the durable writers (`servectl.cluster.durable`), both standard
library only. import-linter's `node-side` contract checks this in CI, and
`servectl.cluster.node_zipapp` zips the import closure of its two entries
(`servectl.node.collector`, `servectl.node.thermal.app`) for the nodes.
"""
