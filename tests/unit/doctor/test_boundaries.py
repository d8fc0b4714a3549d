"""Adjacent classes told apart by the evidence that separates them (``boundary`` in doctor/categories.yaml).

Each input is the wording of the source that raises it (vLLM, PyTorch, pip, forklift's patcher), not a corpus
thread, so no rule was written from these items."""

from __future__ import annotations

import pytest

from forklift.doctor import Source, diagnose_sources, load_categories, scan_text

PAIRS = {
    "install vs version": [
        ("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. "
         "This behaviour is the source of the following dependency conflicts.\n"
         "vllm 0.11.0 requires torch==2.8.0, but you have torch 2.9.0 which is incompatible.", "engine_install"),
        ("ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined symbol: "
         "_ZN3c104cuda9SetDeviceEab", "engine_install"),
        ("ImportError: cannot import name 'AutoModelForVision2Seq' from 'transformers' "
         "(/usr/local/lib/python3.12/dist-packages/transformers/__init__.py)", "version_mismatch"),
        # numpy 1.24 removed the np.float alias: any installed package, not only transformers / torch
        ("AttributeError: module 'numpy' has no attribute 'float'.\n`np.float` was a deprecated alias for the "
         "builtin `float`.", "version_mismatch"),
    ],
    "nccl hang vs shm stall vs free memory": [
        ("[rank1]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 "
         "milliseconds before timing out.", "nccl_hang_or_timeout"),
        ("(EngineCore_DP0 pid=311) INFO 12-01 10:00:00 [shm_broadcast.py:466] No available shared memory broadcast "
         "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
         "time-consuming work (e.g. compilation, weight/kv cache quantization).", "shm_broadcast_rpc_timeout"),
        ("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than desired GPU memory "
         "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
         "processes.", "startup_free_memory_check"),
    ],
    "runtime oom vs kv shortage": [
        ("INFO 12-01 10:00:00 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 9.1 seconds\n"
         "ERROR 12-01 10:00:09 [core.py:708]   File \"/vllm/v1/worker/gpu_model_runner.py\", line 3109, in profile_run"
         "\n"
         "ERROR 12-01 10:00:09 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. "
         "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.", "oom_gpu_runtime"),
        ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
         "needed, which is larger than the available KV cache memory (4.20 GiB). Based on the available memory, the "
         "estimated maximum model length is 33600. Try increasing `gpu_memory_utilization` or decreasing "
         "`max_model_len` when initializing the engine.", "kv_cache_insufficient"),
    ],
    # vLLM's EngineArgs / AsyncEngineArgs are dataclasses (vllm/engine/arg_utils.py): an option the release lacks is
    # a TypeError of __init__. Who wrote the option decides: the user's own call, or a package calling vLLM.
    "engine args vs version": [
        ("engine_args = AsyncEngineArgs(model=\"Qwen/Qwen2.5-7B-Instruct\", num_scheduler_steps=8)\n"
         "Traceback (most recent call last):\n"
         "  File \"/app/serve.py\", line 12, in <module>\n"
         "    engine_args = AsyncEngineArgs(model=\"Qwen/Qwen2.5-7B-Instruct\", num_scheduler_steps=8)\n"
         "TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'num_scheduler_steps'",
         "engine_args_invalid"),
        ("  File \"/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/llm.py\", line 240, in __init__\n"
         "    engine_args = EngineArgs(\n"
         "TypeError: EngineArgs.__init__() got an unexpected keyword argument 'worker_extension_cls'",
         "version_mismatch"),
    ],
    # Linux counts reclaimable page cache in MemAvailable, not MemFree (proc(5)): a budget read from free memory
    # with the cache beside it is short by the cache. vLLM's own startup refusal stays its own class.
    "page cache vs free-memory check": [
        ("MemTotal: 121 GiB  free=12.4GiB cache=96.0GiB available=104.1GiB\n"
         "error: model does not fit: needs 70.2 GiB, only 12.4 GiB free", "page_cache_pressure"),
        ("ValueError: Free memory on device cuda:0 (12.4/119.7 GiB) on startup is less than desired GPU memory "
         "utilization (0.6, 71.8 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
         "processes.", "startup_free_memory_check"),
    ],
    # Round 8: each pair is written in the wording of the software that raises it (not a corpus thread): a runtime's
    # own OOM code, a loader's architecture refusal, transformers' missing-class error, PyTorch's SIGBUS message.
    "runtime oom vs driver fault": [
        # the CUDA driver API's code for a failed allocation (cuda.h CUresult 2), as a Rust runtime (candle) prints it
        ("ERROR candle_core::engine: step - Model failed with error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, "
         "\"out of memory\")", "oom_gpu_runtime"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
         "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
         "cuda_driver_or_device"),
    ],
    "unsupported architecture vs host oom": [
        # llama.cpp's loader (llama-model-loader / llama-arch) on an architecture string the build does not know,
        # inside ollama's runner lines (whose "unable to load model" says nothing about why)
        ('time=2025-10-01T10:00:00.000Z level=INFO source=server.go:400 msg="llama runner terminated" '
         'error="exit status 2"\nllama_model_load: error loading model: error loading model architecture: unknown '
         "model architecture: 'qwen9moe'\ntime=2025-10-01T10:00:00.000Z level=ERROR source=sched.go:431 "
         'msg="error loading llama server" error="llama runner process has terminated: error loading model: unable '
         'to load model"', "unsupported_quantization_or_arch"),
        ("[ 812.113] Out of memory: Killed process 4121 (llama-server) total-vm:98123456kB, anon-rss:63012345kB",
         "oom_host_unified_memory"),
    ],
    "library class missing vs tokenizer": [
        # transformers models/auto/tokenization_auto.py: the config names a class this release does not define
        ("ValueError: Tokenizer class Qwen3NextTokenizer does not exist or is not currently imported.",
         "version_mismatch"),
        ("ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no template "
         "argument was passed!", "tokenizer_or_chat_template"),
    ],
    "argument after a version change vs user's argument": [
        ("we upgraded the trainer to the latest version and now the rollout server exits:\n"
         "launch_server.py: error: unrecognized arguments: --enable-weight-sync", "version_mismatch"),
        ("vllm: error: unrecognized arguments: --max-num-seq 64", "engine_args_invalid"),
    ],
    "container shm bus error vs host oom": [
        # torch/utils/data/_utils/signal_handling.py's message, wrapped as a terminal or an issue body wraps it
        ("RuntimeError: DataLoader worker (pid 812) is killed by signal: Bus\nerror. It is possible that "
         "dataloader's workers are out of shared\nmemory. Please try to raise your shared memory limit.",
         "container_runtime"),
        ("RuntimeError: DataLoader worker (pid 812) is killed by signal: Killed.", "oom_host_unified_memory"),
    ],
    "path missing on other nodes vs install": [
        ("rank 0 runs fine, every other node fails:\nFileNotFoundError: [Errno 2] No such file or directory: "
         "'/mnt/local/ckpt/run-7/trainer_state.json'", "model_path_missing_on_worker"),
        ("ModuleNotFoundError: No module named 'vllm'", "engine_install"),
    ],
    "compile failure vs patch drift": [
        ("torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpa1/main.c', "
         "'-O3', '-shared', '-fPIC', '-o', '/tmp/tmpa1/cuda_utils.so']' returned non-zero exit status 1.",
         "compile_failure"),
        ("[forklift-patch] ERROR (drift): patch safetensors-fadvise-dontneed on /opt/venv/vllm (vLLM 0.12.0): "
         "model_executor/model_loader/weight_utils.py: edit 1: function safetensors_weights_iterator not found",
         "patch_drift"),
        # vLLM's own plugin loader names the plugin, so the failing import is the plugin's
        ("INFO 12-01 10:00:00 [__init__.py:217] Platform plugin example is activated\n"
         "ImportError: cannot import name 'AttentionBackendEnum' from 'vllm.attention.backends.registry'",
         "patch_drift"),
    ],
}

