"""The configuration ledger's noise on the lab (simulator), issue 53: on an unchanged server, ten
canaries in a row, and `ledger why` says "within noise" after every one (after the first:
nothing earlier to compare with). Printed as a table: each canary's ratio to the best earlier
one, its 95 % interval, and the band of the configuration's noise it was judged against.

On lab lane 2 (scripts/test.sh), beside lane 1's lab tests: the noise it measures is the noise of
a busy machine, which is the point.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.conftest import tpwarden
from tests.lab.test_ledger import _json, inv  # noqa: F401 - inv: the private inventory fixture

pytestmark = pytest.mark.lab

UNCHANGED = 10  # canaries in a row (issue 53's done-when)


@pytest.mark.timeout(2400, func_only=True)  # ten canaries and a boot; not the lab's lock wait
def test_ten_canaries_on_an_unchanged_server_are_within_noise(inv: Path) -> None:  # noqa: F811
    up = _json("up", "-i", str(inv), "--replace", timeout=300)
    assert up["ok"], up
    seen = []
    for n in range(1, UNCHANGED + 1):
        c = _json("ledger", "canary", "-i", str(inv))
        assert c["ok"], c
        w = _json("ledger", "why", "-i", str(inv))
        noise = w.get("noise") or {}
        seen.append((n, w["verdict"], w.get("ratio"), w.get("ci95"), noise))
        want = "no earlier canary" if n == 1 else "within noise"
        assert w["verdict"] == want, (n, w, seen)
    for n, verdict, ratio, ci, noise in seen:  # the closing note's noise table
        interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
        print(
            f"canary {n:2}: {verdict:17} ratio {ratio or 0:.3f} 95% {interval:16} band "
            f"{noise.get('band_pct') or 0:4.1f} % sd {noise.get('sd_pct') or 0:.1f} %"
        )
    screen = tpwarden("ledger", "why", "-i", str(inv), "--tz", "Asia/Seoul")
    assert screen.returncode == 0, screen.stdout + screen.stderr  # 0: not slower
    print(screen.stdout)
