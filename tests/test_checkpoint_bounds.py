"""The bounds on a checkpoint's metadata files (sglang_deploy/deploy/model_files.py BOUNDS) admit
the largest published file of each kind and refuse one past them, naming the file and the bound.

Each kind gets a generated file shaped like the real one at its bound, read as a plan reads it
(a local directory, or the Hub for the index), whose facts come out right, and the same file
one byte or one value longer, refused in one line naming the file, the bound and what the bound
rests on. The largest case, an index like moonshotai/Kimi-K3's padded to 128 MiB, is read in
a second or two: no time is asserted; the parse is linear in bytes and bounded in values.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sglang_deploy.deploy import model_files as mf
from sglang_deploy.deploy.model_files import (BOUNDS, CONFIG, GENERATION, INDEX, MAX_CONFIG_BYTES, MAX_CONFIG_VALUES,
                                              MAX_HEADER, MAX_INDEX_BYTES, MAX_INDEX_VALUES, MAX_TOKENIZER_BYTES,
                                              MAX_TOKENIZER_VALUES, TOKENIZER, MetadataError, ModelCache,
                                              read_directory)
from sglang_deploy.deploy.model_hub import HubClient, HubSettings, fetch_from_hub
from sglang_deploy.untrusted import MAX_METADATA_BYTES, values_bound

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"
KIMI = "moonshotai/Kimi-K2.5"          # a 1T INT4 MoE: the shape of the indexes below
COMMIT = "c" * 40
TOTAL = 594_000_000_000               # the indexes' metadata.total_size
OLD_BOUND = 16 * 2 ** 20              # what every metadata file was held to before
CHUNK = 1 << 20                       # what the Hub stand-in below sends at a time


def config_text() -> str:
    return (FIXTURES / "moonshotai--Kimi-K2.5" / CONFIG).read_text()


def index_text(entries: int, shards: int) -> str:
    """An index as transformers writes it (indent 2) of ``entries`` weight_map entries named as an
    INT4 MoE's are: 61 layers, 384 experts a layer, three projections an expert, each a packed
    weight, a scale and a shape."""
    per_layer = -(-entries // 61)
    tails = [f'mlp.experts.{j // 9 % 384}.{("gate_proj", "up_proj", "down_proj")[j // 3 % 3]}.'
             f'{("weight_packed", "weight_scale", "weight_shape")[j % 3]}": "' for j in range(per_layer)]
    lines: list[str] = []
    for layer in range(61):
        head = f'    "language_model.model.layers.{layer}.'
        shard = f'model-{layer * shards // 61 + 1:05d}-of-{shards:05d}.safetensors"'
        lines += [head + tail + shard for tail in tails[:entries - len(lines)]]
    return ('{\n  "metadata": {\n    "total_size": %d\n  },\n  "weight_map": {\n%s\n  }\n}\n'
            % (TOTAL, ",\n".join(lines)))


def tokenizer_text(added: int) -> str:
    """tokenizer_config.json as transformers writes it for a tokenizer with ``added`` added tokens."""
    entry = ('    "%d": {\n      "content": "<|byte_%d|>",\n      "lstrip": false,\n      "normalized": false,\n'
             '      "rstrip": false,\n      "single_word": false,\n      "special": false\n    }')
    decoder = ",\n".join([entry % (151_665 + i, i) for i in range(added)])
    return ('{\n  "added_tokens_decoder": {\n%s\n  },\n  "bos_token": null,\n  "eos_token": "<|im_end|>",\n'
            '  "model_max_length": 32768,\n  "tokenizer_class": "Qwen2Tokenizer"\n}\n' % decoder)


def padded(text: str, size: int) -> bytes:
    """``text`` with trailing whitespace (still the same JSON) to exactly ``size`` bytes."""
    data = text.encode()
    assert len(data) <= size
    return data + b" " * (size - len(data))


def with_values(text: str, values: int) -> str:
    """``text`` (a JSON object) with a list of zeros added so that its values_bound is exactly
    ``values`` (so are the values it holds, but for a comma or bracket inside a string)."""
    zeros = values - values_bound(text) - 1   # the new key's list is one value, each zero one more
    assert zeros >= 1
    body = text.rstrip()
    assert body.endswith("}")
    out = body[:-1].rstrip() + ',\n  "padding": [' + "0," * (zeros - 1) + "0]\n}\n"
    assert values_bound(out) == values
    return out


def checkpoint(tmp_path: Path, **files: str | bytes) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    files.setdefault(CONFIG, config_text())
    for name, body in files.items():
        (d / name).write_bytes(body.encode() if isinstance(body, str) else body)
    return d


def refused(d: Path, name: str, bound: str) -> str:
    with pytest.raises(MetadataError) as err:
        read_directory(KIMI, d)
    message = str(err.value)
    assert "\n" not in message
    assert name in message and bound in message, message
    assert BOUNDS[name].basis in message, message
    return message


def grow(d: Path, name: str) -> None:
    with open(d / name, "ab") as fh:
        fh.write(b" ")


# ---- model.safetensors.index.json -------------------------------------------------------------

def test_an_int4_1t_index_of_207360_entries_is_read(tmp_path):
    """The issue's checkpoint: 207,360 weight_map entries, about 20 MB, which the former 16 MiB
    bound refused."""
    text = index_text(207_360, 64)
    assert len(text.encode()) > OLD_BOUND
    facts = read_directory(KIMI, checkpoint(tmp_path, **{INDEX: text}))
    assert facts.total_weight_bytes == TOTAL


def test_an_index_like_kimi_k3_at_the_byte_bound_is_read_and_one_byte_more_is_refused(tmp_path):
    """moonshotai/Kimi-K3's shape (497,220 entries over 96 shards, about 56 MB here), padded to
    exactly the bound: read, its total_size right; a byte more: refused before it is read."""
    d = checkpoint(tmp_path, **{INDEX: padded(index_text(497_220, 96), MAX_INDEX_BYTES)})
    assert read_directory(KIMI, d).total_weight_bytes == TOTAL
    grow(d, INDEX)
    message = refused(d, INDEX, str(MAX_INDEX_BYTES))
    assert "moonshotai/Kimi-K3" in message and "128 MiB" in message


def test_an_index_at_the_value_bound_is_read_and_one_entry_more_is_refused(tmp_path):
    """1,048,576 values (root, metadata, total_size, weight_map and its entries): read; one entry
    more: refused before anything is parsed, naming the file and the bound."""
    entries = MAX_INDEX_VALUES - 4
    head = '{"metadata": {"total_size": %d}, "weight_map": {' % TOTAL
    text = head + ", ".join(map('"%x": "s"'.__mod__, range(entries))) + "}}"
    assert values_bound(text) == MAX_INDEX_VALUES and len(text) < MAX_INDEX_BYTES
    d = checkpoint(tmp_path, **{INDEX: text})
    assert read_directory(KIMI, d).total_weight_bytes == TOTAL
    (d / INDEX).write_text(text[:-2] + ', "one more": "s"}}')
    refused(d, INDEX, f"more than the {MAX_INDEX_VALUES} accepted")


class _Hub:
    """The Hub's model info and file routes over httpx.MockTransport (no socket), files in memory."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.sent = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/models/"):
            info = {"sha": COMMIT, "siblings": [{"rfilename": n} for n in self.files]}
            return httpx.Response(200, content=json.dumps(info).encode())
        name = request.url.path.rsplit("/", 1)[-1]
        if name not in self.files:
            return httpx.Response(404, headers={"X-Error-Code": "EntryNotFound"})
        body = self.files[name]

        def chunks():
            for i in range(0, len(body), CHUNK):
                self.sent += len(body[i:i + CHUNK])
                yield body[i:i + CHUNK]
        return httpx.Response(200, stream=_Stream(chunks()))

    def fetch(self, tmp_path: Path):
        client = httpx.Client(transport=httpx.MockTransport(self.handler))
        with HubClient(HubSettings(endpoint="http://hub.invalid"), client) as hub:
            return fetch_from_hub(KIMI, None, hub, ModelCache(tmp_path / "cache"))


