"""The Docker gateway: one docker SDK client per node, over ssh:// or the local socket.

Host-key checking over ssh://: docker-py's own paramiko adapter (`SSHHTTPAdapter`) calls
`load_system_host_keys()` (only ~/.ssh/known_hosts) with `RejectPolicy`, reads identity files
only from ~/.ssh/config, and connects without a timeout, in its constructor. None of that can be
pointed at the inventory's known_hosts file. So we hand docker-py the paramiko client our SSH
gateway already connected and verified (`tpwarden.cluster.ssh.NodeSession`): a small adapter subclass
overrides the two hooks that create and connect the client. Checks are never disabled, the
docker API rides on the same verified SSH transport as every other command (one connection per
node), and a dropped connection reconnects through the gateway, which verifies the key again.
As with `docker -H ssh://`, the node needs the docker CLI (`docker system dial-stdio`).

Results are our own frozen dataclasses; docker/requests/paramiko errors become `DockerError` or
`NodeUnreachable`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, cast

import docker
import docker.errors
import paramiko
import requests
from docker.transport.sshconn import SSHConnection, SSHConnectionPool, SSHHTTPAdapter
from docker.types import DeviceRequest, Mount, Ulimit
from tpwarden.cluster.docker_job import (
    WATCH_POLL_S,
    ContainerJob,
    JobResult,
    Watch,
    container_facts,
    tar_files,
    untar_files,
)
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import DockerError, NodeUnreachable, TpwardenError
from tpwarden.cluster.labels import (
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_CONFIG_HASH,
    LABEL_NODE,
    LABEL_ROLE,
)

if TYPE_CHECKING:
    from docker.types.daemon import CancellableStream
    from tpwarden.cluster.launch import ContainerPlan
    from tpwarden.cluster.ssh import NodeSession
    from urllib3._collections import RecentlyUsedContainer

log = logging.getLogger(__name__)

_BOOTSTRAP_API_VERSION = "1.41"


@dataclass(frozen=True, kw_only=True)
class ContainerInfo:
    """One container as the engine reports it (our own type, no docker-py objects leak)."""

    node: str
    id: str
    name: str
    image: str
    state: str  # created | running | paused | restarting | exited | dead
    labels: Mapping[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    restart_count: int = 0
    oom_killed: bool = False
    error: str = ""
    pid: int | None = None  # the host PID of its init process while it runs (State.Pid)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @property
    def config_hash(self) -> str | None:
        return self.labels.get(LABEL_CONFIG_HASH)

    @property
    def role(self) -> str | None:
        return self.labels.get(LABEL_ROLE)

    def uptime_s(self, now: datetime) -> float | None:
        if self.state not in ("running", "paused") or self.started_at is None:
            return None
        return max(0.0, (now - self.started_at).total_seconds())


def _parse_ts(value: str | None) -> datetime | None:
    """Docker's RFC 3339 nano timestamps; the zero time means 'never'."""
    if not value or value.startswith("0001-01-01"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    frac = (frac.split("+")[0].split("-")[0] + "000000")[:6]
    try:
        return datetime.fromisoformat(f"{head}.{frac}").replace(tzinfo=UTC)
    except ValueError:
        return None


def container_info_from_inspect(node: str, attrs: Mapping[str, JSONValue]) -> ContainerInfo:
    """Pure: `docker inspect` JSON -> ContainerInfo."""
    st = attrs.get("State") or {}
    cfg = attrs.get("Config") or {}
    state = st.get("Status") or (
        "paused" if st.get("Paused") else "running" if st.get("Running") else "exited"
    )
    return ContainerInfo(
        node=node,
        id=attrs.get("Id", ""),
        name=(attrs.get("Name") or "").lstrip("/"),
        image=cfg.get("Image", ""),
        state=state,
        labels=dict(cfg.get("Labels") or {}),
        started_at=_parse_ts(st.get("StartedAt")),
        finished_at=_parse_ts(st.get("FinishedAt")),
        exit_code=st.get("ExitCode") if state in ("exited", "dead") else None,
        restart_count=int(attrs.get("RestartCount") or 0),
        oom_killed=bool(st.get("OOMKilled")),
        error=st.get("Error") or "",
        pid=int(st["Pid"]) if st.get("Pid") else None,  # 0 when it does not run
    )


def restart_policy(spec: str) -> JSONObject:
    """`unless-stopped`, `always`, `no`, `on-failure[:N]` -> the engine's RestartPolicy."""
    name, _, count = (spec or "no").partition(":")
    policy: JSONObject = {"Name": "" if name == "no" else name}
    if name == "on-failure" and count:
        policy["MaximumRetryCount"] = int(count)
    return policy


def create_kwargs(plan: ContainerPlan, env: Mapping[str, str], api: docker.APIClient) -> JSONObject:
    """Pure apart from `create_host_config` (which only builds a dict): the create request for
    a plan, with `env` = the plan's env plus resolved secret values."""
    host_config = api.create_host_config(
        network_mode=plan.network_mode,
        ipc_mode=plan.ipc_mode,
        shm_size=plan.shm_size,
        mounts=[
            Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
            for m in plan.mounts
        ],
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if plan.gpus == "all"
        else None,
        restart_policy=restart_policy(plan.restart_policy),
        # tpwarden.container (docker run --device/--cap-add/--ulimit/--privileged); -1 is
        # docker's "unlimited", as in `--ulimit memlock=-1:-1`
        devices=[str(d) for d in plan.devices] or None,  # HOST:CONTAINER:PERMISSIONS
        cap_add=list(plan.cap_add) or None,
        ulimits=[Ulimit(name=n, soft=u.soft, hard=u.hard) for n, u in plan.ulimits] or None,
        privileged=plan.privileged,
    )
    return dict(
        image=plan.image,
        name=plan.name,
        command=list(plan.container_command),
        entrypoint=list(plan.entrypoint) if plan.entrypoint is not None else None,
        environment=[f"{k}={v}" for k, v in env.items()],
        labels=dict(plan.labels),
        host_config=host_config,
        stop_timeout=plan.stop_timeout_s,
        detach=True,
    )


@dataclass(frozen=True, kw_only=True)
class OneShot:
    """A throwaway container (`DockerGateway.run_once`): argv[0] is the entrypoint; `files`
    (name in the container's root -> content) are copied in before it starts."""

    image: str
    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: bool = False
    timeout_s: float = 300.0


@dataclass(frozen=True)
class OneShotResult:
    exit_code: int
    stdout: str
    stderr: str


class _VerifiedSSHAdapter(SSHHTTPAdapter):
    """docker-py's SSH adapter, riding on a paramiko client our SSH gateway verified."""

    def __init__(self, session: NodeSession, timeout: float) -> None:
        self._session = session
        # Each pooled HTTP connection is one SSH session; sshd allows 10 per connection
        # (MaxSessions), shared with the collector and log followers: stay well below.
        super().__init__(
            f"ssh://{session.target.host}",
            # types-docker says int; docker-py hands it to urllib3, which takes seconds as float
            timeout=timeout,  # type: ignore[arg-type]
            shell_out=False,
            max_pool_size=4,
        )

    def _create_paramiko_client(self, base_url: str) -> None:  # noqa: ARG002 - docker-py hook
        self.ssh_client = self._session.client()
        self.ssh_params: JSONObject = {}

    def _connect(self) -> None:
        # called by docker-py when the transport is gone: reconnect (and re-verify) via the
        # gateway instead of its own unverified path
        self.ssh_client = self._session.client()

    def get_connection(
        self, url: str | bytes, proxies: Mapping[str, str] | None = None
    ) -> SSHConnectionPool:
        # docker-py keys its SSH pools by the full request URL, so every distinct URL
        # (/containers/X/start, /containers/X/wait, ...) opened a new SSH session that stayed
        # open in its own pool; after ten, sshd (MaxSessions 10) refused new ones. One pool per
        # node keeps the sessions at max_pool_size.
        # types-docker declares `pools` an int; docker-py keeps urllib3's RecentlyUsedContainer
        pools = cast("RecentlyUsedContainer[str, SSHConnectionPool]", self.pools)
        transport = self.ssh_client.get_transport() if self.ssh_client else None
        if transport is None or not transport.is_active():
            # The node was cut off and came back: reconnect (re-verified) and drop the pool
            # that still holds channels of the dead transport.
            self._connect()
            pools.clear()
        with pools.lock:
            pool = pools.get("http+docker://ssh")
            if pool is None:
                pool = _BoundedSSHPool(
                    ssh_client=self.ssh_client,
                    timeout=self.timeout,
                    maxsize=self.max_pool_size,
                    host=self.ssh_host,
                )
                pool.open_timeout_s = self._session.options.connect_timeout_s
                pools["http+docker://ssh"] = pool
        return pool


class _BoundedSSHConnection(SSHConnection):
    """docker-py's SSH connection, its channel opened within the SSH connect timeout (docker-py
    leaves paramiko's one-hour default: a frozen node held every docker call for an hour).
    Reads keep the gateway's timeout; only a follow stream (its caller closes it) waits longer."""

    open_timeout_s: float = 10.0

    def connect(self) -> None:
        if self.ssh_transport is None:
            raise paramiko.SSHException("no SSH transport")
        chan = self.ssh_transport.open_session(timeout=self.open_timeout_s)
        chan.settimeout(self.timeout)
        chan.exec_command("docker system dial-stdio")
        # docker-py stores the paramiko channel here too (types-docker says SSHSocket only)
        self.sock = chan  # type: ignore[assignment]


class _BoundedSSHPool(SSHConnectionPool):
    open_timeout_s: float = 10.0

    # types-docker's SSHConnection does not match urllib3's BaseHTTPConnection protocol (and
    # types the pool's urllib3 Timeout as int), as docker-py's own _new_conn does: the same call.
    def _new_conn(self) -> _BoundedSSHConnection:  # type: ignore[override]
        conn = _BoundedSSHConnection(self.ssh_transport, self.timeout, self.ssh_host)  # type: ignore[arg-type]
        conn.open_timeout_s = self.open_timeout_s
        return conn


class LogStream:
    """Lines of a followed container log; iterate it, `close()` it from any thread."""

    def __init__(self, node: str, raw: CancellableStream[bytes]) -> None:
        self._node = node
        self._raw = raw
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[str]:
        buf = b""
        try:
            for chunk in self._raw:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
        except (requests.RequestException, paramiko.SSHException, OSError) as e:
            if not self._closed.is_set():
                raise NodeUnreachable(self._node, f"log stream broke: {e}") from None
        if buf:
            yield buf.decode("utf-8", "replace")

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(Exception):
            self._raw.close()


class DockerGateway:
    """The docker engine of one node. Construct with `over_ssh` or `local`."""

    def __init__(self, node: str, api: docker.APIClient) -> None:
        self.node = node
        self.api = api

    @classmethod
    def over_ssh(cls, session: NodeSession, timeout: float = 60.0) -> DockerGateway:
        node = session.node
        with _translate(node, "connect"):
            adapter = _VerifiedSSHAdapter(session, timeout)
            # Bootstrap with a fixed version so the constructor makes no request, then route
            # every request through the verified adapter and ask the engine for its version.
            api = docker.APIClient(
                base_url="tcp://127.0.0.1:9", version=_BOOTSTRAP_API_VERSION, timeout=int(timeout)
            )
            api.mount("http+docker://ssh", adapter)
            api.base_url = "http+docker://ssh"
            # docker-py has no public way to set the negotiated version (types-docker omits it)
            api._version = api.version(api_version=False)["ApiVersion"]  # type: ignore[attr-defined]  # noqa: SLF001
        return cls(node, api)

    @classmethod
    def local(
        cls, node: str, base_url: str = "unix:///var/run/docker.sock", timeout: float = 60.0
    ) -> DockerGateway:
        with _translate(node, "connect"):
            api = docker.APIClient(
                base_url=base_url, version="auto", timeout=int(timeout), max_pool_size=2
            )
        return cls(node, api)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()

    # -- queries ----------------------------------------------------------------------------
    def list_tpwarden(
        self,
        cluster: str | None = None,
        component: str = "vllm",
    ) -> list[ContainerInfo]:
        """Every tpwarden container of this node (any state), found by labels. The node label
        matters where several nodes share one engine (the lab) and is harmless elsewhere."""
        labels = [f"{LABEL_COMPONENT}={component}", f"{LABEL_NODE}={self.node}"]
        if cluster:
            labels.append(f"{LABEL_CLUSTER}={cluster}")
        with _translate(self.node, "list containers"):
            rows = self.api.containers(all=True, filters={"label": labels})
            out = []
            for row in rows:
                try:
                    out.append(
                        container_info_from_inspect(
                            self.node, self.api.inspect_container(row["Id"])
                        )
                    )
                except docker.errors.NotFound:
                    continue  # removed between list and inspect
        return out

    def inspect(self, container: str) -> ContainerInfo | None:
        with _translate(self.node, f"inspect {container}"):
            try:
                return container_info_from_inspect(self.node, self.api.inspect_container(container))
            except docker.errors.NotFound:
                return None

    def image_present(self, image: str) -> bool:
        with _translate(self.node, f"inspect image {image}"):
            try:
                self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # unannotated in types-docker
                return True
            except docker.errors.ImageNotFound:
                return False
            except docker.errors.NotFound:
                return False

    def image_id(self, image: str) -> str | None:
        """The ID (sha256:...) `image` has on this node; None if it is not there."""
        with _translate(self.node, f"inspect image {image}"):
            try:
                found = self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # unannotated in types-docker
            except docker.errors.NotFound:  # ImageNotFound too
                return None
        return str(found["Id"])

    # -- actions ----------------------------------------------------------------------------
    def run_once(self, job: OneShot) -> OneShotResult:
        """Run a throwaway container to its end: created with no network, `job.files` copied in,
        started, waited for (at most `job.timeout_s`), its output read, removed in every case."""
        host_config = self.api.create_host_config(
            network_mode="none",
            device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if job.gpus else None,
        )
        with _translate(self.node, f"run a throwaway {job.image}"):
            created = self.api.create_container(
                image=job.image,
                entrypoint=list(job.argv[:1]),
                command=list(job.argv[1:]),
                environment=[f"{k}={v}" for k, v in job.env.items()],
                labels=dict(job.labels),
                host_config=host_config,
            )
            try:
                self.api.put_archive(created["Id"], "/", tar_files(job.files))
                self.api.start(created["Id"])
                code = self._wait_exit(created["Id"], job.timeout_s)
                out = self.api.logs(created["Id"], stdout=True, stderr=False)
                err = self.api.logs(created["Id"], stdout=False, stderr=True, tail=40)
            finally:
                with contextlib.suppress(docker.errors.APIError):
                    self.api.remove_container(created["Id"], force=True)
        return OneShotResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def run_to_completion(
        self, job: ContainerJob, sleep: Callable[[float], None] = time.sleep
    ) -> JobResult:
        """Create (`create_kwargs` of the plan), put the files in, start, wait, read the logs,
        fetch the results folder (also after a failure: an eval resume needs its request
        cache), and remove the container in every case (timeout, error, interrupt). Docker,
        HTTP and SSH errors become DockerError naming the node and the job."""
        api = self.api
        cid = None
        try:
            with _job_errors(self.node, f"{job.role} {job.plan.name}"):
                cid = api.create_container(**create_kwargs(job.plan, job.env, api))["Id"]
                if job.files:
                    api.put_archive(cid, "/", tar_files(job.files, job.files_dir, job.dir_mode))
                facts = container_facts(api.inspect_container(cid))
                started = time.monotonic()
                api.start(cid)
                rc = wait_watching(api, cid, job.timeout_s, job.watch, job.poll_s, sleep, job.role)
                elapsed = time.monotonic() - started
                logs = api.logs(cid, stdout=True, stderr=True).decode("utf-8", "replace")
                try:
                    results = untar_files(api.get_archive(cid, job.results_dir)[0])
                except docker.errors.NotFound:
                    results = {}
        finally:
            if cid is not None:
                with contextlib.suppress(TpwardenError):
                    self.remove(cid, stop_timeout=5)
        return JobResult(rc, logs, results, {**facts, "exit_code": rc}, elapsed)

    def _wait_exit(self, container: str, timeout_s: float) -> int:
        """Poll until the container exits (short requests: no HTTP read held open over SSH for
        minutes); DockerError past the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.api.inspect_container(container).get("State") or {}
            if state.get("Status") in ("exited", "dead"):
                return int(state.get("ExitCode", -1))
            if time.monotonic() > deadline:
                raise DockerError(
                    f"{self.node}: {container[:12]} still running after {timeout_s:.0f} s"
                )
            time.sleep(1.0)

    def run(
        self,
        plan: ContainerPlan,
        secret_values: Mapping[str, str] | None = None,
    ) -> ContainerInfo:
        """Create and start the container a plan describes. `secret_values` (env name ->
        value) are resolved by the caller at apply time; they go to the engine only."""
        env = {**plan.env, **(secret_values or {})}
        with _translate(self.node, f"run {plan.name}"):
            created = self.api.create_container(**create_kwargs(plan, env, self.api))
            self.api.start(created["Id"])
            info = self.inspect(created["Id"])
        if info is None:
            raise DockerError(f"{self.node}: container {plan.name} vanished after start")
        return info

    def remove(self, container: str, stop_timeout: int | None = None) -> bool:
        """Stop (SIGTERM, then SIGKILL after `stop_timeout`, by default the container's own
        StopTimeout: the serving containers carry tpwarden.container.stop_timeout_s) and
        remove. False if absent."""
        with _translate(self.node, f"remove {container}"):
            try:
                info = self.api.inspect_container(container)
            except docker.errors.NotFound:
                return False
            if (info.get("State") or {}).get("Paused"):
                with contextlib.suppress(docker.errors.APIError):
                    self.api.unpause(container)
            with contextlib.suppress(docker.errors.NotFound):
                if stop_timeout is None:  # the daemon applies the container's StopTimeout
                    self.api.stop(container)
                else:
                    self.api.stop(container, timeout=stop_timeout)
            try:
                self.api.remove_container(container, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                if "already in progress" not in str(e):
                    raise
        return True

    def pause(self, container: str) -> None:
        with _translate(self.node, f"pause {container}"):
            self.api.pause(container)

    def logs(self, container: str, tail: int | Literal["all"] = 100) -> str:
        with _translate(self.node, f"logs {container}"):
            raw = self.api.logs(container, stdout=True, stderr=True, tail=tail)
        return raw.decode("utf-8", "replace")

    def follow_logs(self, container: str, tail: int | Literal["all"] = 100) -> LogStream:
        with _translate(self.node, f"logs {container}"):
            raw = self.api.logs(
                container, stdout=True, stderr=True, stream=True, follow=True, tail=tail
            )
        return LogStream(self.node, raw)

    def exec_detached(
        self, container: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> None:
        """Start `argv` inside a running container and return without waiting for it."""
        with _translate(self.node, f"exec in {container}"):
            ex = self.api.exec_create(container, list(argv), environment=dict(env or {}))
            self.api.exec_start(ex["Id"], detach=True)


def wait_watching(
    api: docker.APIClient, cid: str, timeout_s: float, watch: Watch | None, poll_s: float = WATCH_POLL_S,
    sleep: Callable[[float], None] = time.sleep, role: str = "eval client",
) -> int:  # fmt: skip
    """The container's exit code. Without `watch`, one blocking wait; with it, poll the state
    and hand `watch` the log written since the last poll (`since`: docker keeps the whole log,
    and tqdm's bar is one ever-growing line)."""
    if watch is None:
        return int(api.wait(cid, timeout=int(timeout_s)).get("StatusCode", -1))
    deadline = time.monotonic() + timeout_s
    since = int(time.time()) - 1
    while time.monotonic() < deadline:
        if not (api.inspect_container(cid).get("State") or {}).get("Running"):
            return int(api.wait(cid, timeout=60).get("StatusCode", -1))
        now = int(time.time())
        watch(api.logs(cid, stdout=True, stderr=True, since=since).decode("utf-8", "replace"))
        since = now
        sleep(poll_s)
    raise DockerError(f"{role} {cid[:12]} still running after {timeout_s:.0f} s")


@contextlib.contextmanager
def _job_errors(node: str, what: str) -> Iterator[None]:
    """A client job's docker-py / requests / paramiko errors -> DockerError (all of them, as
    the bench and eval clients always had it; `_translate` tells unreachable nodes apart)."""
    try:
        yield
    except (docker.errors.DockerException, requests.RequestException, paramiko.SSHException) as e:
        raise DockerError(f"{node}: {what}: {e}") from None


@contextlib.contextmanager
def _translate(node: str, what: str) -> Iterator[None]:
    """docker-py / requests / paramiko errors -> DockerError / NodeUnreachable."""
    try:
        yield
    except NodeUnreachable:
        raise
    except docker.errors.APIError as e:
        raise DockerError(f"{node}: {what}: {e.explanation or e}") from None
    except docker.errors.DockerException as e:
        raise DockerError(f"{node}: {what}: {e}") from None
    except (
        requests.ConnectionError,
        requests.Timeout,
        paramiko.SSHException,
        EOFError,
        ConnectionError,
        TimeoutError,
    ) as e:
        raise NodeUnreachable(node, f"docker engine: {what}: {e or type(e).__name__}") from None
