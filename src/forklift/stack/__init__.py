"""Stacks: several models on shared nodes, planned together, started largest first, stopped in reverse."""

from forklift.errors import StackDoesNotFitError
from forklift.stack.joint import Device, JointPlan, Use, joint_plan
from forklift.stack.load import load, parse
from forklift.stack.ops import StackUpResult, load_runs, stack_down, stack_status, stack_up
from forklift.stack.schema import Member, StackFile

__all__ = ["Device", "JointPlan", "Member", "StackDoesNotFitError", "StackFile", "StackUpResult", "Use",
           "joint_plan", "load", "load_runs", "parse", "stack_down", "stack_status", "stack_up"]
