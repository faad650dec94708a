"""The configuration ledger (issue 53): what served, how well, and why it got slower.

* `store`: THE ledger (SQLite, WAL): records, fingerprint rows, canaries, state samples, evidence;
* `fingerprint`: what runs, read from the nodes and the engine, as key/value rows (pure);
* `collect`: reading them through cluster control (docker inspect, the collector, /metrics);
* `record`: `record_healthy`, the one entry point an operation calls once the server is healthy;
* `stats`, `why`: the Welch test on log throughput and the ranked differences (pure);
* `export`: JSON lines for a notebook or Apache Otava.

The canary itself (a `vllm bench serve` client) is a benchmark: `tpwarden.cluster.bench.canary`.
"""
