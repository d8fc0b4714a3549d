"""The bottom layer: every command forklift executes goes through a ``Runner`` (argv in, ``Completed`` out)."""

from forklift.runner.base import Completed, Runner, Spawned
from forklift.runner.fake import FakeRunner
from forklift.runner.fanout import FanOut, fan_out
from forklift.runner.local import LocalRunner

__all__ = ["Completed", "FakeRunner", "FanOut", "LocalRunner", "Runner", "Spawned", "fan_out"]
