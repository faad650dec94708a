"""Thermal logging, control side: start and stop the node agents, fetch their files, survey the
zones, and the morning report and plots over what they wrote. The agent itself runs on the nodes
(`tpwarden.node.thermal`)."""
