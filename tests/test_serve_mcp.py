"""`appliance mcp` driven by the SDK's own client over STDIO: the tools are listed,
search_corpus answers from a tiny corpus, and research runs with the 135M model."""

from __future__ import annotations

import json
import os
import sys

import anyio
import pytest

from conftest import REPO, make_settings, require_model_file
from serve_harness import make_tiny_corpus

pytestmark = pytest.mark.slow


def structured(result) -> object:
    assert not result.is_error, result
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) and set(content) == {"result"} else content
    return json.loads(result.content[0].text)


def test_mcp_over_stdio(tmp_path):
    from mcp import Client, StdioServerParameters

    require_model_file()
    home = tmp_path / "home"
    make_tiny_corpus(make_settings(home), tmp_path / "docs")
    config = home / "empty-config.toml"
    params = StdioServerParameters(command=sys.executable, args=["-m", "appliance", "--config", str(config), "mcp"],
                                   env={**os.environ, "APPLIANCE_HOME": str(home)}, cwd=str(REPO))

    async def session():
        async with Client(params, read_timeout_seconds=600) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"research", "get_report", "search_corpus", "list_runs"} <= tools
            hits = structured(await client.call_tool("search_corpus", {"corpus": "tiny", "query": "Mira Holt"}))
            assert hits and any("Holt" in (h["title"] + h["snippet"]) for h in hits)
            bad = await client.call_tool("search_corpus", {"corpus": "nope", "query": "x"})
            assert bad.is_error and "unknown corpus" in bad.content[0].text
            run = structured(await client.call_tool("research", {
                "question": "Who named Aurora Lake?", "profile": "quick", "corpus": "tiny", "backend": "corpus",
                "model": "smollm2-135m", "wait_seconds": 300}))
            assert run["id"].startswith("j-")
            assert run["status"] == "done", run
            assert run["report"].startswith("# ")
            again = structured(await client.call_tool("get_report", {"run_id": run["id"]}))
            assert again["report"] == run["report"]
            listed = structured(await client.call_tool("list_runs", {}))
            assert [r["id"] for r in listed] == [run["id"]]
            bad = await client.call_tool("get_report", {"run_id": "../../etc/passwd"})
            assert bad.is_error

    anyio.run(session)