class _Stream(httpx.SyncByteStream):
    def __init__(self, chunks):
        self.chunks = chunks

    def __iter__(self):
        yield from self.chunks


def test_the_hub_serves_an_int4_1t_index_and_one_past_the_bound_is_not_read_whole(tmp_path):
    text = index_text(207_360, 64).encode()
    facts = _Hub({CONFIG: config_text().encode(), INDEX: text}).fetch(tmp_path / "a")
    assert facts.total_weight_bytes == TOTAL and (tmp_path / "a" / "cache").is_dir()

    hub = _Hub({CONFIG: config_text().encode(), INDEX: padded(text.decode(), MAX_INDEX_BYTES + 1)})
    with pytest.raises(MetadataError) as err:
        hub.fetch(tmp_path / "b")
    message = str(err.value)
    assert INDEX in message and str(MAX_INDEX_BYTES) in message and "moonshotai/Kimi-K3" in message, message
    assert hub.sent <= MAX_INDEX_BYTES + 2 * CHUNK
    assert not (tmp_path / "b" / "cache").exists() or not any((tmp_path / "b" / "cache").rglob(INDEX))


# ---- config.json and generation_config.json ---------------------------------------------------

def minimax_like_config() -> str:
    """The Kimi-K2.5 config with a quantization_config naming 22,422 quantized layers one by one,
    as nvidia/MiniMax-M3-NVFP4's does (3.1 MB, 67,072 values: 21,888 NVFP4 layers of three
    values, 534 MXFP8 ones of two)."""
    config = json.loads(config_text())
    names = [f"language_model.model.layers.{i // 360}.block_sparse_moe.experts.{i % 360 // 3}."
             f"{('w1', 'w2', 'w3')[i % 3]}" for i in range(21_888)]
    layers = {n: {"group_size": 16, "quant_algo": "NVFP4"} for n in names}
    layers.update({f"language_model.model.layers.{i // 9}.self_attn.{('q', 'k', 'v', 'o')[i % 4]}_proj.{i}":
                   {"quant_algo": "MXFP8"} for i in range(534)})
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                                     "kv_cache_quant_algo": None, "quantized_layers": layers,
                                     "exclude_modules": ["lm_head"]}
    return json.dumps(config, indent=2) + "\n"


