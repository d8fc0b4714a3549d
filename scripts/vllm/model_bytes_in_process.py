"""Bytes of a model's parameters and buffers as vLLM builds them, before any weight is loaded or repacked (the
checkpoint-format tensors plus registered buffers such as rope caches), on vLLM-CPU in this process.

    PYTHONPATH=src .venv/bin/python scripts/vllm/model_bytes_in_process.py MODEL_DIR [cpu|meta]
    # TP 2 (one process per rank, started together):
    VLLM_DIST_IDENT=x WS=2 RK=1 ... MODEL_DIR meta & VLLM_DIST_IDENT=x WS=2 RK=0 ... MODEL_DIR meta

vLLM-CPU logs no "Model loading took" and repacks 2-D linears after load (weight (0,)), so this is how the
planner's weights were held to vLLM's modules for DeepSeek-V4 (docs/lab-notebook.md, 2026-12-03). Builds the model
with vLLM's ``initialize_model`` under the model dtype and the CPU runner's ``_torch_cuda_wrapper``; prints the bytes
per (parameter name with layer indices folded, dtype) and the totals. ``meta`` builds shapes only (a full-size
geometry without its memory); WS / RK set the TP size and this process's rank. Uses a gloo group on
127.0.0.1:PORT (default 18651).

Quantized checkpoints (fp8 block linears: DeepSeek-V4's deepseek_v4_fp8, MiMo-V2's fp8 + store_dtype mxfp4): this
CPU has no fp8 block kernel (vLLM raises "Failed to find a kernel that can implement the ScaledMM linear layer":
the CPU kernels need AMX). fp8.py Fp8LinearMethod.create_weights registers weight / weight_scale_inv (and
input_scale) *before* it calls init_fp8_linear_kernel, so this script replaces ONLY that kernel choice
(``fp8.init_fp8_linear_kernel``) with a stub; the parameters counted are the ones vLLM creates. The MXFP4 routed
experts (Mxfp4MoEMethod) likewise fail at their backend choice on this CPU ("No MXFP4 MoE backend supports the
deployment configuration": the CPU backend needs AMX too), so ``select_deepseek_v4_mxfp4_moe_backend`` is replaced
by one returning the backend named by MXFP4_BACKEND (a fused_moe/oracle/mxfp4.py Mxfp4MoeBackend name, default
MARLIN: hidden to a multiple of 256, intermediate per partition to 128); vLLM's own
Mxfp4MoEMethod.maybe_roundup_sizes and create_weights then size the experts for that backend. Only the two choices
are stubbed; every parameter is created by vLLM's code.
"""

from __future__ import annotations

import collections
import os
import re
import sys

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend
from vllm.model_executor.layers.quantization import fp8, mxfp4
from vllm.model_executor.model_loader.utils import initialize_model
from vllm.utils.torch_utils import set_default_torch_dtype
from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper


class _NoKernel:
    """What fp8.py's create_weights keeps as ``self.fp8_linear`` (never called: nothing runs a forward here)."""


def _mxfp4_backend(config: object) -> tuple[Mxfp4MoeBackend, None]:
    return Mxfp4MoeBackend[os.environ.get("MXFP4_BACKEND", "MARLIN")], None


def _no_fp8_kernel(**kwargs: object) -> _NoKernel:
    return _NoKernel()


class _NoEvent:
    """DeepSeek-V4's attention makes torch.cuda.Event()s at init; the CPU runner never uses them."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


def main(model_dir: str, device: str) -> None:
    world, rank = int(os.environ.get("WS", "1")), int(os.environ.get("RK", "0"))
    port = os.environ.get("PORT", "18651")
    args = EngineArgs(model=model_dir, load_format="dummy", enforce_eager=True, max_model_len=2048,
                      tensor_parallel_size=world, distributed_executor_backend="mp")
    cfg = args.create_engine_config()
    with set_current_vllm_config(cfg):
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
        initialize_model_parallel(world, 1)
        torch.cuda.Event = _NoEvent  # type: ignore[misc,assignment]
        fp8.init_fp8_linear_kernel = _no_fp8_kernel  # type: ignore[assignment]  # see the docstring
        mxfp4.select_deepseek_v4_mxfp4_moe_backend = _mxfp4_backend  # type: ignore[assignment]
        with _torch_cuda_wrapper(), torch.device(device), set_default_torch_dtype(cfg.model_config.dtype):
            model = initialize_model(vllm_config=cfg)
    by_name: collections.Counter[tuple[str, str]] = collections.Counter()
    by_dtype: collections.Counter[str] = collections.Counter()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        nbytes = t.numel() * t.element_size()
        by_name[(re.sub(r"layers\.\d+\.", "layers.N.", name), str(t.dtype))] += nbytes
        by_dtype[str(t.dtype)] += nbytes
    for (name, dtype), nbytes in sorted(by_name.items()):
        print(f"{nbytes:>14,}  {dtype:<15} {name}")
    print(f"{sum(by_dtype.values()):>14,}  total {dict(by_dtype)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")
