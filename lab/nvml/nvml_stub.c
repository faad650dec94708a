/*
 * tpwarden lab: a stand-in for NVIDIA's libnvidia-ml.so.1 (NVML) on a simulated GB10 node.
 *
 * Compiled against NVIDIA's real nvml.h (PyPI package nvidia-nvml-dev), so every export has
 * NVIDIA's exact signature, enum values and struct layouts. The lab installs it inside each node
 * where the driver would put it (e.g. /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1); the real
 * pynvml (nvidia-ml-py) and nvidia-smi-free tooling then run against it unchanged.
 *
 * STATE FILE
 *   Path: $TPWARDEN_LAB_GPU_STATE, default /var/lib/tpwarden-lab/gpu/state.
 *   Written by the lab's sensor model (lab/sensors.py), re-read on every call.
 *   Format: one `key=value` per line; blank lines and lines starting with '#' are ignored;
 *   no quoting, the value runs to the end of the line. Integers may be decimal or 0x-hex.
 *   A key that is absent or empty makes the matching query answer NVML_ERROR_NOT_SUPPORTED.
 *
 *   device_count            number of GPUs (GB10: 1; default 1)
 *   gpu_name                e.g. "NVIDIA GB10"
 *   uuid                    e.g. "GPU-5f1c..."
 *   driver_version          e.g. "580.95.05"
 *   cuda_driver_version     e.g. 13000 (CUDA 13.0)
 *   temp_c                  GPU core temperature, degrees C (signed int)
 *   slowdown_temp_c         NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
 *   shutdown_temp_c         NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
 *   gpu_max_temp_c          NVML_TEMPERATURE_THRESHOLD_GPU_MAX
 *   sm_clock_natural_mhz    the clock the GPU would run at now without a cap (load dependent)
 *   sm_clock_max_mhz        nvmlDeviceGetMaxClockInfo(SM/GRAPHICS); also the default app clock
 *   locked_clock_min_mhz    set by nvmlDeviceSetGpuLockedClocks (0 = none); the driver's own
 *   locked_clock_max_mhz    state: no NVML call reads it back (the lab's sensor model does)
 *   lock_clocks_answer      how nvmlDeviceSetGpuLockedClocks answers (a lab fault): empty or
 *                           absent = as the driver would (root: SUCCESS, else NO_PERMISSION);
 *                           NOT_SUPPORTED or NO_PERMISSION = that error, even for root, and the
 *                           state is left alone. Any other value: NVML_ERROR_UNKNOWN.
 *   power_mw                nvmlDeviceGetPowerUsage, milliwatts
 *   energy_mj               nvmlDeviceGetTotalEnergyConsumption, millijoules since boot
 *   util_pct                utilization.gpu, percent
 *   mem_util_pct            utilization.memory, percent (default 0)
 *   pstate                  0..15 (GB10 idles in P8)
 *   clock_event_reasons     active clock event reason bitmask (nvmlClocksEventReason*)
 *   supported_clock_event_reasons   bitmask (default 0x1ff)
 *   sw_power_cap_ns, sw_thermal_slowdown_ns, hw_thermal_slowdown_ns, hw_power_brake_slowdown_ns
 *                           cumulative counters served through nvmlDeviceGetFieldValues
 *                           (NVML_FI_DEV_CLOCKS_EVENT_REASON_*; nvml.h says ns)
 *   memory_total_bytes, memory_used_bytes, fan_pct
 *                           never written for a GB10 (unified memory, no fan): NOT_SUPPORTED
 *
 * SEMANTICS (GB10 quirks from docs/reference thermal.md)
 *   - No state file at nvmlInit: NVML_ERROR_DRIVER_NOT_LOADED (as with no driver). State file
 *     gone after init: NVML_ERROR_GPU_IS_LOST.
 *   - Reported SM/graphics clock = sm_clock_natural_mhz clamped into [locked min, locked max].
 *   - Memory info (v1, v2), fan speed (v1, v2, RPM), memory clock, power limits: NOT_SUPPORTED.
 *   - nvmlDeviceSetGpuLockedClocks needs root (geteuid()==0) else NVML_ERROR_NO_PERMISSION; as
 *     root it rewrites the state file atomically (flock on "<state>.lock", temp file, fsync,
 *     rename) so the cap is seen by every later process. (UNLIMITED, UNLIMITED) == reset.
 *   - The locked range has NO read-back, as with the real library. Sources:
 *       - nvml.h from nvidia-nvml-dev 13.5.37 (build.py NVML_DEV_REQUIREMENT): it declares
 *         nvmlDeviceSetGpuLockedClocks / nvmlDeviceResetGpuLockedClocks and no getter for the
 *         locked range; its errors are NO_PERMISSION ("if the user doesn't have permission"),
 *         NOT_SUPPORTED ("if the device doesn't support this feature"), INVALID_ARGUMENT,
 *         GPU_IS_LOST, UNKNOWN; "Requires root/admin permissions"; "After system reboot or
 *         driver reload GPU clocks go back to their default value".
 *       - the same header marks NVML_CLOCK_ID_APP_CLOCK_TARGET and _APP_CLOCK_DEFAULT
 *         "Deprecated, do not use" (application clocks go away in CUDA 14.0);
 *       - nvidia-smi's help for -lgc: "Setting this will supersede application clocks and take
 *         effect regardless if an app is running" (docs/reference thermal.md 1.4, which also
 *         finds "no NVML getter for current locked range"; check sm clocks under load).
 *     So nvmlDeviceGetClock(SM, APP_CLOCK_TARGET) answers the application clock target, which a
 *     lock leaves alone: the default (sm_clock_max_mhz), capped or not. Only
 *     NVML_CLOCK_ID_CURRENT (and nvmlDeviceGetClockInfo) shows the lock's effect, clamping the
 *     natural clock. Unverified on GB10: the capture at hand (docs/reference samples, a plain
 *     nvidia-smi table) does not show application clocks, so whether GB10 answers the target at
 *     all is unknown; tpwarden no longer reads it (node/gpu.py records the lock call's answer).
 *   - lock_clocks_answer (above) makes the lock and reset calls answer as a node whose driver
 *     refuses them would, for root too, with the state file untouched.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* declare both nvmlInit and nvmlInit_v2, etc. */
