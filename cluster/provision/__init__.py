"""Provisioning the nodes with the playbooks (``servectl.playbooks``) through ansible-runner.

`gateway` (the one gateway to Ansible), `wheelhouse` (the offline wheels the nodes install),
`repack` (the nodes' servectl wheel rebuilt from an installed servectl when there is no checkout).
"""
