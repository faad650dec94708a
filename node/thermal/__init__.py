"""The thermal agent as it runs on a node: GPU (through `tpwarden.node.gpu`) and sysfs samplers,
an alert policy, a durable JSON-lines writer and Prometheus /metrics; `app` is its entry.

Reading what it wrote (fetch, reports, plots) is control-side: `tpwarden.cluster.reports.thermal`.
"""
