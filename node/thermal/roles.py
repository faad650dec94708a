"""Zone roles: which ACPI thermal zone is the GPU zone, the P-cores, the E-cores...

All seven GB10 zones report type ``acpitz`` (thermal.md: hwmon shows only acpitz; the layout is
not documented publicly), so the type says nothing. The inventory's ``thermal.zone_roles`` maps a
zone index ("3"), a zone name ("thermal_zone3") or a type to a role name. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

# No GB10 default: no public source names the zones (see docs and thermal.md); a default would
# put a wrong label on a real node's report. The lab sets its own map in its inventory.
DEFAULT_ROLES: Mapping[str, str] = {}


def zone_index(name: str) -> str | None:
    digits = name[len(name.rstrip("0123456789")) :]
    return digits or None


def zone_role(name: str, ztype: str | None, roles: Mapping[str, str] | None) -> str | None:
    """The role of one zone: by name, then index, then type; None when the map has none."""
    if not roles:
        return None
    for key in (name, zone_index(name), ztype):
        if key is not None and key in roles:
            return roles[key]
    return None


def zone_label(name: str, ztype: str | None, roles: Mapping[str, str] | None) -> str:
    """What a person reads: the role when known, else the zone name and type."""
    role = zone_role(name, ztype, roles)
    if role:
        return role
    return f"{name} ({ztype})" if ztype else name
