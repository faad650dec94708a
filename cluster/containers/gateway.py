"""The Docker gateway: one docker SDK client per node, over ssh:// or the local socket.

Host-key checking over ssh://: docker-py's own paramiko adapter (`SSHHTTPAdapter`) calls
`load_system_host_keys()` (only ~/.ssh/known_hosts) with `RejectPolicy`, reads identity files
only from ~/.ssh/config, and connects without a timeout, in its constructor. None of that can be
pointed at the inventory's known_hosts file. So we hand docker-py the paramiko client our SSH
gateway already connected and verified (`tpwarden.cluster.ssh.gateway.NodeSession`): a small adapter subclass
overrides the two hooks that create and connect the client. Checks are never disabled, the
docker API rides on the same verified SSH transport as every other command (one connection per
node), and a dropped connection reconnects through the gateway, which verifies the key again.
As with `docker -H ssh://`, the node needs the docker CLI (`docker system dial-stdio`).

Results are our own frozen dataclasses; docker/requests/paramiko errors become `DockerError` or
`NodeUnreachable`.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Literal

import docker
import docker.errors
import paramiko
import requests
from docker.types import DeviceRequest, Mount, Ulimit
from tpwarden.cluster.containers.info import ContainerInfo, container_info_from_inspect
from tpwarden.cluster.containers.job import (
    WATCH_POLL_S,
    ContainerJob,
    JobResult,
    OneShot,
    OneShotResult,
    Watch,
    container_facts,
    tar_files,
    untar_files,
)
from tpwarden.cluster.containers.platform import ImagePlatform, platform_from_inspect
from tpwarden.cluster.containers.ssh_transport import VerifiedSSHAdapter
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import DockerError, NodeUnreachable, TpwardenError
from tpwarden.cluster.labels import (
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_NODE,
)

if TYPE_CHECKING:
    from docker.types.daemon import CancellableStream
    from tpwarden.cluster.launch import ContainerPlan
    from tpwarden.cluster.ssh.gateway import NodeSession

log = logging.getLogger(__name__)

_BOOTSTRAP_API_VERSION = "1.41"
# how soon a watched client's exit is seen (one inspect request per poll, over SSH on a cluster)
EXIT_POLL_S = 1.0


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


class ImageBuildFailed(DockerError):
    """The engine ran the build and a step of it failed (what it said is the message)."""


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
            adapter = VerifiedSSHAdapter(session, timeout)
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

    def architecture(self) -> str:
        """The engine's machine as `uname -m` names it there (`docker info`'s Architecture)."""
        with _translate(self.node, "read the engine's info"):
            return str(self.api.info().get("Architecture") or "")

    def image_present(self, image: str) -> bool:
        with _translate(self.node, f"inspect image {image}"):
            try:
                self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # unannotated in types-docker
                return True
            except docker.errors.ImageNotFound:
                return False
            except docker.errors.NotFound:
                return False

    def image_platform(self, image: str) -> ImagePlatform | None:
        """The image's architecture, OS, ID and registry digests here; None if it is absent."""
        with _translate(self.node, f"inspect image {image}"):
            try:
                found = self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # unannotated in types-docker
            except docker.errors.NotFound:  # ImageNotFound too
                return None
        return platform_from_inspect(found)

    def image_id(self, image: str) -> str | None:
        """The ID (sha256:...) `image` has on this node; None if it is not there."""
        found = self.image_platform(image)
        return found.id if found is not None else None

    def repo_digests(self, image: str) -> tuple[str, ...]:
        """The registry digests (`name@sha256:...`) of `image` here; () if none or absent."""
        with _translate(self.node, f"inspect image {image}"):
            try:
                found = self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # unannotated in types-docker
            except docker.errors.NotFound:
                return ()
        return tuple(str(d) for d in found.get("RepoDigests") or ())

    # -- actions ----------------------------------------------------------------------------
    def run_once(self, job: OneShot) -> OneShotResult:
        """Run a throwaway container to its end: created with no network, `job.files` copied in,
        started, waited for (at most `job.timeout_s`), its output read, removed in every case.
        One-shots of the same labels that have exited but were never removed (their caller was
        killed) are removed first."""
        if job.labels:
            self._remove_exited(job.labels)
        host_config = self.api.create_host_config(
            network_mode="none",
            device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if job.gpus else None,
            pid_mode=f"container:{job.pid_of}" if job.pid_of else None,
            cap_add=list(job.cap_add) or None,
        )
        with _translate(self.node, f"run a throwaway {job.image}"):
            created = self.api.create_container(
                image=job.image,
                entrypoint=list(job.argv[:1]),
                command=list(job.argv[1:]),
                environment=[f"{k}={v}" for k, v in job.env.items()],
                labels=dict(job.labels),
                host_config=host_config,
                user=job.user,
            )
            try:
                archive = tar_files(job.files, executable=job.executable)
                self.api.put_archive(created["Id"], "/", gzip.compress(archive, compresslevel=1))
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

    def _remove_exited(self, labels: Mapping[str, str]) -> None:
        """Remove the exited containers carrying all of `labels` (a running one is left: it may
        be another caller's, and it ends by its own timeout)."""
        wanted = {"label": [f"{k}={v}" for k, v in labels.items()], "status": ["exited", "dead"]}
        with _translate(self.node, "list exited one-shots"):
            leftovers = self.api.containers(all=True, filters=wanted)
        for leftover in leftovers:
            with contextlib.suppress(docker.errors.APIError):
                self.api.remove_container(leftover["Id"], force=True)

    def _wait_exit(self, container: str, timeout_s: float) -> int:
        """Poll until the container exits (short requests: no HTTP read held open over SSH for
        minutes), every 0.1 s at first, backing off to every second; DockerError past the
        deadline."""
        deadline = time.monotonic() + timeout_s
        pause = 0.1
        while True:
            state = self.api.inspect_container(container).get("State") or {}
            if state.get("Status") in ("exited", "dead"):
                return int(state.get("ExitCode", -1))
            if time.monotonic() > deadline:
                raise DockerError(
                    f"{self.node}: {container[:12]} still running after {timeout_s:.0f} s"
                )
            time.sleep(pause)
            pause = min(1.0, pause * 2)

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

    def build_image(
        self, context: IO[bytes], tag: str, *, timeout_s: float,
        on_line: Callable[[str], None] = lambda line: None,
    ) -> None:  # fmt: skip
        """`docker build` of a gzipped tar `context` (its Dockerfile at the root) on this node,
        offline (no network, no pull), intermediate containers removed; the build's output
        lines go to `on_line`. A build that fails raises ImageBuildFailed with its last lines;
        an engine that cannot be reached, DockerError."""
        tail: list[str] = []
        with _job_errors(self.node, f"build {tag}"):
            stream = self.api.build(
                fileobj=context, custom_context=True, encoding="gzip", tag=tag, rm=True,
                forcerm=True, pull=False, network_mode="none", decode=True, timeout=int(timeout_s),
            )  # fmt: skip
            for chunk in stream:
                if "error" in chunk:
                    last = "".join(tail[-20:])
                    raise ImageBuildFailed(f"docker build {tag} failed: {chunk['error']}\n{last}")
                text = str(chunk.get("stream") or "")
                if text.strip():
                    tail.append(text)
                    on_line(text.rstrip())

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
    clock: Callable[[], float] = time.monotonic,
) -> int:  # fmt: skip
    """The container's exit code. Without `watch`, one blocking wait; with it, the state is
    polled every EXIT_POLL_S (an exit is seen within that, not a whole `poll_s` later: a suite
    of short tasks lost up to 30 s each) and `watch` gets the log written since its last call
    every `poll_s` (`since`: docker keeps the whole log, and tqdm's bar is one ever-growing
    line)."""
    if watch is None:
        return int(api.wait(cid, timeout=int(timeout_s)).get("StatusCode", -1))
    deadline = clock() + timeout_s
    since, next_watch = int(time.time()) - 1, clock()
    while clock() < deadline:
        if not (api.inspect_container(cid).get("State") or {}).get("Running"):
            return int(api.wait(cid, timeout=60).get("StatusCode", -1))
        if clock() >= next_watch:
            now = int(time.time())
            watch(api.logs(cid, stdout=True, stderr=True, since=since).decode("utf-8", "replace"))
            since, next_watch = now, clock() + poll_s
        sleep(min(poll_s, EXIT_POLL_S))
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
