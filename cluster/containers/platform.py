"""An image's platform against the node's (issue 52 item 5): `docker image inspect` says an
image's Architecture in Go's names (amd64, arm64), `docker info` the engine's machine as
`uname -m` does (x86_64, aarch64). An image of the other architecture fails only after the
pull, as `exec format error`; pre-flight names image, digest and both architectures before.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONValue

# uname -m (docker info's Architecture) -> GOARCH (an image's Architecture)
GO_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


@dataclass(frozen=True)
class ImagePlatform:
    """What `docker image inspect` says of an image's platform and identity."""

    id: str
    architecture: str
    os: str = "linux"
    variant: str = ""
    repo_digests: tuple[str, ...] = field(default_factory=tuple)

    @property
    def platform(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    @property
    def digest(self) -> str:
        """The registry digest when the image came from one (repo@sha256:...), else its ID."""
        return self.repo_digests[0] if self.repo_digests else self.id


def platform_from_inspect(attrs: Mapping[str, JSONValue]) -> ImagePlatform:
    return ImagePlatform(
        id=str(attrs.get("Id") or ""),
        architecture=str(attrs.get("Architecture") or ""),
        os=str(attrs.get("Os") or ""),
        variant=str(attrs.get("Variant") or ""),
        repo_digests=tuple(str(d) for d in attrs.get("RepoDigests") or ()),
    )


def go_arch(machine: str) -> str:
    return GO_ARCH.get(machine.strip().lower(), machine.strip().lower())


def arch_mismatch(node: str, image: str, found: ImagePlatform, machine: str) -> str | None:
    """Why `image` cannot run on a node whose engine runs on `machine` (uname -m); None when it
    can (or when either side does not say)."""
    if not found.architecture or not machine or go_arch(machine) == found.architecture:
        return None
    return (
        f"{node}: image {image} ({found.digest}) is {found.platform}, the node is {machine} "
        f"(linux/{go_arch(machine)}): it would fail with 'exec format error'; pull the "
        f"{go_arch(machine)} variant (docker pull --platform linux/{go_arch(machine)} {image})"
    )
