"""The lab's NVML stand-in (a C libnvidia-ml.so.1) and its build."""
