"""tpwarden's acting half: inventory, launch plans, gateways to nodes, control and the lab."""

__version__ = "0.1.0"
