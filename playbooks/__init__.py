"""The Ansible playbooks, shipped inside tpwarden as package data (``tpwarden.playbooks``).

Not Python code: this file only makes the folder a regular package, so that
``importlib.resources.files("tpwarden.playbooks")`` gives the directory on disk that ansible-runner
needs, from a wheel install and from an editable checkout alike.
"""
