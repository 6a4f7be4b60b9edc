"""A hostile mirror, a hostile file: what the controller reads about a model (the Hub client,
config.json, the index, the safetensors headers, the cache, the inventory's store, ids and
revisions, the Hub token and the endpoint) ends in one clear error line, bounded in time and
memory, with no secret shown and nothing written outside the cache's fixed names.

The tests are grouped by class (the word after ``test_``): store, ids, hub, config, secrets,
endpoint, fuzz. Each parametrized case is one hostile input; a case is handled when it ends in
one clear line (no traceback, no RecursionError or MemoryError), within its deadline, with no
secret printed and nothing written where it should not be.
"""

from __future__ import annotations

import io
import gzip
import json
import os
import re
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Loaded first, as the real command does (pyinfra patches the standard library with gevent).
import sglang_deploy.deploy.inventory  # noqa: F401
from sglang_deploy.deploy import model_metadata as mm
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.commands.cli import main
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import CheckpointError, FactsUnavailable, ModelFacts, facts_from_metadata
from sglang_deploy.plan.settings import DEFAULTS
from sglang_deploy.plan.spec import SecretRef, build_spec
from sglang_deploy.plan.weights import weights_settings
from tests.conftest import free_port

COMMIT = "c0ffee" + "0" * 34
MODEL = "org/model"
DEADLINE = 2.0
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256}
H100 = {"model": "H100 80GB HBM3", "count": 8, "topology": "nvswitch"}


class Hang(Exception):
    pass


@contextmanager
def watchdog(seconds: float):
    """Fail a case that runs past ``seconds`` (a signal: it interrupts a blocked read or a loop)."""
    def fire(*_):
        raise Hang(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def one_line(text: str) -> None:
    assert text and "\n" not in text and "Traceback" not in text, text
    assert len(text) < 2000, len(text)


def hub_settings(endpoint: str = "http://hub.test", token: str | None = None, **kw) -> mm.HubSettings:
    try:
        return mm.HubSettings(endpoint=endpoint, token=token, deadline_s=kw.pop("deadline_s", DEADLINE), **kw)
    except TypeError:   # before the deadline existed
        return mm.HubSettings(endpoint=endpoint, token=token)


class Counted(httpx.SyncByteStream):
    """A body handed out chunk by chunk, counting what the client pulled."""

    def __init__(self, hub: "MockHub", chunks):
        self.hub, self.chunks = hub, chunks

    def __iter__(self):
        for chunk in self.chunks:
            self.hub.sent += len(chunk)
            yield chunk


def trickle(stop: threading.Event, first: bytes = b"{", gap: float = 0.2, limit: float = 30.0):
    yield first
    end = time.monotonic() + limit
    while not stop.is_set() and time.monotonic() < end:
        time.sleep(gap)
        yield b" "


def big(total: int, head: bytes = b"", fill: bytes = b" "):
    yield head
    for _ in range(total // 2 ** 20):
        yield fill * 2 ** 20


class MockHub:
    """The Hub's two routes over httpx.MockTransport; a file is bytes, or a callable(request) -> Response."""

    def __init__(self, files=None, info=None, info_response=None, honour_range=True):
        self.files = {"config.json": json.dumps(CONFIG).encode()} if files is None else files
        self.info = info
        self.info_response = info_response
        self.honour_range = honour_range
        self.requests: list[httpx.Request] = []
        self.sent = 0
        self.stop = threading.Event()

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path.startswith("/api/models/"):
            if self.info_response is not None:
                return self.info_response(self)
            info = self.info if self.info is not None else {
                "sha": COMMIT, "siblings": [{"rfilename": n} for n in self.files]}
            return httpx.Response(200, content=info if isinstance(info, bytes) else json.dumps(info).encode())
        name = unquote(path.split(f"/resolve/{COMMIT}/", 1)[-1])
        body = self.files.get(name)
        if body is None:
            return httpx.Response(404, headers={"X-Error-Code": "EntryNotFound"})
        if callable(body):
            return body(self, request)
        rng = request.headers.get("Range")
        if rng and self.honour_range:
            a, b = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            return httpx.Response(206, content=body[a:b + 1])
        return httpx.Response(200, stream=Counted(self, (body[i:i + 2 ** 16] for i in range(0, len(body), 2 ** 16))))

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))


def fetch(hub: MockHub, tmp_path: Path, model: str = MODEL, revision: str | None = None, token: str | None = None,
          seconds: float = 8.0):
    cache = mm.ModelCache(tmp_path / "cache")
    try:
        with watchdog(seconds):
            return mm.fetch_model(model, revision, hub_settings(token=token), cache, hub.client())
    finally:
        hub.stop.set()


