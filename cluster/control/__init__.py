"""Cluster control: the `Controller` facade (`controller`) and its parts.

`plan` (observed containers -> typed steps), `preflight`, `apply`, `boot`, `server`, `status`,
`logs`, `clocks`; `results` holds the typed results and progress events they share, so that none
of the parts imports the facade. Nodes are reached through `tpwarden.cluster.control.nodes`.
"""
