"""Repetitive prompts where lookup drafting clearly pays, made here (no dataset download).

A seeded Python module of distinct small functions (so almost every 5-gram is unique and prompt lookup finds
the right place), then a continuation that re-emits it: ``copy`` (the file again, unchanged: the upper bound),
``edit`` (the file again with one function renamed: realistic), ``prose`` (a summary: not a copy task, so any
gain comes from what the model repeats on its own; a small model with ``ignore_eos`` repeats a lot).
Plain completion text, so the same prompts work on base and chat models through ``/v1/completions``
(vllm#18971: how the prompt asks for the copy decides the gain).

``copy`` shows the file, then one exact copy, then asks for another: SmolLM2-135M (greedy, transformers) re-emits
the whole 200-token window exactly after two copies, but renames functions (``*_copy``) or drops the indentation
when it has seen the file only once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Kind = Literal["copy", "edit", "prose"]
KINDS: tuple[Kind, ...] = ("copy", "edit", "prose")

_VERBS = ("load", "count", "merge", "split", "rank", "score", "parse", "check", "route", "pack", "weigh", "sort",
          "store", "fetch", "label", "stack", "clear", "scan", "trace", "align")
_NOUNS = ("pallet", "crate", "aisle", "dock", "shift", "order", "truck", "shelf", "label", "route", "invoice",
          "carrier", "barcode", "manifest", "bay", "forklift", "container", "quota", "ledger", "batch")
_OPS = ("+", "-", "*", "//", "%")


def _statement(rng: random.Random, var: str, limit: str, step: int) -> list[str]:
    """One of several statement shapes, with fresh names and literals, so few 5-grams repeat."""
    noun = rng.choice(_NOUNS)
    n, m = rng.randint(2, 97), rng.randint(2, 61)
    shape = rng.randrange(5)
    if shape == 0:
        return [f"    if {var} > {limit} * {n}:", f"        {var} = {var} {rng.choice(_OPS)} {m}  # {noun} rule {step}"]
    if shape == 1:
        return [f"    for {noun}_{step} in range({n}):", f"        {var} += {noun}_{step} % {m}"]
    if shape == 2:
        return [f"    {noun}_cap_{step} = min({var}, {limit} + {n})", f"    {var} = {noun}_cap_{step} - {m}"]
    if shape == 3:
        return [f"    {noun}_codes = [{n}, {m}, {rng.randint(100, 999)}]", f"    {var} -= len({noun}_codes)"]
    return [f"    while {var} % {n} == {m % n}:", f"        {var} //= {rng.randint(2, 9)}  # {noun} pass {step}"]


def _function(rng: random.Random, index: int, used: set[str]) -> tuple[str, str]:
    while True:
        name = f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}_{index}"
        if name not in used:
            used.add(name)
            break
    a, b = rng.sample(_NOUNS, 2)
    verb = name.split("_")[0].capitalize()
    var, limit = f"{a}_total_{index}", f"{b}_limit"
    lines = [f"def {name}({a}_count, {limit}={rng.randint(2, 97)}):",
             f'    """{verb} the {a}s against the {b} limit (rule {rng.randint(100, 999)})."""',
             f"    {var} = {a}_count {rng.choice(_OPS)} {rng.randint(3, 61)}"]
    for step in range(rng.randint(2, 5)):
        lines += _statement(rng, var, limit, step)
    lines.append(f"    return {{'name': '{name}', 'value': {var}, 'code': {rng.randint(1000, 9999)}}}")
    return name, "\n".join(lines)


def module_text(functions: int = 12, seed: int = 0) -> tuple[str, list[str]]:
    """A deterministic Python module of ``functions`` distinct functions, and their names."""
    rng = random.Random(seed)
    used: set[str] = set()
    names, bodies = [], []
    for i in range(functions):
        name, body = _function(rng, i, used)
        names.append(name)
        bodies.append(body)
    header = f'"""Warehouse rules, module {seed}: {functions} functions."""\n'
    return header + "\n\n\n".join(bodies) + "\n", names


@dataclass(frozen=True)
class RepetitivePrompt:
    kind: Kind
    text: str
    expected: str
    """What a perfect answer re-emits (the module, or its edited copy); empty for ``prose``."""


def prompt(kind: Kind = "copy", *, functions: int = 4, seed: int = 0) -> RepetitivePrompt:
    """One prompt of ``kind`` over the module of ``seed`` (4 functions: about 900 tokens of code; ``copy`` holds it
    twice, about 1,900 prompt tokens with SmolLM2's tokenizer)."""
    module, names = module_text(functions, seed)
    if kind == "copy":
        return RepetitivePrompt(kind, f"# file: rules_{seed}.py\n{module}\n# The same file, copied exactly:\n{module}\n"
                                      "# The same file, copied exactly again:\n", module)
    if kind == "edit":
        old = names[len(names) // 2]
        new = "compute_total"
        edited = module.replace(old, new)
        return RepetitivePrompt(kind, f"# file: rules_{seed}.py\n{module}\n\n# file: rules_{seed}_v2.py (the same "
                                      f"code with {old} renamed to {new})\n", edited)
    if kind == "prose":
        return RepetitivePrompt(kind, f"# file: rules_{seed}.py\n{module}\n\nA short description of what the "
                                      "functions in this file do, in plain English:\n", "")
    raise ValueError(f"unknown repetitive workload kind {kind!r}; expected one of {', '.join(KINDS)}")


def prompts(kind: Kind, count: int, *, functions: int = 4, seed: int = 0) -> list[RepetitivePrompt]:
    """``count`` prompts, each over a different module (seeds ``seed`` .. ``seed + count - 1``)."""
    return [prompt(kind, functions=functions, seed=seed + i) for i in range(count)]