def refused(hub: MockHub, tmp_path: Path, seconds: float = 8.0, **kw) -> str:
    started = time.monotonic()
    with pytest.raises(mm.MetadataError) as err:
        fetch(hub, tmp_path, seconds=seconds, **kw)
    one_line(str(err.value))
    assert time.monotonic() - started < seconds
    return str(err.value)


def cache_files(tmp_path: Path) -> set[str]:
    root = tmp_path / "cache"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def outside_files(tmp_path: Path) -> set[str]:
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
            if p.is_file() and not p.is_relative_to(tmp_path / "cache")}


# ---- class store: sglang_model_store is a dedicated directory -------------------------------------

BAD_STORES = ["/", "//", "///", "/etc", "/etc/sglang", "/usr", "/usr/local", "/usr/local/models", "/usr/share/m",
              "/bin", "/sbin/x", "/lib", "/lib64/m", "/libx32", "/boot/m", "/dev/shm/m", "/proc/1", "/sys/x",
              "/run/m", "/var", "/var/lib", "/var/log", "/var/tmp", "/root", "/home", "/tmp", "/opt", "/srv",
              "/var/lib/../../etc", "/var/lib/sglang/./models", "/data//models", "/var/lib/sglang/models/..",
              "/data/models/.", "relative/models", "/data/mo dels", "/data/\x01m", 5, "", "/var/run/x"]
GOOD_STORES = [DEFAULTS["sglang_model_store"], "/data/models", "/mnt/nvme/hf", "/srv/sglang/models",
               "/opt/sglang/models", "/home/svc/models", "/var/lib/sglang/models/", "/tmp/sglang-models"]


@pytest.mark.parametrize("store", BAD_STORES, ids=repr)
def test_store_refused(store):
    with pytest.raises(PlanError) as err:
        weights_settings("h", {"sglang_model_store": store}, MODEL)
    assert err.value.field == "sglang_model_store"
    one_line(str(err.value))


@pytest.mark.parametrize("store", GOOD_STORES)
def test_store_accepted(store):
    assert weights_settings("h", {"sglang_model_store": store}, MODEL).store == store.rstrip("/")


# ---- class ids: model ids and revisions follow the Hub's grammar ---------------------------------

BAD_IDS = ["a/..", "..", ".", "a/.", "../a", "./a", "a/../b", "a--b/c", "a/b--c", "-a/b", "a/b-", "a./b", ".a/b",
           "a/b.git", "a/" + "x" * 97, "a/b/c", "café/x", "a/b\x00", "a/b\n", "a b/c", "a/"]
BAD_REVISIONS = ["..", ".", "a/../b", "a/./b", "a//b", "/main", "main/", "x" * 300, "main\x00", "main\n", "ma in",
                 "main\x1b[31m", "../../etc"]


@pytest.mark.parametrize("model", BAD_IDS, ids=repr)
def test_ids_model_refused(model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlanError) as err:
        weights_settings("h", {}, model)
    assert err.value.field in ("sglang_model", "sglang_model_source")
    hub = MockHub()
    with pytest.raises(mm.MetadataError):
        fetch(hub, tmp_path, model=model)
    facts = mm.resolve_facts(model, hub=hub_settings(), cache=mm.ModelCache(tmp_path / "cache"), client=hub.client())
    assert not isinstance(facts, ModelFacts)
    assert hub.requests == [] and cache_files(tmp_path) == set()


@pytest.mark.parametrize("revision", BAD_REVISIONS, ids=repr)
def test_ids_revision_refused(revision, tmp_path):
    with pytest.raises(PlanError) as err:
        weights_settings("h", {"sglang_model_revision": revision}, MODEL)
    assert err.value.field == "sglang_model_revision"
    assert revision not in str(err.value) or revision.isprintable()
    hub = MockHub()
    refused(hub, tmp_path, revision=revision)
    assert hub.requests == [] and cache_files(tmp_path) == set()


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "gpt2", "a/b.c_d-e", "A1/" + "x" * 96])
def test_ids_good_model_accepted(model):
    assert weights_settings("h", {}, model).source == "hub"


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "refs/convert/parquet", "a" * 40, "release-2.1"])
def test_ids_good_revision_accepted(revision):
    assert weights_settings("h", {"sglang_model_revision": revision}, MODEL).revision == revision


# ---- class hub: bounded work on the Hub client ----------------------------------------------------

def _stream(chunks_of):
    return lambda hub, *_: httpx.Response(200, stream=Counted(hub, chunks_of(hub)))


