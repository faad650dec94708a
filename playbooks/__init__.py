"""The Ansible playbooks, shipped inside servectl as package data (``servectl.playbooks``).

Not Python code: this file only makes the folder a regular package, so that
``importlib.resources.files("servectl.playbooks")`` gives the directory on disk that ansible-runner
needs, from a wheel install and from an editable checkout alike.
"""
