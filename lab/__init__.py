"""The lab: a simulated 4-node cluster on one Linux machine (see README.md in this directory).

Library modules here never print; long operations report progress through an injected
``on_step(name, detail)`` callback and fail with `tpwarden.cluster.errors.LabError`.
"""