def test_hub_trickling_model_info(tmp_path):
    hub = MockHub(info_response=_stream(lambda h: trickle(h.stop)))
    # the Hub's model info trickles a byte at a time: refused at the read's own deadline, named
    assert re.fullmatch(r"model info: no complete answer within \d+ s", refused(hub, tmp_path))


def test_hub_trickling_config(tmp_path):
    hub = MockHub(files={"config.json": _stream(lambda h: trickle(h.stop))})
    refused(hub, tmp_path)


@pytest.mark.parametrize("encoding", ["gzip, gzip", "gzip", "br", "deflate, gzip"])
def test_hub_answers_in_a_content_encoding_are_refused_not_decoded(tmp_path, encoding):
    # 12 KB of gzip inside gzip decodes to 1 GiB: httpx decodes each chunk whole, so a cap between
    # chunks came too late (models fetch peaked at 2 GiB); the client asks for identity instead
    body = gzip.compress(gzip.compress(b"0" * (8 << 20)))
    hub = MockHub(info_response=lambda h: httpx.Response(200, stream=Counted(h, iter([body])),
                                                         headers={"Content-Encoding": encoding}))
    assert refused(hub, tmp_path) == (f"model info: an answer in content encoding {encoding!r} (asked for identity; "
                                      "not decoded)")
    assert all(r.headers["Accept-Encoding"] == "identity" for r in hub.requests)


def test_hub_files_are_asked_for_as_sent_and_read_so():
    hub = MockHub()
    with mm.HubClient(hub_settings(), hub.client()) as client:
        assert json.loads(client._exchange(f"{hub_settings().endpoint}/{MODEL}/resolve/{COMMIT}/config.json",
                                           "config.json", "main", 1 << 20)) == CONFIG
    assert hub.requests[-1].headers["Accept-Encoding"] == "identity"


def test_hub_model_info_of_64_mib(tmp_path):
    hub = MockHub(info_response=_stream(lambda h: big(64 * 2 ** 20, b'{"sha": "' + COMMIT.encode() + b'", "x": "')))
    refused(hub, tmp_path, seconds=20)
    assert hub.sent <= 17 * 2 ** 20


def test_hub_config_of_64_mib(tmp_path):
    hub = MockHub(files={"config.json": _stream(lambda h: big(64 * 2 ** 20, b"{"))})
    refused(hub, tmp_path, seconds=20)
    assert hub.sent <= 17 * 2 ** 20


def _safetensors(header: bytes, claimed: int | None = None) -> bytes:
    return (len(header) if claimed is None else claimed).to_bytes(8, "little") + header


def test_hub_range_answered_with_the_whole_body(tmp_path):
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    body = _safetensors(header) + b"\0" * (48 * 2 ** 20)
    hub = MockHub(files={"config.json": json.dumps(CONFIG).encode(), "model.safetensors": body}, honour_range=False)
    with watchdog(20):
        facts, _ = mm.fetch_model(MODEL, None, hub_settings(), mm.ModelCache(tmp_path / "cache"), hub.client())
    assert facts.total_weight_bytes == 8
    assert hub.sent <= 2 * 2 ** 20 + len(json.dumps(CONFIG))


@pytest.mark.parametrize("case", ["claims 200 MB", "nested 10^5", "not an object", "huge int", "NaN",
                                  "offsets reversed", "shorter than 8 bytes", "header cut short"])
def test_hub_hostile_safetensors_header(case, tmp_path):
    header = {"claims 200 MB": _safetensors(b"{}", 200 * 10 ** 6),
              "nested 10^5": _safetensors(b"[" * 10 ** 5 + b"]" * 10 ** 5),
              "not an object": _safetensors(b"[1, 2]"),
              "huge int": _safetensors(b'{"w": {"data_offsets": [0, ' + b"9" * 10 ** 5 + b"]}}"),
              "NaN": _safetensors(b'{"w": {"data_offsets": [0, NaN]}}'),
              "offsets reversed": _safetensors(b'{"w": {"data_offsets": [8, 0]}}'),
              "shorter than 8 bytes": b"\x01\x00",
              "header cut short": _safetensors(b'{"w": 1}', 4096)}[case]
    hub = MockHub(files={"config.json": json.dumps(CONFIG).encode(), "model.safetensors": header})
    refused(hub, tmp_path)
    assert cache_files(tmp_path) == set()


@pytest.mark.parametrize("case", ["nested 10^5", "huge int", "NaN", "not JSON", "array", "sha traversal",
                                  "siblings a string", "sibling name a list", "sibling .. safetensors",
                                  "sibling absolute", "sibling control chars", "2000 safetensors", "sha NaN"])