def test_a_config_like_the_largest_named_at_the_byte_bound_is_read_and_one_byte_more_is_refused(tmp_path):
    text = minimax_like_config()
    assert 66_000 < values_bound(text) < MAX_CONFIG_VALUES and len(text) > 2_500_000
    d = checkpoint(tmp_path, **{CONFIG: padded(text, MAX_CONFIG_BYTES), INDEX: index_text(9, 1)})
    facts = read_directory(KIMI, d)
    # MIXED_PRECISION with NVFP4 layers: SGLang runs it as modelopt_mixed (_parse_modelopt_quant_config)
    assert facts.quantization is not None and facts.quantization.method == "modelopt_mixed"
    assert facts.total_weight_bytes == TOTAL
    grow(d, CONFIG)
    refused(d, CONFIG, str(MAX_CONFIG_BYTES))


@pytest.mark.parametrize("name", [CONFIG, GENERATION])
def test_a_config_at_the_value_bound_is_read_and_one_value_more_is_refused(tmp_path, name):
    base = config_text() if name == CONFIG else '{\n  "do_sample": true,\n  "temperature": 1.0\n}\n'
    text = with_values(base, MAX_CONFIG_VALUES)
    d = checkpoint(tmp_path, **{name: text, INDEX: index_text(9, 1)})
    assert read_directory(KIMI, d).total_weight_bytes == TOTAL
    (d / name).write_text(with_values(base, MAX_CONFIG_VALUES + 1))
    refused(d, name, f"more than the {MAX_CONFIG_VALUES} accepted")


def test_a_generation_config_at_the_byte_bound_is_read_and_one_byte_more_is_refused(tmp_path):
    d = checkpoint(tmp_path, **{GENERATION: padded('{"temperature": 0.6, "top_p": 0.95}', MAX_CONFIG_BYTES),
                                INDEX: index_text(9, 1)})
    assert read_directory(KIMI, d).total_weight_bytes == TOTAL
    grow(d, GENERATION)
    refused(d, GENERATION, str(MAX_CONFIG_BYTES))


# ---- tokenizer_config.json --------------------------------------------------------------------

def test_a_tokenizer_config_of_100000_added_tokens_is_read(tmp_path):
    """SamsungSAILMontreal/ByteCraft's shape: 100,000 added tokens, past the former 16 MiB bound."""
    text = tokenizer_text(100_000)
    assert len(text.encode()) > OLD_BOUND and values_bound(text) > 700_000
    facts = read_directory(KIMI, checkpoint(tmp_path, **{TOKENIZER: text, INDEX: index_text(9, 1)}))
    assert facts.total_weight_bytes == TOTAL


def test_a_tokenizer_config_at_the_byte_bound_is_read_and_one_byte_more_is_refused(tmp_path):
    d = checkpoint(tmp_path, **{TOKENIZER: padded(tokenizer_text(1000), MAX_TOKENIZER_BYTES),
                                INDEX: index_text(9, 1)})
    assert read_directory(KIMI, d).total_weight_bytes == TOTAL
    grow(d, TOKENIZER)
    message = refused(d, TOKENIZER, str(MAX_TOKENIZER_BYTES))
    assert "64 MiB" in message


def test_a_tokenizer_config_at_the_value_bound_is_read_and_one_value_more_is_refused(tmp_path):
    base = tokenizer_text(10)
    d = checkpoint(tmp_path, **{TOKENIZER: with_values(base, MAX_TOKENIZER_VALUES), INDEX: index_text(9, 1)})
    assert read_directory(KIMI, d).total_weight_bytes == TOTAL
    (d / TOKENIZER).write_text(with_values(base, MAX_TOKENIZER_VALUES + 1))
    refused(d, TOKENIZER, f"more than the {MAX_TOKENIZER_VALUES} accepted")


# ---- the rest ---------------------------------------------------------------------------------

def test_a_safetensors_header_is_bounded_as_safetensors_bounds_it():
    """safetensors refuses a header longer than 100,000,000 bytes (its MAX_HEADER_SIZE): the
    length prefix is checked before anything else is read."""
    assert MAX_HEADER == 100_000_000
    assert mf.header_length(MAX_HEADER.to_bytes(8, "little"), "model.safetensors") == MAX_HEADER
    with pytest.raises(MetadataError, match=r"model\.safetensors: .*100000001 bytes .* 100000000 accepted"):
        mf.header_length((MAX_HEADER + 1).to_bytes(8, "little"), "model.safetensors")


def test_every_checkpoint_file_has_a_bound_and_none_is_below_the_old_one():
    assert set(BOUNDS) == set(mf.CACHE_FILES)
    assert all(b.max_bytes >= MAX_METADATA_BYTES and b.basis for b in BOUNDS.values())
    assert BOUNDS[INDEX].max_bytes == MAX_INDEX_BYTES and BOUNDS[TOKENIZER].max_bytes == MAX_TOKENIZER_BYTES

