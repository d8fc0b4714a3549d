"""A local Hub (tests/hubserver.py) in a thread of this process, serving a tiny PP=3 checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hubserver import HubServer
from tests.modelgen import make_model

TOKEN = "hf_unit_test_token_3f9a"


@pytest.fixture
def hub_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    model = make_model(tmp_path / "served", layer_bytes=256 << 10)
    (model / "pytorch_model.bin").write_bytes(b"\0" * 100)  # another weight format: pull must skip it
    (model / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    srv = HubServer({"org/tiny": model}, token=TOKEN).start()
    monkeypatch.setenv("HF_ENDPOINT", srv.url)  # forklift passes it explicitly to every huggingface_hub call
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("FORKLIFT_CACHE", str(tmp_path / "fl-cache"))
    try:
        yield srv
    finally:
        srv.stop()