def test_hub_hostile_model_info(case, tmp_path):
    sib = lambda *names: [{"rfilename": n} for n in ("config.json", *names)]  # noqa: E731
    info = {"nested 10^5": b"[" * 10 ** 5 + b"]" * 10 ** 5,
            "huge int": b'{"sha": ' + b"7" * 10 ** 5 + b"}",
            "NaN": b'{"sha": NaN, "siblings": []}',
            "not JSON": b"<html>",
            "array": [COMMIT],
            "sha traversal": {"sha": "../../../../tmp/evil", "siblings": sib()},
            "siblings a string": {"sha": COMMIT, "siblings": "config.json"},
            "sibling name a list": {"sha": COMMIT, "siblings": [{"rfilename": ["config.json"]}]},
            "sibling .. safetensors": {"sha": COMMIT, "siblings": sib("..safetensors", "...safetensors",
                                                                      "..%2f..%2fx.safetensors")},
            "sibling absolute": {"sha": COMMIT, "siblings": sib("/etc/x.safetensors", "\\..\\x.safetensors")},
            "sibling control chars": {"sha": COMMIT, "siblings": sib("a\r\nX-Evil: 1.safetensors",
                                                                     "\x1b[2Jb.safetensors")},
            "2000 safetensors": {"sha": COMMIT, "siblings": sib(*(f"m-{i:05}.safetensors" for i in range(2000)))},
            "sha NaN": b'{"sha": NaN}'}[case]
    files = {"config.json": json.dumps(CONFIG).encode()}
    files.update({f"m-{i:05}.safetensors": _safetensors(b"{}") for i in range(2000)})
    hub = MockHub(files=files, info=info)
    refused(hub, tmp_path)
    assert len([r for r in hub.requests if ".safetensors" in r.url.path]) == 0
    assert outside_files(tmp_path) == set() and cache_files(tmp_path) == set()


def test_hub_cache_holds_only_fixed_names(tmp_path):
    files = {"config.json": json.dumps(CONFIG).encode(), "generation_config.json": b"{}",
             "model.safetensors": _safetensors(b'{"w": {"data_offsets": [0, 4]}}'),
             "sub/evil.json": b"{}", "refs.json": b"{}", "x.json": b"{}"}
    hub = MockHub(files=files)
    facts, path = fetch(hub, tmp_path)
    assert facts.total_weight_bytes == 4
    assert cache_files(tmp_path) == {"org--model/refs.json", f"org--model/{COMMIT}/config.json",
                                     f"org--model/{COMMIT}/generation_config.json",
                                     f"org--model/{COMMIT}/safetensors_headers.json"}
    assert outside_files(tmp_path) == set()


def test_hub_error_text_from_the_server_is_not_echoed(tmp_path):
    hub = MockHub(info_response=lambda h: httpx.Response(500, headers={"X-Error-Code": "\x1b]0;evil\x07Boom"},
                                                         content=b"\x1b[2J" * 100))
    text = refused(hub, tmp_path)
    assert "\x1b" not in text