#include "nvml.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define DEFAULT_STATE_PATH "/var/lib/tpwarden-lab/gpu/state"
#define MAX_KEYS 64
#define MAX_LINE 256
#define MAX_DEVICES 8

struct nvmlDevice_st {
    unsigned int index;
};

typedef struct {
    int n;
    char key[MAX_KEYS][64];
    char val[MAX_KEYS][MAX_LINE];
} state_t;

static struct nvmlDevice_st g_devices[MAX_DEVICES] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int g_init_count = 0;

static const char *state_path(void)
{
    const char *p = getenv("TPWARDEN_LAB_GPU_STATE");
    return (p && *p) ? p : DEFAULT_STATE_PATH;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* 0 on success, -1 if the file cannot be read. */
static int state_load(state_t *st)
{
    FILE *f = fopen(state_path(), "r");
    char line[MAX_LINE + 64];
    st->n = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f) && st->n < MAX_KEYS) {
        char *s = trim(line);
        char *eq = strchr(s, '=');
        if (*s == '#' || *s == '\0' || !eq)
            continue;
        *eq = '\0';
        snprintf(st->key[st->n], sizeof st->key[0], "%s", trim(s));
        snprintf(st->val[st->n], sizeof st->val[0], "%s", trim(eq + 1));
        st->n++;
    }
    fclose(f);
    return 0;
}

static const char *state_str(const state_t *st, const char *key)
{
    for (int i = st->n - 1; i >= 0; i--) /* last one wins */
        if (strcmp(st->key[i], key) == 0)
            return st->val[i][0] ? st->val[i] : NULL;
    return NULL;
}

static int state_ll(const state_t *st, const char *key, long long *out)
{
    const char *v = state_str(st, key);
    char *end;
    if (!v)
        return -1;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || *trim(end) != '\0')
        return -1;
    *out = x;
    return 0;
}

static long long state_ll_or(const state_t *st, const char *key, long long dflt)
{
    long long v;
    return state_ll(st, key, &v) == 0 ? v : dflt;
}

