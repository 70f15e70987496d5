"""The simulated target's tokenizer: a small byte-level BPE the project trains itself.

Nothing is downloaded. The training text is generated here from fixed word lists with a
fixed seed, so the same ``tokenizer.json`` comes out on every machine. Model folders made by
``backend.sim.models.make_target_dir`` carry it as ``tokenizer.json`` + ``tokenizer_config.json``
(with a Llama-3 style chat template), so ``transformers.AutoTokenizer`` and SGLang's benchmark
client load it from the path ``/model_info`` reports; the simulated server counts prompt and
completion tokens with it and streams real token ids.
"""

from __future__ import annotations

import json
import math
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from backend.readcap import TOKENIZER_JSON_MAX, TooLarge, read_text_whole

__all__ = ["SimTokenizer", "build_tokenizer_json", "write_tokenizer", "GEN_WORDS", "CHAT_TEMPLATE"]

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot_id|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, EOS, START_HEADER, END_HEADER, EOT]
VOCAB_SIZE = 6000
SEED = 20260907

# Words the simulated model "generates": each one (with its leading space) is one token.
GEN_WORDS = ("the model draft token layer speculative decoding accepts verifies hidden state "
             "target server batch cache throughput latency request stream prompt answer "
             "Paris river city north south of and in a to is was with for on by it this that "
             "from as be are at an which can more each step fast slow data training results "
             "we use our first second third value check run time").split()
_PUNCT = (".", ",")

# Common English words for the rest of the training text, so ordinary prompts tokenize
# into realistic pieces rather than single bytes.
_COMMON = ("a about after again all also always an and answer any are around as ask at away back "
           "be because been before being below best better between big both but by call came can "
           "change children city close come could country day did different do does done down during "
           "each early earth end enough even every example eye face family far father feel few find "
           "first follow food for form found four from get give go good great group grow had hand "
           "hard has have he head hear help her here high him his home house how idea if important "
           "in into is it its just keep kind know land large last late learn leave left let life "
           "light like line list little live long look made make man many may me mean men might "
           "mile miss more most mother move much must my name near need never new next night no "
           "not now number of off often old on once one only open or other our out over own page "
           "paper part people picture place plant play point put question quick read real right "
           "river run said same saw say school sea second see seem sentence set she should show "
           "side since small so some something sometimes song soon sound spell stand start state "
           "still stop story study such sun take talk tell than that the their them then there "
           "these they thing think this those thought three through time to together too took tree "
           "try turn two under until up us use very walk want was watch water way we well went "
           "were what when where which while white who why will with without word work world would "
           "write year you young your system user assistant question please explain summarize "
           "write code function python data model training evaluate compare describe list reason "
           "because therefore however example result value number table file error output input "
           "capital France Paris London Berlin Tokyo Rome country language English history science "
           "hello thanks sure yes today tomorrow computer program program math problem solve story").split()


def _corpus(seed: int = SEED) -> list[str]:
    """Deterministic training text: sentences of common and generated words, digits, chat markup."""
    rng = random.Random(seed)
    words = list(_COMMON) + list(GEN_WORDS)
    lines: list[str] = []
    for _ in range(6000):
        n = rng.randint(4, 18)
        sent = [rng.choice(words) for _ in range(n)]
        if rng.random() < 0.5:
            sent[0] = sent[0].capitalize()
        text = " ".join(sent)
        if rng.random() < 0.2:
            text += f" {rng.randint(0, 9999)}"
        text += rng.choice([".", ".", ",", "?", "!", ":"])
        lines.append(text)
    # Every generated word many times with its leading space, so " word" becomes one token.
    for _ in range(400):
        lines.append(" " + " ".join(GEN_WORDS) + " . ,")
    for role in ("system", "user", "assistant"):
        lines.extend([f"{role}\n\n"] * 50)
    return lines


