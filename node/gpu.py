"""The NVML gateway: the only module in tpwarden that imports ``pynvml`` (nvidia-ml-py).

Everything NVML answers is translated here, once:

- every query is guarded on its own; ``NOT_SUPPORTED`` (GB10 memory info and fan) is a normal
  answer, a :class:`Reading` with ``value=None`` and a reason, never an exception;
- a missing library or driver is a state (:class:`NvmlStatus`), not a crash;
- units are converted once (mW -> W, mJ -> J, bytes -> MiB) and named in the field;
- clock-event reason bits are decoded with pynvml's own constants, never hand-written hex;
- only clock locking raises, as :class:`~cluster.errors.NvmlError` with a message that says why.

NVML has no getter for the locked clock range (``nvmlDeviceSetGpuLockedClocks``, ``nvidia-smi
-lgc``; the application clock target is superseded, not set, by a lock). ``locked_clock_max_mhz``
is therefore the cap the last lock call set *by its own answer*, as recorded on the node by
:mod:`tpwarden.node.clockcap` (``None`` with the reason when there is no successful one): check
``sm_clock_mhz`` under load against it. :meth:`Nvml.try_lock_clocks` returns each GPU's answer.

Init is lazy (first call), so constructing :class:`Nvml` touches nothing. Not thread-safe.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Generic, Never, ParamSpec, TypeVar

import pynvml
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import NvmlError
from tpwarden.node import clockcap
from tpwarden.node.clockcap import LockAnswer

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V", covariant=True)  # a Reading of nothing (no handle) stands for any field
LibraryLoader = Callable[[], ctypes.CDLL]

_MIB = 1024 * 1024
_MEMORY_HINT = "unified memory (GB10): read /proc/meminfo instead"

# Bit -> name, from pynvml's constants. nvml.h keeps some hardware bits only under the
# deprecated "Throttle" spelling, so fall back to it.
_REASON_CONSTANTS = (
    ("GpuIdle", "gpu_idle"),
    ("ApplicationsClocksSetting", "applications_clocks_setting"),
    ("SwPowerCap", "sw_power_cap"),
    ("HwSlowdown", "hw_slowdown"),
    ("SyncBoost", "sync_boost"),
    ("SwThermalSlowdown", "sw_thermal_slowdown"),
    ("HwThermalSlowdown", "hw_thermal_slowdown"),
    ("HwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    ("DisplayClockSetting", "display_clocks_setting"),
    ("BoardLimit", "board_limit"),
    ("Reliability", "reliability"),
)


def _reason_bits() -> tuple[tuple[int, str], ...]:
    table = []
    for suffix, name in _REASON_CONSTANTS:
        bit = getattr(pynvml, f"nvmlClocksEventReason{suffix}", None)
        if bit is None:
            bit = getattr(pynvml, f"nvmlClocksThrottleReason{suffix}", None)
        if bit:
            table.append((int(bit), name))
    return tuple(table)


CLOCK_EVENT_REASON_BITS = _reason_bits()


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clock-event bitmask; unknown bits as ``unknown_0x..``."""
    names = [name for bit, name in CLOCK_EVENT_REASON_BITS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASON_BITS:
        known |= bit
    rest = mask & ~known
    if rest:
        names.append(f"unknown_{rest:#x}")
    return tuple(names)


@dataclass(frozen=True)
class Reading(Generic[V]):
    """One value NVML was asked for: ``value``, or ``None`` and the ``reason`` it is missing."""

    value: V | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


@dataclass(frozen=True, kw_only=True)
class NvmlStatus:
    """Whether NVML can be used. ``state``: ok, library_not_found, driver_not_loaded or error."""

    state: str
    reason: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = None
    device_count: int = 0

    @property
    def available(self) -> bool:
        return self.state == "ok"


@dataclass(frozen=True, kw_only=True)
class GpuSample:
    """One GPU at one moment; every measured field is a :class:`Reading`, units in the name."""

    index: int
    name: Reading[str]
    uuid: Reading[str]
    temp_c: Reading[int]
    sm_clock_mhz: Reading[int]
    sm_clock_max_mhz: Reading[int]
    locked_clock_max_mhz: Reading[int]
    power_w: Reading[float]
    energy_j: Reading[float]
    util_pct: Reading[int]
    memory_used_mib: Reading[float]
    memory_total_mib: Reading[float]
    fan_pct: Reading[int]
    pstate: Reading[int]
    slowdown_temp_c: Reading[int]
    shutdown_temp_c: Reading[int]
    clock_event_reasons_mask: Reading[int]
    clock_event_reasons: Reading[tuple[str, ...]]

    def to_json(self) -> JSONObject:
        """JSON-ready dict: values (``null`` when missing) plus ``missing: {field: reason}``."""
        row: JSONObject = {"index": self.index}
        missing: dict[str, str] = {}
        for f in fields(self):
            if f.name == "index":
                continue
            reading: Reading[object] = getattr(self, f.name)
            value = reading.value
            row[f.name] = list(value) if isinstance(value, tuple) else value
            if value is None:
                missing[f.name] = reading.reason or "unknown"
        row["missing"] = missing
        return row


def _describe(exc: pynvml.NVMLError, call: str) -> str:
    if isinstance(exc, pynvml.NVMLError_NotSupported):
        return f"{call}: not supported on this GPU/driver"
    if isinstance(exc, pynvml.NVMLError_FunctionNotFound):
        return f"{call}: not in this NVML library (driver too old)"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return f"{call}: insufficient permissions"
    if isinstance(exc, pynvml.NVMLError_GpuIsLost):
        return f"{call}: GPU is lost (fell off the bus or the driver lost it)"
    return f"{call}: NVML error {exc.value} ({exc})"


def _answer_names() -> dict[int, str]:
    names = {0: "SUCCESS"}
    for attr, value in vars(pynvml).items():
        if attr.startswith("NVML_ERROR_") and isinstance(value, int):
            names.setdefault(value, attr.removeprefix("NVML_ERROR_"))
    return names


_ANSWER_NAMES = _answer_names()


def lock_answer(index: int, exc: pynvml.NVMLError | None) -> LockAnswer:
    """A GPU's answer to a lock/reset call: SUCCESS (``exc`` None) or NVML's error name."""
    if exc is None:
        return LockAnswer(index=index, answer="SUCCESS", code=0)
    code = int(exc.value)
    name = _ANSWER_NAMES.get(code, f"ERROR_{code}")
    return LockAnswer(index=index, answer=name, code=code, message=str(exc))


def _status_from(exc: pynvml.NVMLError) -> NvmlStatus:
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return NvmlStatus(
            state="library_not_found", reason="libnvidia-ml.so.1 not found: no NVIDIA driver"
        )
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return NvmlStatus(state="driver_not_loaded", reason="NVML: NVIDIA driver not loaded")
    if isinstance(exc, pynvml.NVMLError_LibRmVersionMismatch):
        return NvmlStatus(
            state="error", reason="NVML: driver/library version mismatch (reboot or reload)"
        )
    return NvmlStatus(state="error", reason=f"NVML init failed: error {exc.value} ({exc})")


def _call(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Reading[T]:
    try:
        return Reading(fn(*args, **kwargs))
    except pynvml.NVMLError as exc:
        reason = _describe(exc, getattr(fn, "__name__", "nvml"))
        if isinstance(exc, pynvml.NVMLError_GpuIsLost):
            log.warning("%s", reason)
        return Reading(None, reason)


def _convert(reading: Reading[T], fn: Callable[[T], U]) -> Reading[U]:
    return (
        Reading(fn(reading.value)) if reading.value is not None else Reading(None, reading.reason)
    )


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """Lazy, guarded access to NVML.

    ``library_loader`` returns an already loaded ``ctypes.CDLL`` to use instead of pynvml's own
    ``CDLL("libnvidia-ml.so.1")`` (tests point it at the lab's stub). pynvml keeps one library per
    process; :meth:`close` unloads one this object installed. The clock cap each sample reports
    is the node's record of the lock call (:func:`tpwarden.node.clockcap.record_path`).
    """

    def __init__(self, library_loader: LibraryLoader | None = None) -> None:
        self._loader = library_loader
        self._status: NvmlStatus | None = None
        self._installed = False
        self._initialized = False

    # -- lifecycle ------------------------------------------------------------------------------
    def status(self) -> NvmlStatus:
        """Initialise NVML on first use and say whether it is usable (never raises)."""
        if self._status is None:
            self._status = self._init()
        return self._status

    def _init(self) -> NvmlStatus:
        if self._loader is not None:
            problem = self._install_library(self._loader)
            if problem is not None:
                return problem
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self._uninstall_library()
            return _status_from(exc)
        self._initialized = True
        driver = _call(pynvml.nvmlSystemGetDriverVersion)
        nvml = _call(pynvml.nvmlSystemGetNVMLVersion)
        cuda = _call(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        count = _call(pynvml.nvmlDeviceGetCount)
        return NvmlStatus(
            state="ok" if count.ok else "error",
            reason=None if count.ok else count.reason,
            driver_version=_convert(driver, _text).value,
            nvml_version=_convert(nvml, _text).value,
            cuda_driver_version=cuda.value,
            device_count=count.value or 0,
        )

    def _install_library(self, loader: LibraryLoader) -> NvmlStatus | None:
        try:
            lib = loader()
        except OSError as exc:
            return NvmlStatus(
                state="library_not_found", reason=f"cannot load the NVML library: {exc}"
            )
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is lib:
                return None
            if pynvml.nvmlLib is not None and pynvml._nvmlLib_refcount > 0:
                return NvmlStatus(
                    state="error", reason="another NVML library is in use in this process"
                )
            pynvml.nvmlLib = lib
            pynvml._nvmlGetFunctionPointer_cache.clear()
            self._installed = True
        return None

    def _uninstall_library(self) -> None:
        if not self._installed:
            return
        with pynvml.libLoadLock:
            if pynvml._nvmlLib_refcount == 0:
                pynvml.nvmlLib = None
                pynvml._nvmlGetFunctionPointer_cache.clear()
        self._installed = False

    def close(self) -> None:
        """Shut NVML down if this object initialised it. Safe to call twice."""
        if self._initialized:
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
        self._uninstall_library()
        self._status = None

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sampling -------------------------------------------------------------------------------
    def sample_all(self) -> list[GpuSample]:
        """One :class:`GpuSample` per GPU; empty when NVML is unavailable (see :meth:`status`)."""
        status = self.status()
        if not status.available:
            return []
        record, why = clockcap.read_record()
        return [self._sample(i, record, why) for i in range(status.device_count)]

    def _sample(self, index: int, record: JSONObject | None, why: str | None) -> GpuSample:
        handle = _call(pynvml.nvmlDeviceGetHandleByIndex, index)
        if not handle.ok:
            gone: Reading[Never] = Reading(None, handle.reason)
            names = [f.name for f in fields(GpuSample) if f.name != "index"]
            return GpuSample(index=index, **{name: gone for name in names})
        h = handle.value
        sm_max = _call(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM)
        memory = _call(pynvml.nvmlDeviceGetMemoryInfo, h)
        if not memory.ok and memory.reason and "not supported" in memory.reason:
            memory = Reading(None, f"{memory.reason}; {_MEMORY_HINT}")
        mask = _call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        if not mask.ok and "not in this NVML" in (mask.reason or ""):
            mask = _call(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        pstate = _call(pynvml.nvmlDeviceGetPerformanceState, h)
        if pstate.value == pynvml.NVML_PSTATE_UNKNOWN:
            pstate = Reading(None, "nvmlDeviceGetPerformanceState: unknown")
        return GpuSample(
            index=index,
            name=_convert(_call(pynvml.nvmlDeviceGetName, h), _text),
            uuid=_convert(_call(pynvml.nvmlDeviceGetUUID, h), _text),
            temp_c=self._temperature(h),
            sm_clock_mhz=_call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
            sm_clock_max_mhz=sm_max,
            locked_clock_max_mhz=Reading(*clockcap.recorded_cap(record, why, index)),
            power_w=_convert(_call(pynvml.nvmlDeviceGetPowerUsage, h), lambda mw: mw / 1000.0),
            energy_j=_convert(
                _call(pynvml.nvmlDeviceGetTotalEnergyConsumption, h), lambda mj: mj / 1000.0
            ),
            util_pct=_convert(_call(pynvml.nvmlDeviceGetUtilizationRates, h), lambda u: u.gpu),
            memory_used_mib=_convert(memory, lambda m: round(m.used / _MIB, 1)),
            memory_total_mib=_convert(memory, lambda m: round(m.total / _MIB, 1)),
            fan_pct=_call(pynvml.nvmlDeviceGetFanSpeed, h),
            pstate=pstate,
            slowdown_temp_c=_call(
                pynvml.nvmlDeviceGetTemperatureThreshold,
                h,
                pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            ),
            shutdown_temp_c=_call(
                pynvml.nvmlDeviceGetTemperatureThreshold,
                h,
                pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
            ),
            clock_event_reasons_mask=mask,
            clock_event_reasons=_convert(mask, decode_clock_event_reasons),
        )

    def extras(self) -> list[JSONObject]:
        """Per GPU, what the ledger records beside a sample: the enforced power limit (W; GB10
        answers Not Supported) and the PIDs NVML lists as compute users (None with the reason
        when it cannot)."""
        status = self.status()
        out: list[JSONObject] = []
        for index in range(status.device_count if status.available else 0):
            handle = _call(pynvml.nvmlDeviceGetHandleByIndex, index)
            if not handle.ok:
                out.append({"index": index, "power_limit_w": None, "compute_pids": None,
                            "missing": {"power_limit_w": handle.reason, "compute_pids": handle.reason}})  # fmt: skip
                continue
            limit = _convert(
                _call(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle.value), lambda mw: mw / 1000.0
            )
            # the versioned call: the unversioned one raises NVMLLibraryMismatchError (not an
            # NVMLError) when the library's version is not the bindings' own
            procs = _convert(
                _call(pynvml.nvmlDeviceGetComputeRunningProcesses_v3, handle.value),
                lambda ps: [int(p.pid) for p in ps],
            )
            missing = {k: r.reason for k, r in (("power_limit_w", limit), ("compute_pids", procs))
                       if r.value is None}  # fmt: skip
            out.append({"index": index, "power_limit_w": limit.value,
                        "compute_pids": procs.value, "missing": missing})  # fmt: skip
        return out

    @staticmethod
    def _temperature(h: object) -> Reading[int]:
        temp = _call(pynvml.nvmlDeviceGetTemperatureV, h, pynvml.NVML_TEMPERATURE_GPU)
        if temp.ok or "not in this NVML" not in (temp.reason or ""):
            return temp
        return _call(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)

    # -- clock locking ----------------------------------------------------------------------------
    def lock_clocks(self, max_mhz: int, min_mhz: int = 0) -> None:
        """Lock every GPU's clocks to [min_mhz, max_mhz] (``nvidia-smi -lgc min,max``). Root only.

        The cap does not survive a reboot or driver reload: re-apply it at service start.
        Raises :class:`NvmlError` with the driver's answer if any GPU refused.
        """
        _raise_refusal("lock GPU clocks", self.try_lock_clocks(max_mhz, min_mhz))

    def reset_clocks(self) -> None:
        """Undo :meth:`lock_clocks` on every GPU (``nvidia-smi -rgc``). Root only."""
        _raise_refusal("reset GPU clocks", self.try_reset_clocks())

    def try_lock_clocks(self, max_mhz: int, min_mhz: int = 0) -> tuple[LockAnswer, ...]:
        """Every GPU's answer to ``nvmlDeviceSetGpuLockedClocks(min, max)``: the only proof of a
        cap NVML gives. Raises :class:`NvmlError` only for a bad range or NVML unavailable."""
        if max_mhz <= 0 or min_mhz < 0 or min_mhz > max_mhz:
            raise NvmlError(f"invalid clock range {min_mhz},{max_mhz} MHz (need 0 <= min <= max)")
        return self._each_device(
            "lock GPU clocks", lambda h: pynvml.nvmlDeviceSetGpuLockedClocks(h, min_mhz, max_mhz)
        )

    def try_reset_clocks(self) -> tuple[LockAnswer, ...]:
        """Every GPU's answer to ``nvmlDeviceResetGpuLockedClocks``."""
        return self._each_device("reset GPU clocks", pynvml.nvmlDeviceResetGpuLockedClocks)

    def _each_device(self, what: str, action: Callable[[object], None]) -> tuple[LockAnswer, ...]:
        status = self.status()
        if not status.available:
            raise NvmlError(f"cannot {what}: {status.reason}")
        answers = []
        for index in range(status.device_count):
            try:
                action(pynvml.nvmlDeviceGetHandleByIndex(index))
            except pynvml.NVMLError as exc:
                answers.append(lock_answer(index, exc))
            else:
                answers.append(lock_answer(index, None))
        return tuple(answers)


def _raise_refusal(what: str, answers: tuple[LockAnswer, ...]) -> None:
    for a in answers:
        if not a.ok:
            raise NvmlError(f"cannot {what} on GPU {a.index}: {clockcap.refusal_text(a)}")


def collect_json(nvml: Nvml | None = None, clock: Callable[[], float] = time.time) -> JSONObject:
    """Everything NVML knows, as a JSON-serialisable dict (for the node-side collector).

    Shape: ``{"time_unix_s", "nvml": {state, reason, versions, device_count, available},
    "gpus": [GpuSample.to_json(), ...]}``; missing values are ``null`` with a reason under each
    GPU's ``missing``. Pass ``nvml`` to reuse one; otherwise one is opened and closed here.
    """
    own = nvml is None
    gateway = Nvml() if nvml is None else nvml
    try:
        status = gateway.status()
        gpus = [sample.to_json() for sample in gateway.sample_all()]
    finally:
        if own:
            gateway.close()
    return {
        "time_unix_s": clock(),
        "nvml": {**asdict(status), "available": status.available},
        "gpus": gpus,
    }


def library_from(path: str) -> LibraryLoader:
    """A ``library_loader`` that loads the NVML library at ``path`` (e.g. the lab's stub)."""
    return lambda: ctypes.CDLL(path)
