"""The lab's thermal stand-in reads each rank's serving container from a real Docker engine
(issue 52, lab/rankload.py): running, paused (frozen: the rank's GPU cools), removed."""

from __future__ import annotations

import uuid

import docker
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_COMPONENT, LABEL_NODE
from tpwarden.lab.rankload import ServerContainers


def test_a_ranks_container_read_running_paused_and_gone(tiny_image: str) -> None:
    cluster = f"rankload-test-{uuid.uuid4().hex[:6]}"  # never the lab's own containers
    labels = {LABEL_CLUSTER: cluster, LABEL_COMPONENT: "vllm", LABEL_NODE: "node3"}
    client = docker.from_env()
    other = {**labels, LABEL_COMPONENT: "bench"}  # a client container on the node: not a rank
    boxes = [
        client.containers.run(tiny_image, ["/bin/sleep", "300"], detach=True,
                              network_mode="none", labels=lab)
        for lab in (labels, other)
    ]  # fmt: skip
    try:
        states = ServerContainers(cluster=cluster)
        assert states() == {"node3": "running"}
        boxes[0].pause()
        assert states() == {"node3": "paused"}
        boxes[0].remove(force=True)
        assert states() == {}
    finally:
        for box in boxes:
            try:
                box.remove(force=True)
            except docker.errors.NotFound:
                pass