def _raw_server(reply: bytes, gap: float | None, stop: threading.Event) -> int:
    """A socket server: after the request line, ``reply`` then one byte every ``gap`` s (None: silence)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def serve():
        srv.settimeout(0.5)
        conns = []
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conns.append(conn)
            conn.recv(65536)
            conn.sendall(reply)

            def drip(c=conn):
                end = time.monotonic() + 30
                while not stop.is_set() and time.monotonic() < end:
                    time.sleep(gap or 0.5)
                    if gap:
                        try:
                            c.sendall(b" ")
                        except OSError:
                            return
            threading.Thread(target=drip, daemon=True).start()
        for c in conns:
            c.close()
        srv.close()
    threading.Thread(target=serve, daemon=True).start()
    return port


@pytest.mark.parametrize("gap", [0.3, None], ids=["trickle", "silence"])
def test_hub_real_socket_bounded_by_the_deadline(gap, tmp_path):
    stop = threading.Event()
    port = _raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n{", gap, stop)
    started = time.monotonic()
    try:
        with watchdog(2 * DEADLINE + 2), pytest.raises(mm.MetadataError) as err:
            with mm.HubClient(hub_settings(f"http://127.0.0.1:{port}")) as client:
                client.model_info(MODEL, "main")
    finally:
        stop.set()
    one_line(str(err.value))
    assert time.monotonic() - started < 2 * DEADLINE + 1


# ---- class config: values that drive loops and allocations are bounded ---------------------------

HOSTILE_VALUES = [
    ("num_hidden_layers", 10 ** 9, {"full_attention_interval": 4}),
    ("num_hidden_layers", 10 ** 100, {}), ("num_hidden_layers", True, {}), ("num_hidden_layers", -1, {}),
    ("num_hidden_layers", float("nan"), {}), ("num_hidden_layers", 1.5, {}), ("num_hidden_layers", "61", {}),
    ("num_hidden_layers", 2 * 10 ** 6, {"layer_types": ["full_attention"] * (2 * 10 ** 6)}),
    ("num_attention_heads", 10 ** 6, {}), ("num_key_value_heads", 10 ** 6, {}),
    ("n_routed_experts", 10 ** 9, {"num_experts_per_tok": 8, "moe_intermediate_size": 64}),
    ("num_experts", 10 ** 9, {"num_experts_per_tok": 8, "moe_intermediate_size": 64}),
    ("num_local_experts", 10 ** 9, {"num_experts_per_tok": 8}),
    ("num_experts_per_tok", 10 ** 9, {"num_experts": 8, "moe_intermediate_size": 64}),
    ("hidden_size", 10 ** 12, {}), ("intermediate_size", 10 ** 12, {}), ("head_dim", 10 ** 9, {}),
    ("max_position_embeddings", 2 ** 40, {}), ("vocab_size", 10 ** 12, {}), ("sliding_window", 2 ** 40,
                                                                              {"layer_types": ["sliding_attention",
                                                                                               "full_attention"]}),
    ("num_nextn_predict_layers", 10 ** 6, {}), ("kv_lora_rank", 10 ** 9, {"qk_nope_head_dim": 128,
                                                                           "qk_rope_head_dim": 64}),
    ("full_attention_interval", 10 ** 12, {}), ("first_k_dense_replace", 10 ** 9, {"num_experts": 8,
                                                                                   "num_experts_per_tok": 2,
                                                                                   "moe_intermediate_size": 64}),
]


@pytest.mark.parametrize("key,value,more", HOSTILE_VALUES, ids=lambda v: repr(v)[:30])
def test_config_hostile_value(key, value, more):
    config = {**CONFIG, **more, key: value}
    started = time.monotonic()
    with watchdog(5), pytest.raises(CheckpointError) as err:
        facts_from_metadata(MODEL, None, "test", config)
    assert key in str(err.value)
    one_line(str(err.value))
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("total", [10 ** 30, -5, True, 2.5])
def test_config_hostile_index_total(total):
    with pytest.raises(CheckpointError) as err:
        facts_from_metadata(MODEL, None, "test", CONFIG, {"metadata": {"total_size": total}})
    assert "total_size" in str(err.value)


def _dir(tmp_path: Path, **files) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(CONFIG))
    for name, body in files.items():
        path = d / name
        if body == "FIFO":
            path.unlink(missing_ok=True)
            os.mkfifo(path)
        else:
            path.write_bytes(body)
    return d


LOCAL = {
    "FIFO config.json": {"config.json": "FIFO"},
    "FIFO safetensors": {"model.safetensors": "FIFO"},
    "FIFO index": {"model.safetensors.index.json": "FIFO"},
    "FIFO generation config": {"generation_config.json": "FIFO"},
    "FIFO headers file": {"safetensors_headers.json": "FIFO"},
    "config 20 MB": {"config.json": json.dumps(CONFIG).encode() + b" " * (20 * 2 ** 20)},
    "config nested 10^5": {"config.json": b"[" * 10 ** 5 + b"]" * 10 ** 5},
    "config huge int": {"config.json": b'{"num_hidden_layers": ' + b"9" * 10 ** 5 + b"}"},
    "config NaN": {"config.json": json.dumps({**CONFIG, "num_hidden_layers": float("nan")}).encode()},
    "config not UTF-8": {"config.json": b"\xff\xfe{}"},
    "index nested": {"model.safetensors.index.json": b"{\"metadata\":" * 10 ** 5},
    "index a list": {"model.safetensors.index.json": b"[]"},
    "generation nested 10^5": {"generation_config.json": b"[" * 10 ** 5 + b"]" * 10 ** 5},
    "headers file a list": {"safetensors_headers.json": b"[1, 2]"},
    "headers file huge int": {"safetensors_headers.json": b'{"a": ' + b"9" * 10 ** 5 + b"}"},
    "safetensors claims 200 MB": {"model.safetensors": _safetensors(b"{}", 200 * 10 ** 6)},
    "safetensors nested": {"model.safetensors": _safetensors(b"{\"a\":" * 10 ** 5)},
    "safetensors NaN": {"model.safetensors": _safetensors(b'{"w": {"data_offsets": [0, NaN]}}')},
}


@pytest.mark.parametrize("case", list(LOCAL))
def test_config_hostile_local_directory(case, tmp_path):
    d = _dir(tmp_path, **{k: v for k, v in LOCAL[case].items() if k != "config.json"})
    if "config.json" in LOCAL[case]:
        body = LOCAL[case]["config.json"]
        (d / "config.json").unlink()
        if body == "FIFO":
            os.mkfifo(d / "config.json")
        else:
            (d / "config.json").write_bytes(body)
    with watchdog(5):
        facts = mm.resolve_facts(MODEL, model_dir=str(d), hub=hub_settings(), cache=mm.ModelCache(tmp_path / "c"))
    assert isinstance(facts, FactsUnavailable)
    one_line(facts.reason)


REFS = {"FIFO": "FIFO", "nested": b"[" * 10 ** 5 + b"]" * 10 ** 5, "huge int": b'{"main": ' + b"9" * 10 ** 5 + b"}",
        "a list": b'["' + COMMIT.encode() + b'"]', "traversal": json.dumps({"main": "../../../etc"}).encode(),
        "not UTF-8": b"\xff{", "NaN": b'{"main": NaN}'}


@pytest.mark.parametrize("case", list(REFS))
def test_config_hostile_cache_refs(case, tmp_path):
    cache = mm.ModelCache(tmp_path / "cache")
    d = cache.model_dir(MODEL)
    d.mkdir(parents=True)
    if REFS[case] == "FIFO":
        os.mkfifo(d / "refs.json")
    else:
        (d / "refs.json").write_bytes(REFS[case])
    with watchdog(5):
        assert cache.refs(MODEL) == {}
        assert cache.commit_dir(MODEL, "main") is None


# ---- class secrets: the Hub token and the endpoint's credentials never show ----------------------

SECRET = "hf_SeCrEt_0123456789"


def _secret_file(tmp_path: Path, kind: str) -> str:
    path = tmp_path / "token"
    if kind == "FIFO":
        os.mkfifo(path)
        return str(path)
    if kind == "device":
        return "/dev/zero"
    path.write_bytes({"escape": f"{SECRET}\x1b[2J".encode(), "non-ASCII": f"{SECRET}é".encode(),
                      "two lines": f"{SECRET}\n{SECRET}".encode(), "space inside": f"{SECRET} x".encode(),
                      "NUL": f"{SECRET}\0".encode()}[kind])
    return str(path)


SECRET_FILES = ["FIFO", "device", "escape", "non-ASCII", "two lines", "space inside", "NUL"]


@pytest.mark.parametrize("kind", SECRET_FILES)
def test_secrets_hf_token_file(kind, tmp_path):
    ref = SecretRef(name="hf_token", env_var="HF_TOKEN", kind="file", ref=_secret_file(tmp_path, kind))
    with watchdog(5), pytest.raises(PlanError) as err:
        read_secrets("h", [ref], {})
    assert err.value.field == "sglang_secrets.hf_token" and SECRET not in str(err.value)
    one_line(str(err.value))


@pytest.mark.parametrize("kind", SECRET_FILES)
def test_secrets_models_fetch_token_file(kind, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    out, err = io.StringIO(), io.StringIO()
    with watchdog(8):
        code = main(["models", "fetch", MODEL, "--token-file", _secret_file(tmp_path, kind)], out, err)
    assert code == 2 and SECRET not in out.getvalue() + err.getvalue()
    one_line(err.getvalue().rstrip("\n"))


@pytest.mark.parametrize("value", [f"{SECRET}\nX-Evil: 1", f"{SECRET}é", f"{SECRET}\x7f"], ids=repr)
def test_secrets_hf_token_env_in_models_fetch(value, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HF_TOKEN", value)
    out, err = io.StringIO(), io.StringIO()
    with watchdog(8):
        assert main(["models", "fetch", MODEL], out, err) == 2
    assert SECRET not in out.getvalue() + err.getvalue()
    one_line(err.getvalue().rstrip("\n"))


def test_secrets_token_never_quoted_by_the_http_library(tmp_path):
    hub = MockHub()
    with pytest.raises((mm.MetadataError, ValueError)) as err:
        fetch(hub, tmp_path, token=SECRET + "\nX-Evil: 1")
    assert SECRET not in str(err.value)
    one_line(str(err.value))


@pytest.fixture
def sim_hub():
    from sglang_deploy.simulator.hub.repos import recorded_repos
    from sglang_deploy.simulator.hub.server import HubServer
    with HubServer(recorded_repos(only=["Qwen/Qwen3-0.6B"])) as server:
        yield server


def _with_credentials(url: str) -> str:
    return url.replace("http://", "http://user:pa55w0rd@")


def test_secrets_models_fetch_output_masks_endpoint_credentials(sim_hub, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", _with_credentials(sim_hub.url))
    out, err = io.StringIO(), io.StringIO()
    assert main(["models", "fetch", "Qwen/Qwen3-0.6B"], out, err) == 0, err.getvalue()
    assert "pa55w0rd" not in out.getvalue() + err.getvalue()


def test_secrets_models_fetch_error_masks_endpoint_credentials(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://user:pa55w0rd@127.0.0.1:{free_port()}")
    out, err = io.StringIO(), io.StringIO()
    assert main(["models", "fetch", "Qwen/Qwen3-0.6B"], out, err) == 2
    assert "pa55w0rd" not in out.getvalue() + err.getvalue()
    one_line(err.getvalue().rstrip("\n"))


def _inventory(tmp_path: Path, **extra) -> Path:
    data = {"sglang_model": "Qwen/Qwen3-0.6B", "sglang_gpus": H100, **extra}
    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = [(\"h1\", {data!r})]\n")
    return inv


@pytest.mark.parametrize("args", [[], ["--explain"], ["--json"]], ids=["text", "explain", "json"])
@pytest.mark.parametrize("hub_up", [True, False], ids=["facts", "unavailable"])
def test_secrets_plan_masks_endpoint_credentials(args, hub_up, sim_hub, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    url = _with_credentials(sim_hub.url if hub_up else f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HF_ENDPOINT", url)
    inv = _inventory(tmp_path, sglang_env={"HF_ENDPOINT": url})
    out, err = io.StringIO(), io.StringIO()
    with watchdog(30):
        main(["plan", str(inv), *args], out, err)
    text = out.getvalue() + err.getvalue()
    assert "pa55w0rd" not in text and "user:" not in text
    assert "127.0.0.1" in text


def test_secrets_plan_weights_name_the_hosts_mirror_masked(sim_hub, tmp_path, monkeypatch):
    """The Weights line names the mirror the host downloads from (its credentials masked), also
    when the credentials make sglang_env.HF_ENDPOINT a secret of the spec, never the default Hub."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)  # the facts come from the host's Hub too
    url = _with_credentials(sim_hub.url)
    inv = _inventory(tmp_path, sglang_env={"HF_ENDPOINT": url})
    out, err = io.StringIO(), io.StringIO()
    with watchdog(30):
        main(["plan", str(inv), "--json"], out, err)
    weights = json.loads(out.getvalue())[0]["weights"]
    assert f"the Hub at {sim_hub.url.replace('http://', 'http://***@')}" in weights["origin"], weights
    assert "huggingface.co" not in weights["origin"] and "pa55w0rd" not in out.getvalue() + err.getvalue()


