"""What runs on the nodes: the collector (GPU and memory facts for control, status and bench),
the GPU gateway (NVML), and the thermal agent (`node.thermal`).

Node-side code depends on nothing control-side: of tpwarden it imports only the error root
(`tpwarden.cluster.errors`) and the durable writers (`tpwarden.cluster.durable`), both standard
library only. import-linter's `node-side` contract checks this in CI, and
`tpwarden.cluster.node_zipapp` zips the import closure of its two entries
(`tpwarden.node.collector`, `tpwarden.node.thermal.app`) for the nodes.
"""
