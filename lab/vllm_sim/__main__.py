"""``python -m tpwarden.lab.vllm_sim serve MODEL [flags]`` == ``vllm serve MODEL [flags]``."""

import sys

from .server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
