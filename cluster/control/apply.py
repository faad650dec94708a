"""Apply a control plan: removals on every node in parallel, then starts wave by wave (head
first), then the Ray path's `vllm serve` exec'd in the head. Secrets are read here, at apply
time, and go to the engine only (env) or to a 0600 file on the node (the API key)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping

from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.control.plan import Action, ControlPlan, Drift
from tpwarden.cluster.control.results import Emit, NodeOutcome
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.launch import ContainerPlan
from tpwarden.cluster.secrets import resolve_secret
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

STEP_TIMEOUT_S = 180.0


def resolve_secrets(
    spec: ClusterSpec,
    nodes: Nodes,
    container: ContainerPlan,
    environ: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """Secret values for one container, read at apply time: env vars here, files on the
    node over SFTP. Never logged, never in a plan or argv."""
    values: dict[str, str] = {}
    node = spec.node(container.node)
    for env_name, ref in container.secret_env.items():
        values[env_name] = resolve_secret(
            ref,
            read_file=lambda path: nodes.session(node).read_bytes(path).decode(),
            environ=environ,
            what=f"secret for {env_name}",
            where="on this machine",
        )
    return values


def write_secret_files(
    spec: ClusterSpec,
    nodes: Nodes,
    container: ContainerPlan,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Write the container's secret files on its node before it starts: resolved here, sent
    over SFTP into a root-only directory, mode 0600 from the first byte, renamed into place."""
    if not container.secret_files:
        return
    session = nodes.session(spec.node(container.node))
    for secret in container.secret_files:
        value = resolve_secret(
            secret.ref,
            read_file=lambda path: session.read_bytes(path).decode(),
            environ=environ,
            what=secret.what,
            where="on this machine",
        )
        if not value.strip():  # the wrapper would refuse it at start; say so before
            raise ConfigError(f"{secret.what} is empty: vLLM would serve without one")
        directory = posixpath.dirname(secret.path)
        session.run(["mkdir", "-p", "-m", "0700", directory], check=True)
        session.put_atomic(value.encode(), secret.path, mode=0o600)


def apply_plan(
    spec: ClusterSpec, nodes: Nodes, plan: ControlPlan, emit: Emit
) -> tuple[NodeOutcome, ...]:
    """Removals on all nodes in parallel, then starts wave by wave (head first); a failed
    wave stops the later ones. Outcomes in inventory order; kept nodes count as ok."""
    if plan.refused:
        raise Drift(plan.drift, plan.config_hash)
    by_name = {n.name: n for n in spec.nodes}
    outcomes: dict[str, NodeOutcome] = {}
    removing = [by_name[s.node] for s in plan.steps if s.remove]

    def remove(node: NodeSpec) -> str:
        step = plan.step(node.name)
        gw = nodes.docker(node)
        for name in step.remove:
            gw.remove(name)
        emit("remove", node.name, f"removed {', '.join(step.remove)}")
        return f"removed {', '.join(step.remove)}"

    for name, r in nodes.fan_out(removing, remove, timeout=STEP_TIMEOUT_S).items():
        outcomes[name] = NodeOutcome(name, not isinstance(r, TpwardenError), str(r))
    if any(not o.ok for o in outcomes.values()):
        return tuple(outcomes.values())

    def start(node: NodeSpec) -> str:
        c = plan.step(node.name).container
        assert c is not None
        write_secret_files(spec, nodes, c)
        info = nodes.docker(node).run(c, resolve_secrets(spec, nodes, c))
        emit("start", node.name, f"started {info.name} ({info.id[:12]})")
        return f"started {info.name}"

    for wave in plan.waves:
        starting = [by_name[n] for n in wave if plan.step(n).container is not None]
        for name, r in nodes.fan_out(starting, start, timeout=STEP_TIMEOUT_S).items():
            outcomes[name] = NodeOutcome(name, not isinstance(r, TpwardenError), str(r))
        if any(not o.ok for o in outcomes.values()):
            break
    _exec_after_start(spec, nodes, plan, outcomes, emit)
    for st in plan.steps:
        if st.action is Action.KEEP and st.node not in outcomes:
            outcomes[st.node] = NodeOutcome(st.node, True, st.reason)
    return tuple(outcomes[n.name] for n in spec.nodes if n.name in outcomes)


def _exec_after_start(
    spec: ClusterSpec,
    nodes: Nodes,
    plan: ControlPlan,
    outcomes: dict[str, NodeOutcome],
    emit: Emit,
) -> None:
    """Ray path: once every rank's container runs, exec `vllm serve` in the head's."""
    for st in plan.steps:
        c = st.container
        exec_argv = c.exec_argv if c is not None else None
        if c is None or not exec_argv or not all(o.ok for o in outcomes.values()):
            continue
        gw = nodes.docker(spec.node(st.node))
        try:
            gw.exec_detached(c.name, exec_argv, resolve_secrets(spec, nodes, c))
            emit("start", st.node, "exec'd vllm serve in the Ray head")
        except Exception as e:  # noqa: BLE001 - reported per node
            outcomes[st.node] = NodeOutcome(st.node, False, f"exec vllm serve: {e}")
