"""Compatibility of a speculative config with a layout and a vLLM release, before anything starts.

Three kinds of rule, all data: the method and every key must exist in the target release (versions.yaml, from
vLLM's source), and the layout rules of rules.yaml (method x PP / TP / DCP x backend x platform, each with the
vLLM function or the issue behind it). ``findings`` lists what applies; ``refuse`` raises the errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from forklift.errors import SpeculativeConfigError
from forklift.recipe.schema import Recipe
from forklift.speculative import versions
from forklift.speculative.render import config_dict
from forklift.speculative.shape import ModelShape
from forklift.yamlio import shipped


@dataclass(frozen=True)
class Finding:
    """One rule that applies: an error refuses the launch, a warning becomes a plan note."""

    id: str
    level: str
    message: str
    fix: str | None = None
    sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "level": self.level, "message": self.message, "fix": self.fix,
                "sources": list(self.sources)}


@dataclass(frozen=True)
class Facts:
    """Everything a rule can test, gathered once."""

    method: str
    config: Mapping[str, Any]
    release: versions.Release
    platform: str
    tp: int
    pp: int
    dcp: int
    serve: Mapping[str, Any]
    env: Mapping[str, str]
    model: ModelShape | None = None
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.config["num_speculative_tokens"])


@cache
def rule_table() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = shipped("forklift.speculative", "rules.yaml")
    return loaded


def facts(recipe: Recipe, *, platform: str, release: versions.Release, model: ModelShape | None = None) -> Facts:
    spec = recipe.serve.speculative
    assert spec is not None
    cfg = config_dict(spec)
    par = recipe.parallel
    env = {**recipe.env, **{k: v for n in recipe.nodes for k, v in n.env.items()}}
    draft_tp = cfg.get("draft_tensor_parallel_size")
    values: dict[str, Any] = {"method": spec.method, "pp": par.pp, "tp": par.tp, "dcp": par.dcp,
                              "k": cfg["num_speculative_tokens"], "vllm": release.label, "draft_tp": draft_tp}
    if model is not None:
        values |= {"architecture": model.architecture, "mtp_layers": model.mtp_layers}
    return Facts(method=spec.method, config=cfg, release=release, platform=platform, tp=par.tp, pp=par.pp,
                 dcp=par.dcp, serve=recipe.serve.model_dump(), env=env, model=model, values=values)


def _model_holds(cond: Mapping[str, Any], f: Facts) -> bool | None:
    """None: the condition needs the model and there is none (the rule is skipped)."""
    if f.model is None:
        return None
    m = f.model
    if "families" in cond and m.family not in cond["families"]:
        return False
    if "architectures_not" in cond and m.architecture in cond["architectures_not"]:
        return False
    return not ("mtp_layers" in cond and m.mtp_layers != cond["mtp_layers"])


def _computed(name: str, f: Facts) -> bool | None:
    draft_tp = f.config.get("draft_tensor_parallel_size")
    if name == "draft_tp_differs":
        return draft_tp is not None and draft_tp != f.tp
    if name == "draft_tp_not_one_or_target":
        return draft_tp is not None and draft_tp not in (1, f.tp)
    if name == "k_not_multiple_of_mtp_layers":
        if f.model is None or f.model.mtp_layers < 1 or "model" in f.config:
            return None
        n = f.model.mtp_layers
        return f.k > n and f.k % n != 0
    raise KeyError(name)


def _holds(when: Mapping[str, Any], f: Facts) -> bool | None:
    for cond, want in when.items():
        if cond == "methods":
            ok: bool | None = f.method in want
        elif cond == "vllm":
            ok = ("min" not in want or f.release.at_least(want["min"])) and \
                 ("below" not in want or not f.release.at_least(want["below"]))
        elif cond == "platform":
            ok = f.platform == want
        elif cond in ("pp_gt", "tp_gt", "dcp_gt"):
            ok = getattr(f, cond[:-3]) > want
        elif cond == "k_gt":
            ok = f.k > want
        elif cond == "keys":
            ok = all(f.config.get(k) == v for k, v in want.items())
        elif cond == "serve":
            ok = all((f.serve.get(k) is not None and f.serve.get(k) is not False) if v is True else f.serve.get(k) == v
                     for k, v in want.items())
        elif cond == "env":
            ok = all(f.env.get(k) == v for k, v in want.items())
        elif cond == "model":
            ok = _model_holds(want, f)
        else:
            ok = _computed(cond, f) if want is True else None
        if ok is not True:
            return ok
    return True


def _fmt(text: str | None, f: Facts) -> str | None:
    if text is None:
        return None
    return " ".join(text.split()).format_map(_Blank(f.values))


class _Blank(dict[str, Any]):
    def __missing__(self, name: str) -> str:
        return "?"


def _release_findings(f: Facts) -> list[Finding]:
    """The method and every key must exist in the target release (vLLM <= 0.14 drops unknown keys silently,
    >= 0.16 fails with 'Unexpected keyword argument')."""
    rel = f.release
    out: list[Finding] = []
    src = (f"config/speculative.py:SpeculativeMethod and SpeculativeConfig fields@{rel.label} "
           "(data/versions.yaml)",)
    if not versions.has("methods", f.method, rel):
        out.append(Finding("method-not-in-release", "error",
                           f"vLLM {rel.label} has no speculative method '{f.method}' "
                           f"({versions.why_missing('methods', f.method, rel)})",
                           fix="Pick a method this release has, or target another vLLM release.", sources=src))
    for k in f.config:
        if k in ("method", "num_speculative_tokens", "model") or versions.has("keys", k, rel):
            continue
        silently = "vLLM drops it silently" if not rel.at_least("0.16") else \
            "vLLM fails with 'Unexpected keyword argument'"
        out.append(Finding("key-not-in-release", "error",
                           f"--speculative-config key '{k}' does not exist in vLLM {rel.label} "
                           f"({versions.why_missing('keys', k, rel)}; {silently})",
                           fix=f"Remove serve.speculative.{k} for this release.",
                           sources=(*src, "config/utils.py:config@0.16 (extra='forbid'; absent in 0.14)")))
    if not rel.known:
        out.append(Finding("unknown-release", "warn",
                           f"vLLM '{rel.text}' is not a release the speculative tables know; checked as {rel.label}"))
    return out


def findings(f: Facts) -> list[Finding]:
    """Every rule that applies, errors first."""
    out = _release_findings(f)
    for rule in rule_table():
        if _holds(rule["when"], f) is True:
            out.append(Finding(rule["id"], rule["level"], _fmt(rule["message"], f) or "", _fmt(rule.get("fix"), f),
                               tuple(rule.get("sources", ()))))
    return sorted(out, key=lambda x: x.level != "error")


def refuse(found: list[Finding]) -> None:
    """Raise SpeculativeConfigError naming every error (with its fix and sources); warnings pass."""
    errors = [x for x in found if x.level == "error"]
    if not errors:
        return
    message = "; ".join(f"{e.message} [{e.id}]" for e in errors)
    fix = " ".join(e.fix for e in errors if e.fix) or None
    raise SpeculativeConfigError(f"serve.speculative: {message}", fix=fix, findings=errors)
