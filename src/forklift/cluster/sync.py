"""``forklift model sync``: copy the model to nodes that lack it, rsync over the same SSH transport.

With pipeline parallelism each node gets only the shards that hold its layers plus the shared files
(config, tokenizer, index, shards with embeddings / lm_head), read from model.safetensors.index.json.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from forklift.cluster.modelfiles import local_listing, needed_files
from forklift.errors import RemoteCommandError
from forklift.recipe.schema import Recipe
from forklift.runner import LocalRunner, Runner
from forklift.runner.fanout import fan_out
from forklift.runner.ssh import SshRunner

_SENT_RE = re.compile(r"Total transferred file size: ([\d,.]+) bytes")
MAX_PARALLEL_COPIES = 4


@dataclass
class NodeSync:
    host: str
    dest: str
    files: list[str]
    bytes: int
    """Bytes of the files this node needs."""
    transferred: int | None = None
    """Bytes rsync actually sent (None for a dry run or when nothing had to move)."""
    note: str = ""


def plan_sync(recipe: Recipe, model_dir: Path) -> list[NodeSync]:
    """Which files (and how many bytes) every node needs."""
    listing = local_listing(model_dir)
    need = needed_files(model_dir, recipe, listing)
    out = []
    for i, node in enumerate(recipe.nodes):
        dest = node.model_path or str(model_dir)
        files = need[i]
        out.append(NodeSync(node.host, dest, files, sum(listing.sizes[f] for f in files)))
    return out


def rsync_argv(runner: Runner, src: Path, dest: str) -> list[str]:
    """rsync of a file list (read from stdin) to dest on the runner's host, over its own ssh options."""
    base = ["rsync", "-a", "--partial", "--stats", "--files-from=-"]
    if isinstance(runner, SshRunner):
        ssh = runner.base_argv()[:-1]  # the same options, multiplexed connection included; no target
        return [*base, "-e", shlex.join(ssh), f"{src}/", f"{runner.target}:{dest}/"]
    return [*base, f"{src}/", f"{dest}/"]


def sync(recipe: Recipe, model_dir: Path, runners: Mapping[int, Runner], *, dry_run: bool = False,
         local: Runner | None = None) -> list[NodeSync]:
    """Copy what each node needs (in parallel, a few at a time); return bytes per node."""
    plan = plan_sync(recipe, model_dir)
    local = local or LocalRunner()
    if dry_run:
        return plan

    def one(i: int) -> NodeSync:
        item, runner = plan[i], runners[i]
        if recipe.nodes[i].is_local and Path(item.dest).resolve() == model_dir.resolve():
            item.note = "source itself"
            return item
        runner.run(["mkdir", "-p", item.dest]).check()
        argv = rsync_argv(runner, model_dir, item.dest)
        res = local.run(argv, input="\n".join(item.files) + "\n", timeout=24 * 3600)
        if res.returncode != 0:
            raise RemoteCommandError(f"{item.host}: rsync to {item.dest} failed ({res.returncode}): "
                                     f"{res.stderr.strip()[-300:]}", host=item.host, argv=argv,
                                     returncode=res.returncode, stderr_tail=res.stderr[-500:],
                                     fix=f"Check that rsync is installed on {item.host} and {item.dest} is writable.")
        m = _SENT_RE.search(res.stdout)
        item.transferred = int(m.group(1).replace(",", "").replace(".", "")) if m else None
        return item

    done = fan_out(((i, i) for i in range(len(plan))), one, max_workers=MAX_PARALLEL_COPIES)
    done.raise_first()
    return [done.results[i] for i in range(len(plan))]
