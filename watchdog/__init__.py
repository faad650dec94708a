"""tpwarden's watching half: the probe watchdog and the thermal agent."""