/* Common prologue: initialised, valid handle, state readable. */
static nvmlReturn_t enter(nvmlDevice_t device, state_t *st)
{
    if (g_init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (state_load(st) != 0)
        return NVML_ERROR_GPU_IS_LOST;
    if (device) {
        long long count = state_ll_or(st, "device_count", 1);
        if (device < &g_devices[0] || device >= &g_devices[MAX_DEVICES] ||
            (long long)device->index >= count)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t get_uint(nvmlDevice_t device, const char *key, unsigned int *out)
{
    state_t st;
    long long v;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_ll(&st, key, &v) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)v;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(const char *src, char *dst, unsigned int length)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!src)
        return NVML_ERROR_NOT_SUPPORTED;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static unsigned int effective_sm_clock(const state_t *st, int *ok)
{
    long long natural;
    *ok = state_ll(st, "sm_clock_natural_mhz", &natural) == 0;
    long long lo = state_ll_or(st, "locked_clock_min_mhz", 0);
    long long hi = state_ll_or(st, "locked_clock_max_mhz", 0);
    if (hi > 0 && natural > hi)
        natural = hi;
    if (lo > 0 && natural < lo)
        natural = lo;
    return *ok ? (unsigned int)natural : 0;
}

/* ---- init / system ------------------------------------------------------------------------ */

EXPORT nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    if (access(state_path(), R_OK) != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    g_init_count++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t DECLDIR nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t DECLDIR nvmlShutdown(void)
{
    if (g_init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    g_init_count--;
    return NVML_SUCCESS;
}

EXPORT const DECLDIR char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    state_t st;
    nvmlReturn_t r = enter(NULL, &st);
    if (r != NVML_SUCCESS)
        return r;
    const char *v = state_str(&st, "driver_version");
    return copy_str(v ? v : "580.95.05", version, length);
}

EXPORT nvmlReturn_t DECLDIR nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    state_t st;
    char buf[96];
    nvmlReturn_t r = enter(NULL, &st);
    if (r != NVML_SUCCESS)
        return r;
    const char *v = state_str(&st, "driver_version");
    snprintf(buf, sizeof buf, "%d.%s", NVML_API_VERSION, v ? v : "580.95.05");
    return copy_str(buf, version, length);
}

EXPORT nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    state_t st;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_load(&st) != 0) /* works without nvmlInit, like the real one (uses libcuda) */
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    *cudaDriverVersion = (int)state_ll_or(&st, "cuda_driver_version", 13000);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- device enumeration ------------------------------------------------------------------ */

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    state_t st;
    nvmlReturn_t r = enter(NULL, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long n = state_ll_or(&st, "device_count", 1);
    *deviceCount = (unsigned int)(n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    unsigned int count;
    nvmlReturn_t r = nvmlDeviceGetCount_v2(&count);
    if (r != NVML_SUCCESS)
        return r;
    if (!device || index >= count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_devices[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!device || !index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    const char *v = state_str(&st, "gpu_name");
    return copy_str(v ? v : "NVIDIA GB10", name, length);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    return copy_str(state_str(&st, "uuid"), uuid, length);
}

/* ---- temperature ------------------------------------------------------------------------- */

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                     nvmlTemperatureSensors_t sensorType,
                                                     unsigned int *temp)
{
    if (sensorType != NVML_TEMPERATURE_GPU)
        return g_init_count <= 0 ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(device, "temp_c", temp);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetTemperatureV(nvmlDevice_t device,
                                                      nvmlTemperature_t *temperature)
{
    state_t st;
    long long v;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_ll(&st, "temp_c", &v) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    temperature->temperature = (int)v;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetTemperatureThreshold(
    nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType, unsigned int *temp)
{
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: return get_uint(device, "shutdown_temp_c", temp);
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: return get_uint(device, "slowdown_temp_c", temp);
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: return get_uint(device, "gpu_max_temp_c", temp);
    default: return get_uint(device, "__not_supported__", temp);
    }
}

/* ---- clocks ------------------------------------------------------------------------------ */

static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, int max, unsigned int *clock)
{
    state_t st;
    int ok;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!clock || type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_CLOCK_SM && type != NVML_CLOCK_GRAPHICS)
        return NVML_ERROR_NOT_SUPPORTED; /* GB10: memory clock not exposed; no video clock here */
    if (max) {
        long long v;
        if (state_ll(&st, "sm_clock_max_mhz", &v) != 0)
            return NVML_ERROR_NOT_SUPPORTED;
        *clock = (unsigned int)v;
        return NVML_SUCCESS;
    }
    unsigned int v = effective_sm_clock(&st, &ok);
    if (!ok)
        return NVML_ERROR_NOT_SUPPORTED;
    *clock = v;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                   unsigned int *clock)
{
    return clock_of(device, type, 0, clock);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                      unsigned int *clock)
{
    return clock_of(device, type, 1, clock);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                               nvmlClockId_t clockId, unsigned int *clockMHz)
{
    switch (clockId) {
    case NVML_CLOCK_ID_CURRENT:
        return clock_of(device, clockType, 0, clockMHz);
    case NVML_CLOCK_ID_APP_CLOCK_TARGET: /* a lock supersedes it, never changes it */
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
        return clock_of(device, clockType, 1, clockMHz);
    default:
        return g_init_count <= 0 ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
    }
}

/* The answer the lab told the lock calls to give (state key lock_clocks_answer), or SUCCESS
 * for "behave as the driver would". */
static nvmlReturn_t told_answer(const state_t *st)
{
    const char *v = state_str(st, "lock_clocks_answer");
    if (!v)
        return NVML_SUCCESS;
    if (strcmp(v, "NOT_SUPPORTED") == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (strcmp(v, "NO_PERMISSION") == 0)
        return NVML_ERROR_NO_PERMISSION;
    return NVML_ERROR_UNKNOWN;
}

/* Rewrite the state file with new locked-clock values: flock, temp file, fsync, rename. */
static nvmlReturn_t write_locked(long long lo, long long hi)
{
    const char *path = state_path();
    char lockpath[PATH_MAX], tmppath[PATH_MAX], line[MAX_LINE + 64];
    if (snprintf(lockpath, sizeof lockpath, "%s.lock", path) >= (int)sizeof lockpath ||
        snprintf(tmppath, sizeof tmppath, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmppath)
        return NVML_ERROR_UNKNOWN;
    int lk = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lk < 0)
        return NVML_ERROR_UNKNOWN;
    flock(lk, LOCK_EX);
    nvmlReturn_t ret = NVML_ERROR_UNKNOWN;
    struct stat sb;
    FILE *in = fopen(path, "r");
    FILE *out = NULL;
    if (!in) {
        ret = NVML_ERROR_GPU_IS_LOST;
        goto done;
    }
    mode_t mode = fstat(fileno(in), &sb) == 0 ? (sb.st_mode & 0777) : 0644;
    int fd = open(tmppath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0 || !(out = fdopen(fd, "w")))
        goto done;
    while (fgets(line, sizeof line, in)) {
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        if (strncmp(s, "locked_clock_min_mhz", 20) == 0 || strncmp(s, "locked_clock_max_mhz", 20) == 0)
            continue;
        fputs(line, out);
        if (line[strlen(line) - 1] != '\n')
            fputc('\n', out);
    }
    fprintf(out, "locked_clock_min_mhz=%lld\nlocked_clock_max_mhz=%lld\n", lo, hi);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0)
        goto done;
    if (fclose(out) != 0) {
        out = NULL;
        goto done;
    }
    out = NULL;
    if (rename(tmppath, path) == 0)
        ret = NVML_SUCCESS;
done:
    if (out)
        fclose(out);
    if (in)
        fclose(in);
    if (ret != NVML_SUCCESS)
        unlink(tmppath);
    flock(lk, LOCK_UN);
    close(lk);
    return ret;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device,
                                                         unsigned int minGpuClockMHz,
                                                         unsigned int maxGpuClockMHz)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    nvmlReturn_t told = told_answer(&st);
    if (told != NVML_SUCCESS)
        return told;
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    int sym_lo = minGpuClockMHz > NVML_CLOCK_LIMIT_ID_RANGE_START;
    int sym_hi = maxGpuClockMHz > NVML_CLOCK_LIMIT_ID_RANGE_START;
    if (sym_lo != sym_hi)
        return NVML_ERROR_INVALID_ARGUMENT; /* mixed numeric and symbolic */
    if (sym_lo) {
        if (minGpuClockMHz == NVML_CLOCK_LIMIT_ID_UNLIMITED &&
            maxGpuClockMHz == NVML_CLOCK_LIMIT_ID_UNLIMITED)
            return write_locked(0, 0);
        return NVML_ERROR_NOT_SUPPORTED; /* TDP-relative limits: not modelled */
    }
    if (minGpuClockMHz > maxGpuClockMHz || maxGpuClockMHz == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long top = state_ll_or(&st, "sm_clock_max_mhz", 0);
    long long hi = maxGpuClockMHz, lo = minGpuClockMHz;
    if (top > 0 && hi > top) /* the driver clamps to the supported range */
        hi = top;
    if (lo > hi)
        lo = hi;
    return write_locked(lo, hi);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    nvmlReturn_t told = told_answer(&st);
    if (told != NVML_SUCCESS)
        return told;
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    return write_locked(0, 0);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                   unsigned long long *reasons)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = (unsigned long long)state_ll_or(&st, "clock_event_reasons", 0);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                      unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                                     unsigned long long *reasons)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = (unsigned long long)state_ll_or(&st, "supported_clock_event_reasons", 0x1ff);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                                        unsigned long long *reasons)
{
    return nvmlDeviceGetSupportedClocksEventReasons(device, reasons);
}

