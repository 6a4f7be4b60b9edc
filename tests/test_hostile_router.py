"""A hostile router or server at the HTTP boundary (raw sockets on loopback, nothing simulated
above TCP): every exchange of the gateway client (the deploy's drain and admission, `status`'s
read, the drain's in-flight wait on a worker's /metrics) ends by its deadline and never decodes
what it did not ask for."""

from __future__ import annotations

import gzip
import time

import pytest

from sglang_deploy.deadline import DeadlinePassed, within
from sglang_deploy.deploy import gateway_client
from sglang_deploy.deploy.gateway_client import Gateway, GatewayError
from sglang_deploy.simulator.raw_peer import RawServer


@pytest.fixture
def serve():
    servers = []

    def start(behave):
        servers.append(RawServer(behave))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def trickle_headers(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.wait(0.5):  # one header line every half second, forever
        conn.sendall(b"X-Slow: 1\r\n")


def trickle_body(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.2):
        conn.sendall(b"#")


def nested_gzip(conn, stop):
    body = gzip.compress(gzip.compress(b"0" * (50 << 20)))  # 50 MB of zeros in about 4 KB
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip, gzip\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def test_a_router_that_trickles_its_headers_is_cut_at_the_deadline(serve):
    server = serve(trickle_headers)
    start = time.monotonic()
    with pytest.raises(GatewayError) as err:
        Gateway(server.url, "k-secret", timeout_s=2).workers()
    assert time.monotonic() - start < 4.5
    assert "no whole answer within 2 s" in str(err.value) and "k-secret" not in str(err.value)


def test_a_body_one_byte_at_a_time_is_cut_at_the_deadline(serve):
    server = serve(trickle_body)
    start = time.monotonic()
    with pytest.raises(GatewayError):
        Gateway(server.url, None, timeout_s=2).workers()
    assert time.monotonic() - start < 4.5


def test_nested_compression_is_refused_not_decoded(serve):
    server = serve(nested_gzip)
    with pytest.raises(GatewayError) as err:
        Gateway(server.url, None, timeout_s=5).workers()
    assert "content encoding 'gzip, gzip'" in str(err.value)


def test_the_drains_wait_on_a_trickling_metrics_ends_at_its_timeout(serve):
    server = serve(trickle_headers)
    start = time.monotonic()
    timed_out, last = gateway_client.wait_idle(server.url, None, timeout_s=2, poll_s=0.1)
    assert timed_out and last is None
    assert time.monotonic() - start < 8  # each reading is bounded by its own deadline too


def test_within_hands_back_the_result_the_error_or_the_deadline():
    assert within(1, lambda: 42) == 42
    with pytest.raises(KeyError):
        within(1, lambda: {}["x"])
    aborted = []
    with pytest.raises(DeadlinePassed):
        within(0.2, lambda: time.sleep(2), abort=lambda: aborted.append(True))
    assert aborted == [True]


def _echoing(key: str, as_url: bool):
    import httpx

    def handle(request: httpx.Request) -> httpx.Response:
        worker = ({"id": "7b4f1c2e-8a0d-4c3b-9a51-2f6e3d1c0b9a", "url": f"http://{key}@10.0.0.5:30000",
                   "is_healthy": True} if as_url else {"id": key, "url": "http://10.0.0.5:30000"})
        return httpx.Response(200, json={"workers": [worker], "total": 1})
    return httpx.MockTransport(handle)


@pytest.mark.parametrize("as_url", [False, True])
def test_a_gateway_that_echoes_the_key_never_gets_it_printed(as_url):
    key = "sk-gw-ECHOED-0123456789"
    gw = Gateway("http://127.0.0.1:9", key, transport=_echoing(key, as_url))
    if as_url:
        listed = gw.workers()
        assert key not in listed[0].url and "***" in listed[0].url
    else:
        with pytest.raises(GatewayError) as err:
            gw.workers()
        assert key not in str(err.value) and "is not a UUID" in str(err.value)


def test_check_against_a_server_that_trickles_its_headers_ends_at_its_ready_timeout(serve):
    """`check --url SERVER --ready-timeout 3` against headers one line every half second: the gate's
    readiness poll is bounded by the deadline too, and the command ends as not ready."""
    import httpx

    from sglang_deploy.gate.client import wait_ready
    server = serve(trickle_headers)
    start = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=3, trust_env=False) as client:
        with pytest.raises(Exception) as err:
            wait_ready(client, 3.0, lambda text: None)
    assert time.monotonic() - start < 12, err.value


def test_a_hub_that_trickles_its_model_info_ends_at_the_deadline(serve):
    from sglang_deploy.deploy.model_hub import HubClient, HubSettings
    from sglang_deploy.deploy.model_files import MetadataError
    server = serve(trickle_headers)
    start = time.monotonic()
    with HubClient(HubSettings(endpoint=server.url, token="hf_trickleTOKEN0123", deadline_s=2, budget_s=5)) as hub:
        with pytest.raises(MetadataError) as err:
            hub.model_info("Qwen/Qwen3-32B", "main")
    assert time.monotonic() - start < 5 and "hf_trickleTOKEN0123" not in str(err.value)


def test_a_hub_endpoint_httpx_cannot_use_is_an_error_not_a_traceback():
    from sglang_deploy.deploy.model_hub import HubClient, HubSettings
    from sglang_deploy.deploy.model_files import MetadataError
    with HubClient(HubSettings(endpoint="http://127.0.0.1:18x99", deadline_s=2)) as hub:
        with pytest.raises(MetadataError) as err:
            hub.model_info("Qwen/Qwen3-32B", "main")
    assert "not a URL" in str(err.value)
