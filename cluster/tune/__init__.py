"""The draft-length advisor (issue 33): from one run's spec-decode counters and step times,
predict tokens per step, step time and throughput for every draft length k', and recommend one
per load profile. `acceptance` and `steptime` are the two fitted halves, `model` combines them,
`measure` turns /metrics snapshots into counts. Pure; docs/tune.md states the model."""
