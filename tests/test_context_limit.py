"""The context a model allows, derived as SGLang derives it (sglang srt/utils/hf_transformers/common.py
get_context_length): the first positions key, times rope_scaling's factor unless rope_scaling names
original_max_position_embeddings or rope_type llama3; 2048 when no key is present."""

import pytest

from sglang_deploy.plan.constraints import context_max_positions
from sglang_deploy.plan.modelfacts import CheckpointError, context_length_as_sglang

CASES = [
    ({"max_position_embeddings": 4096}, 4096),
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, 8192),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 4}}, 16384),
    # Llama 3.1: rope_type llama3 keeps the positions as they are
    ({"max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}, 131072),
    # YaRN with the original length named: factor 1
    ({"max_position_embeddings": 32768,
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 32768),
    # the first key present wins, even when smaller than max_position_embeddings
    ({"seq_length": 8192, "max_position_embeddings": 32768}, 8192),
    ({"max_sequence_length": 1000, "seq_length": 8192}, 1000),
    ({"rope_scaling": None, "max_position_embeddings": 2048}, 2048),
    ({}, 2048),
]


@pytest.mark.parametrize("config, expected", CASES)
def test_derived_as_sglang(config, expected):
    assert context_length_as_sglang("m", "config.json", config) == expected


@pytest.mark.parametrize("config", [
    {"max_position_embeddings": 4096, "rope_scaling": {"factor": "2"}},
    {"max_position_embeddings": 4096, "rope_scaling": {"factor": 0}},
    {"max_position_embeddings": 4096, "rope_scaling": {"factor": 1e9}},
    {"max_position_embeddings": 4096, "rope_scaling": {"factor": True}},
    {"seq_length": "8192"},
    {"seq_length": 0},
    {"max_position_embeddings": 2 ** 40},
])
def test_a_bad_value_is_refused_naming_it(config):
    with pytest.raises(CheckpointError, match="config.json"):
        context_length_as_sglang("m", "config.json", config)


def test_the_constraint_allows_what_the_rope_factor_allows(monkeypatch):
    from dataclasses import replace

    from tests.recorded_facts import QWEN3_32B

    scaled = replace(QWEN3_32B, derived_context_length=QWEN3_32B.max_position_embeddings * 4)

    class View:
        context_length = QWEN3_32B.max_position_embeddings * 2

    assert context_max_positions(QWEN3_32B, View(), {}) is not None  # longer than the positions alone
    assert context_max_positions(scaled, View(), {}) is None  # within positions x factor, as SGLang allows
    View.context_length = QWEN3_32B.max_position_embeddings * 4 + 1
    said = context_max_positions(scaled, View(), {})
    assert said is not None and "rope_scaling factor" in said