# What does not decide a class on its own (the boundary's other side needs its own evidence).
NOT = [
    ("an ImportError from vLLM with no patch or plugin in the log is not patch drift",
     "ImportError: cannot import name 'FusedMoEExample' from 'vllm.model_executor.layers.example'", "patch_drift"),
]
# A rule's ``rules_out`` keeps the statistical layer from outvoting the evidence that separates a pair: many
# shared-memory stall lines (a symptom every hung worker produces) and one watchdog line naming the collective.
_SHM = ("(EngineCore_DP0 pid=311) INFO 12-01 10:0{i}:00 [shm_broadcast.py:466] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
        "time-consuming work (e.g. compilation, weight/kv cache quantization).")
DROWNED = [
    # a name missing from a package that imports (nvidia-cutlass-dsl here) amid a build's noise: the packages
    # install, they do not fit (version_mismatch), whatever the install-looking lines around it say
    ("\n".join(f"  Building wheel for vllm (pyproject.toml): step {i} failed to find nvcc, retrying with pip install"
               for i in range(6))
     + "\nImportError: cannot import name 'fmin' from 'cutlass.cute.arch' "
     "(/usr/local/lib/python3.12/dist-packages/cutlass/cute/arch/__init__.py)", "version_mismatch"),
    ("\n".join(_SHM.format(i=i) for i in range(6)) + "\n[rank1]:[E1201 10:07:00.000000000 ProcessGroupNCCL.cpp:632] "
     "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, "
     "NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.", "nccl_hang_or_timeout"),
    ("\n".join(_SHM.format(i=i) for i in range(6)) + "\nValueError: Free memory on device cuda:0 (10.5/79.19 GiB) "
     "on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization "
     "or reduce GPU memory used by other processes.", "startup_free_memory_check"),
]
CASES = [(pair, text, cat) for pair, items in PAIRS.items() for text, cat in items]