# ---- class endpoint: facts and weights from one Hub ----------------------------------------------

class Recorder:
    """A tiny Hub that records each request's path and Authorization; ``redirect_to`` answers 302."""

    def __init__(self, redirect_to: str | None = None):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        seen = self.seen = []
        target = redirect_to

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                seen.append((self.path, self.headers.get("Authorization")))
                if target:
                    self.send_response(302)
                    self.send_header("Location", target + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"error": "no"}).encode()
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _spec(env=None, **extra):
    data = {"sglang_model": MODEL, "sglang_gpus": H100, "sglang_secrets": {"hf_token": {"env": "T"}}, **extra}
    if env is not None:
        data["sglang_env"] = {"HF_ENDPOINT": env}
    return build_spec("h1", {}, data)


def _facts(spec, environ, tmp_path):
    with watchdog(10):
        return mm.facts_for_specs([spec], environ={"T": SECRET, "XDG_CACHE_HOME": str(tmp_path), **environ},
                                  memo={})["h1"]


@pytest.mark.parametrize("host_url", ["http://other-hub.test", "http://user:pa55w0rd@other-hub.test/"])
def test_endpoint_two_hubs_refused(host_url, tmp_path):
    a = Recorder()
    try:
        facts = _facts(_spec(host_url), {"HF_ENDPOINT": a.url}, tmp_path)
    finally:
        a.close()
    assert isinstance(facts, FactsUnavailable) and facts.field == "sglang_env.HF_ENDPOINT"
    assert a.url in facts.reason and "other-hub.test" in facts.reason and "pa55w0rd" not in facts.reason
    assert a.seen == []
    with pytest.raises(PlanError) as err:
        from sglang_deploy.plan.planner import plan_host
        plan_host(_spec(host_url), facts=facts)
    assert err.value.field == "sglang_env.HF_ENDPOINT"


