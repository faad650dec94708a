"""matplotlib's pyplot on its file-only backend (Agg), for every plot tpwarden draws (the
thermal report, the tune predictions, the decide reliability diagrams). matplotlib is an extra of
the control machine (`tpwarden[control]`): where it is missing, the error says how to get it."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from tpwarden.cluster.errors import TpwardenError

MISSING = "the plot needs matplotlib: pip install 'tpwarden[control]'"


def pyplot(error: Callable[[str], Exception] = TpwardenError, message: str = MISSING) -> ModuleType:
    """`matplotlib.pyplot`, the Agg backend chosen first; ``error(message)`` without it."""
    try:
        # deferred: an optional dependency (the control machine's extras)
        import matplotlib
    except ImportError:  # nodes install tpwarden without the control machine's extras
        raise error(message) from None
    matplotlib.use("Agg")
    # deferred: pyplot after choosing the Agg backend (matplotlib.use)
    import matplotlib.pyplot as plt

    return plt