def test_each_class_of_a_pair_writes_its_boundary() -> None:
    cats = load_categories()
    named = {c for items in PAIRS.values() for _, c in items}
    assert {c for c in named if not cats[c].boundary} == set()


@pytest.mark.parametrize(("pair", "text", "category"), CASES, ids=[f"{p}: {c}" for p, _, c in CASES])
def test_the_evidence_that_separates_a_pair_decides_it(pair: str, text: str, category: str) -> None:
    report = diagnose_sources([Source("t", scan_text([text]))])
    top = next((f for f in report.findings if f.severity != "info" and not f.superseded_by), None)
    assert top is not None and top.category == category, (pair, top and (top.category, top.rule))


def _top(text: str) -> tuple[str, str] | None:
    report = diagnose_sources([Source("t", scan_text([text]))])
    top = next((f for f in report.findings if f.severity != "info" and not f.superseded_by), None)
    return (top.category, top.rule) if top else None


@pytest.mark.parametrize(("why", "text", "category"), NOT, ids=[w for w, _, _ in NOT])
def test_evidence_of_the_other_side_is_needed(why: str, text: str, category: str) -> None:
    top = _top(text)
    assert top is None or top[0] != category, (why, top)


@pytest.mark.parametrize(("text", "category"), DROWNED, ids=[c for _, c in DROWNED])
def test_the_separating_line_is_not_outvoted_by_symptom_lines(text: str, category: str) -> None:
    report = diagnose_sources([Source("t", scan_text([text]))])
    top = report.findings[0]
    # a clear answer, not a near tie with the symptom's class (without rules_out: 0.55 and 0.83)
    assert top.category == category and top.confidence >= 0.85, [(f.category, f.confidence) for f in report.findings]


def test_budget_wording_rules_out_the_parser_rule() -> None:
    """Empty content beside reasoning_content is the parser's sign only while nothing says the tokens ran out:
    "all tokens consumed" puts it on the budget's side, whatever the statistical layer leans to."""
    report = diagnose_sources([Source("t", scan_text([
        "The model returns empty content, all tokens consumed by reasoning_content."]))])
    active = [f for f in report.findings if f.severity != "info" and not f.superseded_by]
    assert "reasoning-answer-in-reasoning-field" not in {f.rule for f in active}
    assert active[0].category == "reasoning_budget" and active[0].layer == "rule"
    parser = diagnose_sources([Source("t", scan_text([
        "When enable_thinking is False, the returned content is empty, but reasoning_content has the whole answer."]))])
    top = next(f for f in parser.findings if f.severity != "info" and not f.superseded_by)
    assert top.category == "tool_parser_or_reasoning_parser"
