#!/usr/bin/env python3
"""Download, for the device's Python 3.12 (manylinux x86_64), every wheel that vLLM and forklift need
and the device image lacks. A small fixpoint resolver over the wheels' Requires-Dist:

- names the image already has (KINDS.md's list, in image_packages.txt) are taken as they are;
- names in SKIP (CUDA kernel packages vLLM imports lazily, torch and friends) are never fetched;
- PINS override a requirement's version (apache-tvm-ffi: xgrammar needs a newer one than vLLM pins);
- one version of each name is kept; a wheel whose version no longer fits is replaced.

Usage: resolve_deps.py OUT_DIR ROOT_REQ... (run with a Python that has `packaging`, e.g. the repo venv)
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename

HERE = Path(__file__).resolve().parent
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_5_x86_64", "manylinux_2_12_x86_64"]
MORE_PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (26, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39)]
SKIP = {canonicalize_name(n) for n in """
torch torchaudio torchvision torchcodec triton pynvvideocodec flashinfer-python flashinfer-cubin tilelang
nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-cu13 quack-kernels tokenspeed-mla
humming-kernels fastsafetensors nvidia-cudnn-frontend numba llvmlite cupy-cuda13x
""".split()}
PINS = {"apache-tvm-ffi": "apache-tvm-ffi==0.1.15.post2"}
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def image_packages() -> set[str]:
    text = (HERE / "image_packages.txt").read_text()
    return {canonicalize_name(x) for x in text.split() if x and not x.startswith("#")}


def applies(marker: Marker | None, extras: set[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**ENV, "extra": e}) for e in ({""} | extras))


def wheel_requirements(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8", "replace")
    reqs = []
    for line in text.splitlines():
        if not line.strip():
            break  # end of headers
        if line.startswith("Requires-Dist:"):
            reqs.append(Requirement(line.split(":", 1)[1].strip()))
    return reqs


def pip_download(out: Path, specs: list[str], more: bool = False) -> bool:
    plats = [a for p in PLATFORMS + (MORE_PLATFORMS if more else []) for a in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", *plats, "-d", str(out), *specs]
    return subprocess.run(cmd, check=False).returncode == 0  # noqa: S603


def present(out: Path) -> dict[str, tuple[str, Path]]:
    found: dict[str, tuple[str, Path]] = {}
    for whl in out.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(whl.name)
        found[canonicalize_name(name)] = (str(version), whl)
    return found


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    have_image = image_packages()
    specs: dict[str, SpecifierSet] = {}
    extras: dict[str, set[str]] = {}
    wanted: dict[str, str] = {}  # canonical name -> display name
    todo = [Requirement(r) for r in sys.argv[2:]]
    for _round in range(30):
        for req in todo:
            name = canonicalize_name(req.name)
            if name in SKIP or name in have_image or not applies(req.marker, set()):
                continue
            wanted.setdefault(name, req.name)
            specs[name] = specs.get(name, SpecifierSet()) & req.specifier
            extras.setdefault(name, set()).update(req.extras)
        todo = []
        have = present(out)
        need = []
        for name, spec in specs.items():
            if name in PINS:
                pin = Requirement(PINS[name])
                if name not in have or have[name][0] not in pin.specifier:
                    need.append(PINS[name])
                continue
            if name in have and spec.contains(have[name][0], prereleases=True):
                continue
            if name in have:
                print(f"replacing {have[name][1].name}: needs {spec}", file=sys.stderr)
                have[name][1].unlink()
            need.append(f"{wanted[name]}{spec}")
        if need and not pip_download(out, need):
            for s in need:
                if not pip_download(out, [s]) and not pip_download(out, [s], more=True):
                    print(f"FAILED: {s}", file=sys.stderr)
                    return 1
        have = present(out)
        changed = bool(need)
        for name in list(specs):
            if name not in have:
                continue
            for r in wheel_requirements(have[name][1]):
                if not applies(r.marker, extras.get(name, set())):
                    continue
                r.marker = None
                cn = canonicalize_name(r.name)
                if cn in SKIP or cn in have_image:
                    continue
                new_spec = specs.get(cn, SpecifierSet()) & r.specifier
                if cn not in specs or str(new_spec) != str(specs[cn]) or not (r.extras <= extras.get(cn, set())):
                    todo.append(r)
                    changed = True
        if not changed and not todo:
            total = sum(p.stat().st_size for p in out.glob("*.whl"))
            print(f"resolved: {len(have)} wheels, {total / 2**20:.1f} MiB in {out}")
            return 0
    print("did not converge", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