/* ---- power, utilization, pstate ---------------------------------------------------------- */

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return get_uint(device, "power_mw", power);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                unsigned long long *energy)
{
    state_t st;
    long long v;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_ll(&st, "energy_mj", &v) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *energy = (unsigned long long)v;
    return NVML_SUCCESS;
}

/* GB10 reports power.limit / enforced.power.limit as [N/A]. */
EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_uint(device, "__not_supported__", limit);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_uint(device, "__not_supported__", limit);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                          nvmlUtilization_t *utilization)
{
    state_t st;
    long long gpu;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_ll(&st, "util_pct", &gpu) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = (unsigned int)gpu;
    utilization->memory = (unsigned int)state_ll_or(&st, "mem_util_pct", 0);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    state_t st;
    long long v;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!pState)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_ll(&st, "pstate", &v) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *pState = (nvmlPstates_t)v;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return nvmlDeviceGetPerformanceState(device, pState);
}

/* ---- memory and fan: NOT_SUPPORTED on GB10 (unless a state file says otherwise) ----------- */

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    state_t st;
    long long total, used;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_ll(&st, "memory_total_bytes", &total) != 0 ||
        state_ll(&st, "memory_used_bytes", &used) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    memory->total = (unsigned long long)total;
    memory->used = (unsigned long long)used;
    memory->free = (unsigned long long)(total - used);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    state_t st;
    long long total, used;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (state_ll(&st, "memory_total_bytes", &total) != 0 ||
        state_ll(&st, "memory_used_bytes", &used) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    memory->total = (unsigned long long)total;
    memory->used = (unsigned long long)used;
    memory->reserved = 0;
    memory->free = (unsigned long long)(total - used);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return get_uint(device, "fan_pct", speed);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan,
                                                     unsigned int *speed)
{
    (void)fan;
    return get_uint(device, "fan_pct", speed);
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    return get_uint(device, "__not_supported__", numFans);
}

/* ---- field values: cumulative clock-event counters --------------------------------------- */

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                     nvmlFieldValue_t *values)
{
    state_t st;
    nvmlReturn_t r = enter(device, &st);
    if (r != NVML_SUCCESS)
        return r;
    if (!values || valuesCount < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++) {
        const char *key = NULL;
        long long v;
        switch (values[i].fieldId) {
        case NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: key = "sw_power_cap_ns"; break;
        case NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: key = "sw_thermal_slowdown_ns"; break;
        case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: key = "hw_thermal_slowdown_ns"; break;
        case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN:
            key = "hw_power_brake_slowdown_ns";
            break;
        case NVML_FI_DEV_POWER_AVERAGE:
        case NVML_FI_DEV_POWER_INSTANT: key = "power_mw"; break;
        default: break;
        }
        values[i].timestamp = 0;
        values[i].latencyUsec = 0;
        if (key && state_ll(&st, key, &v) == 0) {
            values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            values[i].value.ullVal = (unsigned long long)v;
            values[i].nvmlReturn = NVML_SUCCESS;
        } else {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