def build_tokenizer_json(seed: int = SEED, vocab_size: int = VOCAB_SIZE) -> str:
    """Train the byte-level BPE on the generated text; the serialized tokenizer.json."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    bos = tok.token_to_id(BOS)
    # Like Llama 3: encoding a plain prompt puts BOS first; chat text carries its own.
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos)])
    return tok.to_str()


_CACHE: dict[tuple[int, int], str] = {}
_CACHE_LOCK = threading.Lock()
_BUILTIN: dict[str, "SimTokenizer"] = {}


def _cached_json() -> str:
    key = (SEED, VOCAB_SIZE)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = build_tokenizer_json(*key)
        return _CACHE[key]


CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def tokenizer_config(model_max_length: int = 131072) -> dict[str, Any]:
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


def write_tokenizer(path: str | Path, model_max_length: int = 131072) -> Path:
    """Write tokenizer.json and tokenizer_config.json into a model folder; returns the folder."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.json").write_text(_cached_json(), encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(model_max_length), indent=2) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class TokenPiece:
    id: int
    text: str


class SimTokenizer:
    """Encode, decode and chat-format with the simulated tokenizer (no transformers needed)."""

    load_error: str | None = None

    def __init__(self, tok: Tokenizer, source: str) -> None:
        self.tok = tok
        self.source = source
        self.bos_id = self._special(BOS)
        self.eos_id = self._special(EOT)
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        pieces: list[TokenPiece] = []
        for w in GEN_WORDS:
            ids = tok.encode(" " + w, add_special_tokens=False).ids
            if len(ids) == 1:
                pieces.append(TokenPiece(ids[0], " " + w))
        self.words = pieces
        self.punct = [TokenPiece(i, p) for p in _PUNCT
                      if len(ids := tok.encode(p, add_special_tokens=False).ids) == 1 for i in ids]
        if not self.words:
            raise ValueError(f"{source}: no single-token words to generate from")

    def _special(self, text: str) -> int:
        i = self.tok.token_to_id(text)
        if i is None:
            raise ValueError(f"{self.source}: special token {text} missing")
        return i

    @classmethod
    def builtin(cls) -> "SimTokenizer":
        with _CACHE_LOCK:
            cached = _BUILTIN.get("tok")
        if cached is None:
            cached = cls(Tokenizer.from_str(_cached_json()), "built-in simulated tokenizer")
            with _CACHE_LOCK:
                _BUILTIN["tok"] = cached
        return cached

    @classmethod
    def load(cls, folder: str | None) -> "SimTokenizer":
        """The folder's tokenizer.json, else the built-in one; ``load_error`` says why a
        tokenizer.json that is there could not be used."""
        error = None
        if folder:
            p = Path(folder) / "tokenizer.json"
            if p.is_file():
                try:
                    return cls(Tokenizer.from_str(read_text_whole(p, TOKENIZER_JSON_MAX, "a tokenizer")), str(p))
                except TooLarge as e:  # names the file and the cap itself
                    error = str(e)
                except Exception as e:  # noqa: BLE001 - any unusable file: say why, count with ours
                    error = f"{p}: {e}"
        tok = cls.builtin()
        return tok if error is None else tok.with_error(error)

    def with_error(self, error: str) -> "SimTokenizer":
        other = SimTokenizer.__new__(SimTokenizer)
        other.__dict__.update(self.__dict__)
        other.load_error = error
        return other

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def token_text(self, i: int) -> str:
        """What one token reads as (byte-level pieces decoded; partial UTF-8 as replacement)."""
        return self.tok.decode([i], skip_special_tokens=False)

    def prompt_ids(self, text: str) -> list[int]:
        """A completion prompt as the server tokenizes it: BOS then the text."""
        return self.tok.encode(text, add_special_tokens=True).ids

    def chat_text(self, messages: list[dict[str, Any]]) -> str:
        """The chat template rendered (the same text tokenizer_config.json's template gives)."""
        parts = [BOS]
        for m in messages:
            parts.append(f"{START_HEADER}{m.get('role', 'user')}{END_HEADER}\n\n{_content(m.get('content'))}{EOT}")
        parts.append(f"{START_HEADER}assistant{END_HEADER}\n\n")
        return "".join(parts)

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return self.tok.encode(self.chat_text(messages), add_special_tokens=False).ids


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(str(p.get("text", "")) for p in c if isinstance(p, dict) and p.get("type", "text") == "text")
    return ""


def logprob_of(p: float) -> float:
    return math.log(max(1e-12, p))