def test_endpoint_same_hub_after_normalising(tmp_path):
    a = Recorder()
    try:
        port = a.url.rsplit(":", 1)[1]
        facts = _facts(_spec(f"http://user:pa55w0rd@LOCALHOST:{port}/".replace("LOCALHOST", "127.0.0.1")),
                       {"HF_ENDPOINT": a.url + "/"}, tmp_path)
    finally:
        a.close()
    assert isinstance(facts, FactsUnavailable) and facts.field is None, facts
    assert a.seen and "pa55w0rd" not in facts.reason


def test_endpoint_host_only_is_the_facts_hub(tmp_path):
    a = Recorder()
    try:
        _facts(_spec(a.url), {}, tmp_path)
    finally:
        a.close()
    assert a.seen and a.seen[0][1] == f"Bearer {SECRET}"


def test_endpoint_token_not_sent_to_a_hub_it_does_not_belong_to(tmp_path):
    a = Recorder()
    try:
        _facts(_spec(None), {"HF_ENDPOINT": a.url}, tmp_path)
    finally:
        a.close()
    assert a.seen and all(auth is None for _, auth in a.seen)


def test_endpoint_cross_origin_redirect_drops_the_token(tmp_path):
    b = Recorder()
    a = Recorder(redirect_to=b.url)
    try:
        with watchdog(10), pytest.raises(mm.MetadataError) as err:
            with mm.HubClient(hub_settings(a.url, token=SECRET)) as client:
                client.model_info(MODEL, "main")
    finally:
        a.close()
        b.close()
    assert a.seen[0][1] == f"Bearer {SECRET}" and b.seen and b.seen[0][1] is None
    assert SECRET not in str(err.value)


