"""Load one GGUF file and decode one token, in a process of its own.

`appliance doctor` runs this as a child process: a llama.cpp build that does not suit the
CPU (FACTS.md: an AMX instruction the virtual machine forbids) kills the process with a
signal on the first decode, and the doctor must survive to say so.

Usage: python -m appliance.llm.selftest PATH N_CTX [CHAT_FORMAT]
Prints one JSON object: {"ok": true, "load_seconds": ..., "decode_seconds": ...} or
{"ok": false, "error": "..."}.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def run(path: Path, n_ctx: int, chat_format: str | None) -> dict:
    """Load the model, render a one-message chat, generate one token; timings or the error."""
    from ..errors import ApplianceError
    from .native import LlamaBackend

    try:
        start = time.perf_counter()
        backend = LlamaBackend.load(path, name=path.name, n_ctx=n_ctx, n_threads=0, n_batch=512,
                                    seed=1, chat_format=chat_format)
        loaded = time.perf_counter()
        tokens, stop = backend.render([{"role": "user", "content": "Say OK."}])
        backend.evaluate_prompt(tokens)  # checks the logits: damaged weights are an error here
        out = backend.llama.create_completion(prompt=tokens, max_tokens=1, temperature=0.0, stop=stop)
        decoded = time.perf_counter()
        backend.close()
    except ApplianceError as exc:
        return {"ok": False, "error": exc.one_line()}
    return {"ok": True, "load_seconds": round(loaded - start, 3),
            "decode_seconds": round(decoded - loaded, 3),
            "token": out["choices"][0]["text"], "n_ctx": backend.n_ctx}


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    result = run(Path(argv[0]), int(argv[1]), argv[2] if len(argv) == 3 and argv[2] else None)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
