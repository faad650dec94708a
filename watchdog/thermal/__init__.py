"""The thermal agent: GPU (through cluster.gpu) and sysfs samplers, a durable JSON-lines writer,
Prometheus /metrics, and the morning report over the files it writes."""