# ---- class fuzz: the readers take any bytes and any JSON -----------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70) | st.floats()
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
KEYS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
        "intermediate_size", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "n_routed_experts", "num_experts",
        "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "layer_types",
        "full_attention_interval", "sliding_window", "max_position_embeddings", "vocab_size", "text_config",
        "quantization_config", "architectures", "model_type", "num_nextn_predict_layers", "first_k_dense_replace",
        "shared_expert_intermediate_size", "torch_dtype", "vision_config"]
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), json_values | st.integers(min_value=0, max_value=10 ** 12)),
       st.none() | json_values, json_values)
def test_fuzz_config_index_generation(overrides, index, generation):
    with watchdog(5):
        try:
            facts_from_metadata(MODEL, None, "fuzz", {**CONFIG, **overrides}, index, generation)
        except CheckpointError as exc:
            one_line(str(exc))


@FUZZ
@given(st.sampled_from(["config.json", "model.safetensors.index.json", "generation_config.json",
                        "safetensors_headers.json", "model.safetensors"]), st.binary(max_size=200))
def test_fuzz_local_files(name, body):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "config.json").write_text(json.dumps(CONFIG))
        (d / name).write_bytes(body)
        with watchdog(5):
            try:
                mm.read_directory(MODEL, d)
            except mm.MetadataError as exc:
                one_line(str(exc))


@FUZZ
@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_fuzz_safetensors_header(header):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(CONFIG))
        (Path(tmp) / "model.safetensors").write_bytes(_safetensors(header))
        with watchdog(5):
            try:
                mm.read_directory(MODEL, Path(tmp))
            except mm.MetadataError as exc:
                one_line(str(exc))


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_fuzz_cache_refs(body):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cache = mm.ModelCache(Path(tmp))
        cache.model_dir(MODEL).mkdir(parents=True)
        (cache.model_dir(MODEL) / "refs.json").write_bytes(body)
        with watchdog(5):
            refs = cache.refs(MODEL)
        assert isinstance(refs, dict) and all(isinstance(v, str) and len(v) == 40 for v in refs.values())


@FUZZ
@given(json_values, st.binary(max_size=100))
def test_fuzz_model_info_and_config(info, config):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        hub = MockHub(files={"config.json": config}, info=info if isinstance(info, dict) else json.dumps(info).encode())
        try:
            fetch(hub, Path(tmp))
        except mm.MetadataError as exc:
            one_line(str(exc))


def test_secrets_weights_resolve_commit_uses_and_masks_the_hosts_endpoint():
    """sglang_deploy/deploy/weights.resolve_commit asks the host's Hub (credentials in sglang_env.HF_ENDPOINT
    make it a secret of the spec) and never shows its credentials or the token."""
    import sglang_deploy.deploy.weights as rw
    a = Recorder()
    try:
        spec = _spec(a.url.replace("http://", "http://user:pa55w0rd@"))
        with watchdog(10), pytest.raises(PlanError) as err:
            rw.resolve_commit(spec, SECRET)
    finally:
        a.close()
    assert a.seen and err.value.field == "sglang_model_revision"
    assert "pa55w0rd" not in str(err.value) and SECRET not in str(err.value)
    one_line(str(err.value))
