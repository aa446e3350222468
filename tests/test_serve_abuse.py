"""Bad input and abuse against a real `appliance serve` on loopback: each refusal is a 4xx with
a one-line reason, the log has no traceback, and the queue stays intact. No run executes
here (``--workers 0``), so nothing loads a model."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from serve_harness import Server, tiny_home

QUESTION = "Who named Aurora Lake?"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tiny_home(tmp_path_factory.mktemp("serve-abuse"))


@pytest.fixture(scope="module")
def server(home):
    server = Server(home, "--workers", "0", "--max-queued", "50").start()
    yield server
    server.stop()


def one_line_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    reason = response.json()["error"]
    assert reason and "\n" not in reason and "Traceback" not in reason
    return reason


def test_security_headers_and_openapi(server):
    response = httpx.get(f"{server.url}/api/openapi.json", timeout=30)
    assert response.status_code == 200
    assert response.json()["paths"]["/api/runs"]["post"]
    assert "default-src 'self'" in response.headers["content-security-policy"]


def test_bad_ids_and_paths(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for path in ("/api/runs/..%2F..%2Fetc%2Fpasswd", "/api/runs/j-..%2Fjobs/report",
                     "/api/runs/j-../report", "/api/runs/..", "/api/runs/j-0123456789ab%00/report"):
            response = client.get(path)
            assert 400 <= response.status_code < 500, (path, response.status_code)
            one_line_error(response, response.status_code)
        one_line_error(client.get("/api/runs/j-0123456789ab"), 404)
        one_line_error(client.get("/api/nothing"), 404)
        one_line_error(client.put("/api/runs"), 405)


def test_bad_bodies(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        one_line_error(client.post("/api/runs", content=b"not json"), 400)
        one_line_error(client.post("/api/runs", json=["a list"]), 400)
        one_line_error(client.post("/api/runs", json={"question": 5}), 400)
        one_line_error(client.post("/api/runs", json={"question": QUESTION, "command": "rm -rf /"}), 400)
        one_line_error(client.post("/api/runs", json={"question": "   "}), 400)
        one_line_error(client.post("/api/runs", json={"question": QUESTION, "profile": "huge"}), 400)
        assert "corpus" in one_line_error(client.post("/api/runs", json={"question": QUESTION,
                                                                         "corpus": "nope"}), 400)
        assert "model" in one_line_error(client.post("/api/runs", json={"question": QUESTION,
                                                                        "model": "gpt-9"}), 400)
        one_line_error(client.get("/api/runs?status=exploded"), 400)
        one_line_error(client.get("/api/corpora/nope/search?q=lake"), 404)


def _get_on(sock: socket.socket, path: str) -> str:
    host, port = sock.getpeername()[:2]
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            return ""  # the server closed the connection
        head += chunk
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    body = head.split(b"\r\n\r\n", 1)[1]
    while len(body) < length:
        body += sock.recv(4096)
    return head.decode("latin-1").split("\r\n", 1)[0]


def test_an_idle_keep_alive_connection_outlives_a_clients_own_expiry(server):
    """A connection idle past httpx's 5 s keep-alive (which uvicorn shares by default) still
    answers: the server keeps it longer than a client does, so no client reuses one the server
    is closing."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        assert _get_on(sock, "/api/runs?limit=1") == "HTTP/1.1 200 OK"
        time.sleep(6.5)
        assert _get_on(sock, "/api/runs?limit=1") == "HTTP/1.1 200 OK"


def test_hundred_megabyte_body(server):
    # Declared: refused from the headers alone, before any of the body is read.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /api/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 104857600\r\n\r\n" + b"x" * 65536)
        head = sock.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head
    # Streamed without a length: cut off at the cap.
    def chunks():
        for _ in range(100):
            yield b"x" * (1024 * 1024)

    try:
        response = httpx.post(f"{server.url}/api/runs", content=chunks(), timeout=30)
        one_line_error(response, 413)
    except httpx.TransportError:
        pass  # the server closed the connection after answering 413 mid-upload


def test_thousand_submissions_bounded(server, home):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        codes = [client.post("/api/runs", json={"question": f"{QUESTION} ({n})"}).status_code for n in range(1000)]
        assert codes.count(201) == 50 and codes.count(429) == 950, {c: codes.count(c) for c in set(codes)}
        assert codes.index(429) == 50
        listing = client.get("/api/runs?status=queued&limit=1000").json()
        assert len(listing["runs"]) == 50 and listing["counts"]["queued"] == 50
        # Text search over questions, with LIKE's wildcards taken literally.
        assert len(client.get("/api/runs", params={"q": "(7)"}).json()["runs"]) == 1
        assert client.get("/api/runs", params={"q": "%"}).json()["runs"] == []
        # A queued run is cancelled at once; then it can be deleted.
        run_id = listing["runs"][0]["id"]
        assert client.delete(f"/api/runs/{run_id}").json()["status"] == "cancelled"
        assert client.delete(f"/api/runs/{run_id}").json()["deleted"] is True
        one_line_error(client.get(f"/api/runs/{run_id}"), 404)
    log = server.log_text()
    assert "Traceback" not in log
    assert log.count("refused 429") == 950


def test_token_beyond_loopback(tmp_path):
    # 127.0.0.2 is loopback to the kernel but not one of serve's loopback names, so it stands
    # for "any other address" without opening a port to the network.
    server = Server(tmp_path, "--workers", "0", host="127.0.0.2")
    server.start(timeout=60)  # the probe's 401 says it is up
    try:
        lines = [line for line in server.log_text().splitlines() if line.startswith("token (shown once")]
        assert len(lines) == 1
        token = lines[0].rsplit(": ", 1)[1]
        url = f"{server.url}/api/runs"
        one_line_error(httpx.get(url, timeout=30), 401)
        one_line_error(httpx.get(url, headers={"authorization": "Bearer wrong"}, timeout=30), 403)
        one_line_error(httpx.get(url, params={"token": "wrong"}, timeout=30), 403)
        assert httpx.get(url, headers={"authorization": f"Bearer {token}"}, timeout=30).status_code == 200
        assert "Traceback" not in server.log_text()
    finally:
        server.stop()


def test_corpora_models_doctor(server, home):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        corpora = client.get("/api/corpora").json()["corpora"]
        assert [c["name"] for c in corpora] == ["tiny"] and corpora[0]["documents"] == 3
        assert "path" not in corpora[0] and str(home) not in json.dumps(corpora)  # no disk paths
        hits = client.get("/api/corpora/tiny/search", params={"q": "Mira Holt surveyor"}).json()["hits"]
        assert hits and hits[0]["url"].startswith("corpus://tiny/")
        one_line_error(client.get("/api/corpora/tiny/search"), 400)
        assert "smollm2-135m" in {m["name"] for m in client.get("/api/models").json()["models"]}
        doctor = client.get("/api/doctor")
        assert doctor.status_code == 200 and doctor.json()["checks"]
