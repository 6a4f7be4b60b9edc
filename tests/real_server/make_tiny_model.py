"""Build a tiny, randomly initialised causal LM and a locally trained tokenizer into a folder
that ``transformers serve FOLDER`` loads offline. Nothing is downloaded.

Run with the python of the venv that has torch and transformers (not the project's):
    python make_tiny_model.py OUT_DIR [--seed 0]

The tokenizer is a byte-level BPE trained on a few sentences, wrapped in
``PreTrainedTokenizerFast`` with a role-tag chat template, so ``/v1/chat/completions``
works. The model is a 2-layer ``LlamaForCausalLM`` (about 136k parameters).

A random model readily emits special tokens, which the server drops when it decodes
(``skip_special_tokens``): the stream would then carry no text at all. So the ids that do not
decode on their own to printable ASCII, and every special token including EOS, are never
generated (zero lm_head rows and ``generation_config.suppress_tokens``): every token is one
visible text chunk, and every answer runs to ``max_tokens`` (the server refuses ``ignore_eos``).
"""

from __future__ import annotations

import argparse
import os
import sys

# Never reach for the Hub, whatever the caller's environment says.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, how are you today? I am fine, thank you.",
    "SGLang serves large language models with an OpenAI compatible API.",
    "A post-deploy check measures time to first token and throughput.",
    "Streaming responses arrive as server-sent events, one chunk at a time.",
    "user assistant system: answer briefly and politely.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000",
    "Once upon a time there was a tiny model that knew nothing at all.",
]
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer(vocab_size: int):  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        additional_special_tokens=["<|user|>", "<|assistant|>", "<|system|>"], model_max_length=2048)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def never_generated(tokenizer) -> list[int]:
    """Special tokens, and tokens that do not decode on their own to printable ASCII."""
    bad = []
    for i in range(len(tokenizer)):
        text = "" if i in tokenizer.all_special_ids else tokenizer.decode([i])
        if not text or not all(32 <= ord(c) < 127 for c in text):
            bad.append(i)
    return bad


def build_model(tokenizer, seed: int):  # -> LlamaForCausalLM
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, dtype="float32")
    model = LlamaForCausalLM(config)
    model.eval()
    bad = never_generated(tokenizer)
    with torch.no_grad():
        model.lm_head.weight[bad] = 0.0
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, max_new_tokens=32, do_sample=False, suppress_tokens=bad)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=512)
    args = ap.parse_args(argv)
    tokenizer = build_tokenizer(args.vocab_size)
    model = build_model(tokenizer, args.seed)
    os.makedirs(args.out_dir, exist_ok=True)
    tokenizer.save_pretrained(args.out_dir)
    model.save_pretrained(args.out_dir)
    print(f"{args.out_dir}: {sum(p.numel() for p in model.parameters())} parameters, vocab {len(tokenizer)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
