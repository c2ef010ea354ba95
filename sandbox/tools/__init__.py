"""The tools the judge drives: profilers (ncu, compute-sanitizer) and their parsed logs,
NVML, the device-peak measurement.
"""
