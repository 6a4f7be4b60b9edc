"""A checkpoint's metadata files on the controller (model_metadata.py's sources 1 and 3): their
names and bounds, reading them from a local directory (the safetensors headers only, never the
weights) and the cache of what the Hub gave, ``<org>--<name>/<commit>/`` under
``$XDG_CACHE_HOME/sglang-deploy/models``. A file is data (sglang_deploy/untrusted.py): read
with a size, value and depth cap, and the cache writes only its fixed file names.

Each file's bounds (``BOUNDS``) rest on the largest published file of its kind, named beside
them, with margin: a bound is there to stop a hostile file, never a real checkpoint. Each bounds
the work as well as the bytes: the values a file may hold are counted in one pass over its bytes
before it is parsed (untrusted.values_bound), so what the parse builds is bounded too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from sglang_deploy.plan.modelfacts import CheckpointError, ModelFacts, facts_from_metadata
from sglang_deploy.plan.weights import COMMIT, repo_id_problem, revision_problem
from sglang_deploy.untrusted import TooLarge, UntrustedInput, load_json, printable, read_part, read_text_file

CONFIG, INDEX, GENERATION = "config.json", "model.safetensors.index.json", "generation_config.json"
TOKENIZER = "tokenizer_config.json"   # its auto_map: a tokenizer that needs the repository's code
HF_QUANT = "hf_quant_config.json"      # a ModelOpt export's quantization, where config.json names none
HEADERS_FILE = "safetensors_headers.json"   # cache only: data bytes per *.safetensors, from their headers
#: the checkpoint's own metadata files the facts are read from, each read where it is present
METADATA_FILES = (CONFIG, INDEX, GENERATION, TOKENIZER, HF_QUANT)
# the only names the cache writes in a commit folder
CACHE_FILES = (*METADATA_FILES, HEADERS_FILE)
MiB = 2 ** 20

# A safetensors file's JSON header: safetensors itself refuses one longer than its
# MAX_HEADER_SIZE, 100,000,000 bytes (safetensors/src/tensor.rs), so no checkpoint SGLang can load
# has a longer one.
MAX_HEADER = 100_000_000
# Safetensors files whose headers are read when a checkpoint has no index: deepseek-ai/DeepSeek-V3
# publishes 163 shards (moonshotai/Kimi-K3: 96), and with an index; one without an index has a
# handful.
MAX_SAFETENSORS_FILES = 1024

# model.safetensors.index.json. The largest published is moonshotai/Kimi-K3's: 59.8 MB, 497,220
# weight_map entries over 96 shards (huggingface.js PR #2319 measured it, and stopped reading
# index files whole because of it). Before it: moonshotai/Kimi-K2.5's, about 23.5 MB
# (huggingface.js PR #1954); an INT4 1T checkpoint's 207,360 expert entries (60 MoE layers x
# 384 experts x 3 projections x packed weight, scale and shape), about 20 MB, which the former
# 16 MiB bound refused; deepseek-ai/DeepSeek-V3's 91,991 tensors. About twice Kimi-K3's, in bytes
# and in values (a parse at both bounds: about 3 s and 400 MB on one core):
MAX_INDEX_BYTES = 128 * MiB
MAX_INDEX_VALUES = 2 ** 20           # 1,048,576: weight_map's entries and metadata's handful
# config.json. The largest we can name is nvidia/MiniMax-M3-NVFP4's, 3,087,083 bytes and 67,072
# values (its quantization_config names 22,422 quantized layers one by one), as
# ai-dynamo/aiconfigurator ships it (aiconfigurator_core/model_configs); a text model's runs to
# tens of KB (zai-org/GLM-5-FP8's: 35,876 bytes, tests/fixtures/checkpoints). About five times
# MiniMax-M3-NVFP4's in bytes, eight in values:
MAX_CONFIG_BYTES = 16 * MiB
MAX_CONFIG_VALUES = 2 ** 19          # 524,288
# tokenizer_config.json: a chat template, and an added_tokens_decoder of seven values per added
# token. The largest we can name is SamsungSAILMontreal/ByteCraft's, with 100,000 added tokens
# (llama.cpp PR #12473): about 18 MB and 700,000 values as transformers writes them (estimated at
# about 180 bytes a token; its size is not confirmed), past the former 16 MiB bound; a chat
# model's runs to tens or hundreds of KB. About 3.5 times ByteCraft's in bytes, three in values:
MAX_TOKENIZER_BYTES = 64 * MiB
MAX_TOKENIZER_VALUES = 2 ** 21       # 2,097,152
# generation_config.json: the generation settings config.json once held, a few hundred bytes in
# the checkpoints we know (about; none is recorded here byte for byte): config.json's bounds.
MAX_GENERATION_BYTES, MAX_GENERATION_VALUES = MAX_CONFIG_BYTES, MAX_CONFIG_VALUES


@dataclass(frozen=True)
class Bound:
    """What one metadata file may hold, and the largest published file of its kind it rests on."""

    max_bytes: int
    max_values: int
    basis: str

    def refusal(self, message: str) -> str:
        return f"{message} (bound: {self.max_bytes // MiB} MiB and {self.max_values} values; {self.basis})"


BOUNDS = {
    INDEX: Bound(MAX_INDEX_BYTES, MAX_INDEX_VALUES, "the largest published index, moonshotai/Kimi-K3's, "
                 "is 59.8 MB with 497,220 entries"),
    CONFIG: Bound(MAX_CONFIG_BYTES, MAX_CONFIG_VALUES, "the largest config.json named, nvidia/MiniMax-M3-NVFP4's, "
                  "is 3.1 MB with 67,072 values"),
    TOKENIZER: Bound(MAX_TOKENIZER_BYTES, MAX_TOKENIZER_VALUES, "the largest tokenizer_config.json named, "
                     "SamsungSAILMontreal/ByteCraft's, is about 18 MB with about 700,000 values"),
    GENERATION: Bound(MAX_GENERATION_BYTES, MAX_GENERATION_VALUES, "config.json's bounds: a real "
                      "generation_config.json holds a few hundred bytes"),
    HF_QUANT: Bound(MAX_CONFIG_BYTES, MAX_CONFIG_VALUES, "config.json's bounds: it holds what a ModelOpt "
                    "config.json's quantization_config holds, a few KB to the 3.1 MB of nvidia/MiniMax-M3-NVFP4's"),
    # written by this tool's cache: {file name: data bytes} of at most MAX_SAFETENSORS_FILES files
    HEADERS_FILE: Bound(MAX_CONFIG_BYTES, MAX_SAFETENSORS_FILES + 1, f"this tool writes it for at most "
                        f"{MAX_SAFETENSORS_FILES} files"),
}


def load_metadata(name: str, data: str | bytes, where: str) -> Any:
    """One metadata file's JSON under its name's bounds; past one, the message says what the
    bound rests on. UntrustedInput when it is refused."""
    bound = BOUNDS[name]
    try:
        # NaN and Infinity as transformers writes them: NemotronH's config.json publishes
        # "time_step_limit": [0.0, Infinity] (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8)
        return load_json(data, where, bound.max_bytes, max_values=bound.max_values, constants=True)
    except TooLarge as exc:
        raise TooLarge(bound.refusal(str(exc))) from None


class MetadataError(Exception):
    """One source could not give the facts; the message is one line naming the source."""


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "sglang-deploy" / "models"


# ---- source 1: a local directory -------------------------------------------------------------

def _json_file(model: str, path: Path) -> Any:
    """A metadata file: a regular file (a FIFO is refused, not read) within its name's BOUNDS,
    strict JSON nested at most untrusted.MAX_DEPTH deep."""
    bound = BOUNDS[path.name]
    try:
        try:
            text = read_text_file(path, path.name, bound.max_bytes)
        except TooLarge as exc:
            raise TooLarge(bound.refusal(str(exc))) from None
        return load_metadata(path.name, text, str(path))
    except UntrustedInput as exc:
        raise MetadataError(printable(str(exc))) from None


def safetensors_data_bytes(header: Mapping[str, Any]) -> int:
    """The tensor data a safetensors header describes (its data_offsets)."""
    if not isinstance(header, Mapping):
        raise MetadataError("the safetensors header is not a JSON object")
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise MetadataError(f"safetensors header entry {printable(name)[:80]!r} has no data_offsets") from None
        if not (isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool)
                and not isinstance(end, bool) and 0 <= start <= end <= 2 ** 63):
            raise MetadataError(f"safetensors header entry {printable(name)[:80]!r} has bad data_offsets")
        total += end - start
    return total


def parse_header(data: bytes, where: str) -> int:
    try:
        header = load_json(data, where, MAX_HEADER)
    except UntrustedInput as exc:
        raise MetadataError(f"the safetensors header: {printable(str(exc))}") from None
    try:
        return safetensors_data_bytes(header)
    except MetadataError as exc:
        raise MetadataError(f"{where}: {exc}") from None


def header_length(raw: bytes, where: str) -> int:
    if len(raw) < 8:
        raise MetadataError(f"{where} is too short for a safetensors file")
    (length,) = struct.unpack("<Q", raw[:8])
    if length > MAX_HEADER:
        raise MetadataError(f"{where}: a safetensors header of {length} bytes is more than the {MAX_HEADER} accepted")
    if length < 2:
        raise MetadataError(f"{where}: a safetensors header of {length} bytes cannot be a JSON object")
    return length


def _local_header_bytes(path: Path) -> int:
    """The 8-byte length and the JSON header only (a regular file; a FIFO is refused, not read)."""
    try:
        length = header_length(read_part(path, path.name, 0, 8), str(path))
        data = read_part(path, path.name, 8, length)
    except UntrustedInput as exc:
        raise MetadataError(printable(str(exc))) from None
    if len(data) < length:
        raise MetadataError(f"{path}: the safetensors header is cut short ({len(data)} of {length} bytes)")
    return parse_header(data, str(path))


def _present(path: Path) -> bool:
    """Whether ``path`` is there at all: a FIFO or a folder under a metadata file's name is then
    refused by the reader, not passed over as absent."""
    return os.path.lexists(path)


def read_directory(model: str, directory: Path, revision: str | None = None) -> ModelFacts:
    if not _present(directory / CONFIG):
        raise MetadataError(f"directory {directory} has no {CONFIG}")
    read = {name: _json_file(model, directory / name) for name in METADATA_FILES if _present(directory / name)}
    index = read.get(INDEX)
    headers = None
    if index is None:
        if _present(directory / HEADERS_FILE):
            sizes = _json_file(model, directory / HEADERS_FILE)
            if not isinstance(sizes, dict) or len(sizes) > MAX_SAFETENSORS_FILES:
                raise MetadataError(f"{directory / HEADERS_FILE} is not a mapping of at most "
                                    f"{MAX_SAFETENSORS_FILES} file names to sizes")
            headers = list(sizes.values())
        else:
            names = sorted(directory.glob("*.safetensors"))
            if len(names) > MAX_SAFETENSORS_FILES:
                raise MetadataError(f"directory {directory} holds {len(names)} *.safetensors files, more than the "
                                    f"{MAX_SAFETENSORS_FILES} whose headers are read")
            headers = [_local_header_bytes(p) for p in names]
    try:
        return facts_from_metadata(model, revision, f"directory {directory}", read[CONFIG], index, read.get(GENERATION),
                                   headers, read.get(TOKENIZER), read.get(HF_QUANT))
    except CheckpointError as exc:
        raise MetadataError(str(exc).removeprefix(f"{model}: ")) from None


# ---- source 3: the cache ---------------------------------------------------------------------

class ModelCache:
    """``<root>/<org>--<name>/<commit>/`` holds a commit's metadata files; ``refs.json`` maps
    each revision asked for to the commit it resolved to."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def model_dir(self, model: str) -> Path:
        """``<root>/<org>--<name>``: a Hub id has no '--', '..' or second '/' (repo_id_problem),
        so the folder is one name of the root's and one id's only."""
        if problem := repo_id_problem(model):
            raise MetadataError(f"{model!r}: {problem}")
        return self.root / model.replace("/", "--")

    def refs(self, model: str) -> dict[str, str]:
        """Revision -> commit; an unreadable, hostile or odd refs.json counts as none."""
        try:
            refs = load_json(read_text_file(self.model_dir(model) / "refs.json", "refs.json"), "refs.json")
        except (UntrustedInput, MetadataError):
            return {}
        if not isinstance(refs, dict):
            return {}
        return {k: v for k, v in refs.items()
                if revision_problem(k) is None and isinstance(v, str) and COMMIT.match(v)}

    def commit_dir(self, model: str, revision: str | None) -> Path | None:
        rev = revision or "main"
        if repo_id_problem(model) or revision_problem(rev):
            return None
        commit = rev if COMMIT.match(rev) else self.refs(model).get(rev)
        path = self.model_dir(model) / commit if commit else None
        return path if path is not None and (path / CONFIG).is_file() else None

    def store(self, model: str, revision: str | None, commit: str, files: Mapping[str, bytes]) -> Path:
        """Only the fixed names (CACHE_FILES) under a validated id and commit: nothing a server
        sends becomes a path."""
        if not COMMIT.match(commit) or revision_problem(revision or "main"):
            raise MetadataError(f"not a commit id: {printable(commit)[:60]!r}")
        if unknown := set(files) - set(CACHE_FILES):
            raise MetadataError(f"the cache does not store {sorted(unknown)}")
        target = self.model_dir(model) / commit
        target.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            tmp = target / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(target / name)
        refs = self.refs(model)
        refs[revision or "main"] = commit
        tmp = self.model_dir(model) / ".refs.json.tmp"
        tmp.write_text(json.dumps(refs, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.model_dir(model) / "refs.json")
        return target


def facts_at(model: str, directory: Path, commit: str | None, source: str) -> ModelFacts:
    return dataclasses.replace(read_directory(model, directory, commit), source=source)
