"""Hardware profiles (GB10, H100, H200, B200, CPU) as data, network profiles, and local detection."""

from forklift.hardware.detect import LocalHardware, detect
from forklift.hardware.profiles import HardwareProfile, NetworkProfile, get, network, networks, profiles

__all__ = ["HardwareProfile", "LocalHardware", "NetworkProfile", "detect", "get", "network", "networks", "profiles"]
