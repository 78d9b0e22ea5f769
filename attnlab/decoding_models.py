"""The two trained models of chapter 12: a target GPT and a smaller draft GPT.

Speculative decoding is only worth something when a small draft agrees with the large target
often; untrained models both repeat their last token, which says nothing. Training in a
notebook costs minutes on a CPU, and a model trained on another numeric path is another model
(its last bits differ after every step). So both models are trained once, by
``python -m attnlab.decoding_models`` (about 13 minutes on one core), and their weights ship with
the package in float16 (``attnlab/data/decoding-models.pt``, about 0.4 MB): every machine loads
the same numbers. The file also holds what they were trained with (``metadata()``: the tokenizer's
vocabulary, the shapes, the training settings, the torch version), and :func:`load_model` refuses
weights whose vocabulary or settings differ from this course's: retrain them then.

Both read the course's character tokenizer (``attnlab.tokenizer.course_tokenizer``) and were
trained on the course's own prose in English, German and Chinese (``corpus``), windows of 128
characters: the target has 2 layers, D = 64, 4 heads; the draft 1 layer, D = 32, 4 heads.
The target mostly recites the course's text back; the draft guesses it less well.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import pathlib
import sys
from functools import lru_cache

import torch

from .gpt import GPT, GPTConfig
from .tokenizer import corpus, course_tokenizer

WEIGHTS = pathlib.Path(__file__).resolve().parent / "data" / "decoding-models.pt"
BLOCK_SIZE = 128
SHAPES = {"target": dict(n_layer=2, n_head=4, n_embd=64), "draft": dict(n_layer=1, n_head=4, n_embd=32)}
TRAINING = dict(steps=3000, batch_size=32, window=BLOCK_SIZE, lr=5e-3, warmup=100, final_lr=0.1, seed=0)


def config_of(name: str) -> GPTConfig:
    return GPTConfig(vocab_size=course_tokenizer().vocab_size, block_size=BLOCK_SIZE, **SHAPES[name])


def metadata() -> dict:
    """What the weights were trained with, stored next to them and checked on every load: the vocabulary
    (a shifted character would shift every id after it silently), the shapes and the training settings."""
    text = "\n".join(corpus(lang) for lang in ("en", "de", "zh"))
    return {"vocabulary": list(course_tokenizer().chars), "block_size": BLOCK_SIZE, "shapes": SHAPES,
            "training": TRAINING, "torch": torch.__version__,
            "training_text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


@lru_cache(maxsize=1)
def _stored() -> dict:
    return torch.load(WEIGHTS, map_location="cpu", weights_only=True)


def check_stored(stored: dict) -> None:
    """A clear error when the shipped weights do not fit this course's tokenizer or shapes."""
    from .i18n import tr

    meta = stored.get("meta", {})
    vocabulary = course_tokenizer().chars
    if meta.get("vocabulary") != vocabulary:
        old = meta.get("vocabulary") or []
        changed = sorted(set(old) ^ set(vocabulary)) or [c for c, d in zip(old, vocabulary) if c != d]
        raise ValueError(tr("ch12.err_weights_vocabulary", stored=len(old), current=len(vocabulary),
                            changed=", ".join(repr(c) for c in changed[:5])))
    ours = {"block_size": BLOCK_SIZE, "shapes": SHAPES, "training": TRAINING}
    theirs = {key: meta.get(key) for key in ours}
    if theirs != ours:
        raise ValueError(tr("ch12.err_weights_settings", stored=theirs, current=ours))


def load_model(name: str) -> GPT:
    """The trained ``"target"`` or ``"draft"`` GPT (float32, eval mode, a fresh copy on every call)."""
    if name not in SHAPES:
        from .i18n import tr
        raise ValueError(tr("ch12.err_model_name", options=", ".join(map(repr, SHAPES)), got=repr(name)))
    check_stored(_stored())
    model = GPT(config_of(name))
    weights = {key: value.float() for key, value in _stored()[name].items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert missing == ["head.weight"] and not unexpected, (missing, unexpected)  # the head is tied to the embedding
    return model.eval()


def training_text() -> torch.Tensor:
    tokenizer = course_tokenizer()
    return torch.tensor(tokenizer.encode("\n".join(corpus(lang) for lang in ("en", "de", "zh"))))


def train_model(name: str, log=print) -> dict:
    """Train one model as the stored one was trained (one CPU thread); returns its float16 weights."""
    from .train import next_token_batch, train_step

    settings = TRAINING
    torch.manual_seed(settings["seed"])
    model = GPT(config_of(name))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.01)
    batches = torch.Generator().manual_seed(settings["seed"])
    data = training_text()
    model.train()
    for step in range(settings["steps"]):
        warm = min(1.0, (step + 1) / settings["warmup"])
        cosine = 0.5 * (1 + math.cos(math.pi * step / settings["steps"]))
        for group in optimizer.param_groups:  # linear warm-up, then cosine down to final_lr x lr
            group["lr"] = settings["lr"] * warm * (settings["final_lr"] + (1 - settings["final_lr"]) * cosine)
        loss = train_step(model, optimizer, *next_token_batch(data, settings["window"], settings["batch_size"], batches))
        if step % 250 == 0 or step == settings["steps"] - 1:
            log(f"{name} step {step}: loss {loss:.3f}")
    model.eval()
    return {key: value.half() for key, value in model.state_dict().items() if key != "head.weight"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train chapter 12's target and draft GPT and store their weights.")
    parser.add_argument("--out", default=str(WEIGHTS), help="where to write the weights")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    weights = {name: train_model(name, log=lambda line: print(line, flush=True)) for name in SHAPES}
    torch.save({**weights, "meta": metadata()}, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
