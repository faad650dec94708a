"""Provisioning the nodes with the playbooks (``tpwarden.playbooks``) through ansible-runner.

`gateway` (the one gateway to Ansible), `wheelhouse` (the offline wheels the nodes install),
`repack` (the nodes' tpwarden wheel rebuilt from an installed tpwarden when there is no checkout).
"""
