"""The parts of :mod:`flow.serialization`: its errors, the safetensors container with flow's header
checksum, the structure encoding (nested Python values as JSON) and the atomic file write."""
