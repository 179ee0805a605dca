"""WordPiece tokenizer: training, loading (``tokenizer.json`` or a bare ``vocab.txt``), word starts, offsets.

A thin wrapper around a HF `tokenizers.Tokenizer` set up exactly like BERT's (cased by default):
BERT normalizer (control characters cleaned, Chinese characters spaced, *no* lower-casing and *no*
accent stripping for a cased vocabulary), BERT pre-tokenizer (split on whitespace and on every
punctuation character), WordPiece with ``##`` continuations and ``[UNK]`` for words it cannot cover.

`encode` adds no special tokens: the data pipeline and the tasks place ``[CLS]``/``[SEP]`` themselves
(padding or truncation saved in a ``tokenizer.json`` is switched off on load).

Training. Upstream's WordPiece trainer breaks ties in hash-map order, so two runs on the same text
give different vocabularies (huggingface/tokenizers#1794). `train_tokenizer` uses the same algorithm
with fixed tie-breaking (`learn_wordpiece_vocab`): byte-identical files for the same input, in every
process and run (docs/tokenizer.md).

Word starts. Masking needs whole words (SpanBERT §3.1 "we always sample a sequence of complete
words"). As in BERT's whole-word masking, a token starts a word iff it does not begin with ``##``;
a whole word is such a token plus its ``##`` continuations. Because BERT's pre-tokenizer splits off
punctuation, every punctuation mark is a word of its own: ``"Broncos'"`` is the two words
``Broncos`` and ``'``, and ``"3.5"`` is ``3``, ``.``, ``5``.

Byte-level BPE (ModernBERT's and the two-tower model's vocabularies) has no ``##``: a word's leading
space is part of its first token (``Ġman``). There a token starts a word iff it begins with a space
(or another whitespace byte), begins with an ASCII punctuation mark (a word of its own, as in BERT),
or is the first token of an encoded text; ``man`` after ``Ġhu`` continues ``human``.
"""

from __future__ import annotations

import copy
import gzip
import heapq
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

from spanbert import folders, vocab_match
from spanbert.config import ArgumentParser
from spanbert.distributed import eprint0, print0
from spanbert.errors import DataError, SpanBertError
from spanbert.hub import resolve_model
from spanbert.model_inputs import model_inputs
from spanbert.utils import atomic_files, check_output, input_paths, progress_bar

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD, UNK, CLS, SEP, MASK]
DEFAULT_MAX_LENGTH = 512
"""BERT's position count: what ``tok(..., truncation=True)`` cuts to when the folder names no other."""


@dataclass
class Encoded:
    """The tokens of one text (no special tokens added)."""

    ids: np.ndarray
    """(N,) int32 token ids."""
    offsets: np.ndarray
    """(N, 2) int64 character [start, end) of each token in the text (in its word for `encode_words`)."""
    word_starts: np.ndarray
    """(N,) bool: True where the token starts a whole word (it does not begin with ``##``)."""
    word_ids: np.ndarray | None = None
    """(N,) int64 index of the input word of each token (`encode_words` only)."""

    def __len__(self) -> int:
        return len(self.ids)


def _hf():
    return tokenizers


def _build_pipeline(tk, lowercase: bool) -> None:
    """BERT's normalizer / pre-tokenizer / decoder / post-processor on a HF tokenizer object."""
    t = _hf()
    # Cased BERT keeps accents; uncased BERT lower-cases and strips them (strip_accents follows lowercase).
    tk.normalizer = t.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tk.pre_tokenizer = t.pre_tokenizers.BertPreTokenizer()
    tk.decoder = t.decoders.WordPiece(prefix="##")


def _add_post_processor(tk) -> None:
    """[CLS] A [SEP] (B [SEP]) for tools that read tokenizer.json (AutoTokenizer); `encode` never uses it."""
    t = _hf()
    cls_id, sep_id = tk.token_to_id(CLS), tk.token_to_id(SEP)
    tk.post_processor = t.processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}",
        pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None


def _read_json_object(path: Path) -> dict:
    """A JSON file holding one object, or a DataError naming the file (and the line of a syntax error)."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(path, f"found byte 0x{raw[e.start]:02x} that is not UTF-8, expected UTF-8 JSON", line=line) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"found invalid JSON ({e.msg}), expected a JSON object", line=e.lineno) from None
    if not isinstance(data, dict):
        raise DataError(path, f"found a JSON {type(data).__name__}, expected a JSON object")
    return data


class Tokenizer:
    """A cased (or, if told, uncased) BERT WordPiece tokenizer.

    Build it with `Tokenizer.from_dir`, `load_tokenizer` or `train_tokenizer`.
    """

    def __init__(
        self,
        hf_tokenizer,
        do_lower_case: bool = False,
        source: str | os.PathLike | None = None,
        model_max_length: int = DEFAULT_MAX_LENGTH,
    ):
        self.hf = hf_tokenizer
        """The wrapped `tokenizers.Tokenizer`."""
        self.do_lower_case = do_lower_case
        missing = [s for s in SPECIAL_TOKENS if hf_tokenizer.token_to_id(s) is None]
        if missing:
            found = f"a vocabulary without the BERT special token(s) {missing}"
            expected = f"expected all of {SPECIAL_TOKENS}"
            if source is not None:  # the file it came from (`from_dir`)
                raise DataError(source, f"found {found}; {expected}")
            raise SpanBertError(f"found {found}; {expected}")
        vocab = hf_tokenizer.get_vocab(with_added_tokens=True)
        if source is not None and not set(vocab) - set(SPECIAL_TOKENS):
            # every word would be [UNK]: a model trained through it learns nothing (issue 58.1)
            raise DataError(
                source, f"found a vocabulary of only the {len(vocab)} special tokens, expected word pieces as well "
                "(train one with `spanbert tokenizer train`)"
            )
        self.pad_id: int = hf_tokenizer.token_to_id(PAD)
        self.unk_id: int = hf_tokenizer.token_to_id(UNK)
        self.cls_id: int = hf_tokenizer.token_to_id(CLS)
        self.sep_id: int = hf_tokenizer.token_to_id(SEP)
        self.mask_id: int = hf_tokenizer.token_to_id(MASK)
        self.mid_id: int = self.sep_id
        """The token between the two segments of a pair. A task frames its inputs as ``cls_id a mid_id b
        sep_id`` (one segment: ``cls_id a sep_id``); BERT's framing has ``[SEP]`` twice, a model family with
        other markers gives its own through `framed` (the two-tower model: ``<s> a <sep> b </s>``)."""
        self.vocab_size: int = max(vocab.values()) + 1
        self.model_max_length: int = model_max_length
        """The longest input ``tok(..., truncation=True)`` cuts to when no ``max_length`` is given: the
        ``model_max_length`` of the folder's tokenizer_config.json (the position count of the model saved
        beside it), else 512."""
        self._byte_level = _is_byte_level(hf_tokenizer)
        # (V,) bool: ids of continuation pieces; lets `word_starts_of(ids)` be one lookup.
        self._is_continuation = np.zeros(self.vocab_size, dtype=bool)
        specials = set(SPECIAL_TOKENS)
        for token, i in vocab.items():
            if self._byte_level:
                self._is_continuation[i] = bool(token) and token not in specials and token[0] not in _BYTE_LEVEL_STARTS
            elif token.startswith("##"):
                self._is_continuation[i] = True

    # ------------------------------------------------------------------ loading and saving
    @classmethod
    def from_dir(cls, path: str | os.PathLike, do_lower_case: bool | None = None) -> Tokenizer:
        """Load ``tokenizer.json`` if present, else ``vocab.txt`` (cased unless ``tokenizer_config.json``
        or ``do_lower_case`` says otherwise). ``path`` may also be the vocab file itself."""
        t = _hf()
        path = Path(path)
        if path.is_file():
            vocab_file, directory = path, path.parent
            json_file = None
        else:
            directory = path
            json_file = path / "tokenizer.json"
            vocab_file = path / "vocab.txt"
        config_lower, config = False, {}
        config_file = directory / "tokenizer_config.json"
        if config_file.is_file():
            config = _read_json_object(config_file)
            config_lower = bool(config.get("do_lower_case", False))
        lower = config_lower if do_lower_case is None else do_lower_case
        limit = config.get("model_max_length")
        # transformers writes a huge sentinel (1e30) for "no limit": keep 512, BERT's positions, then
        max_length = int(limit) if isinstance(limit, int) and 0 < limit <= 1_000_000 else DEFAULT_MAX_LENGTH
        if json_file is not None and json_file.is_file():
            try:
                hf_tok = t.Tokenizer.from_file(str(json_file))
            except Exception as e:  # tokenizers raises plain Exception subclasses
                raise DataError(json_file, f"found {_first_line(e)}, expected a HF tokenizers file") from None
            # §10.14: published tokenizer.json files often ship padding/truncation switched on (to 512, say);
            # `encode` would then pad every text to that length and silently cut longer ones there.
            hf_tok.no_padding()
            hf_tok.no_truncation()
            if do_lower_case is not None and do_lower_case != config_lower:
                _build_pipeline(hf_tok, lower)
            return cls(hf_tok, lower, source=json_file, model_max_length=max_length)
        if not vocab_file.is_file():
            raise SpanBertError(
                f"no tokenizer in {path}: expected tokenizer.json or vocab.txt "
                "(train one with `spanbert tokenizer train --corpus FILES --vocab-size N --output_dir DIR`)"
            )
        vocab: dict[str, int] = {}
        lines = _read_bytes(vocab_file).split(b"\n")
        if lines and not lines[-1]:  # the file ends with a newline: no token after it
            lines.pop()
        for i, raw in enumerate(lines):
            try:
                token = raw.decode("utf-8").rstrip("\r")
            except UnicodeDecodeError as e:
                raise DataError(
                    vocab_file, f"found byte 0x{raw[e.start]:02x} that is not UTF-8, expected UTF-8 text", line=i + 1
                ) from None
            if token in vocab:  # keep the first id, as BERT's own loader does for duplicates
                continue
            vocab[token] = i
        if not vocab:
            raise DataError(vocab_file, "empty vocabulary; expected one WordPiece token per line")
        hf_tok = t.Tokenizer(t.models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##"))
        hf_tok.add_special_tokens([s for s in SPECIAL_TOKENS if s in vocab])
        _build_pipeline(hf_tok, lower)
        if CLS in vocab and SEP in vocab:
            _add_post_processor(hf_tok)
        return cls(hf_tok, lower, source=vocab_file, model_max_length=max_length)

    def framed(self, start: int, mid: int, end: int) -> Tokenizer:
        """A copy whose ``cls_id``, ``mid_id`` and ``sep_id`` are a model family's start, between-segment
        and end markers (`spanbert.families`); the vocabulary and the encoding are shared, not copied."""
        out = copy.copy(self)
        out.cls_id, out.mid_id, out.sep_id = int(start), int(mid), int(end)
        return out

    @property
    def byte_level(self) -> bool:
        """True for a byte-level BPE tokenizer (ModernBERT's, the two-tower model's): a word's leading
        space is part of its first token (``Ġman``), so words must be encoded as they appear in running text."""
        return self._byte_level

    def save(self, directory: str | os.PathLike, model_max_length: int | None = None) -> None:
        """Write vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json.

        `transformers.AutoTokenizer.from_pretrained(directory)` then gives a BERT tokenizer with the same
        ids and the same casing (``do_lower_case`` is written explicitly so cased stays cased). A BPE or
        word-level vocabulary (the two-tower model's) is no WordPiece vocabulary: its tokenizer_config.json
        says ``PreTrainedTokenizerFast``, so transformers reads tokenizer.json instead of vocab.txt.
        ``model_max_length``: the longest input of the model saved beside it (its position count;
        `spanbert.checkpoints.save_checkpoint` passes it), 512 when not given.
        """
        directory = Path(directory)
        max_length = int(model_max_length) if model_max_length else 512
        # the files as one: a full disk replaces none of them (an earlier vocabulary stays whole)
        with atomic_files(directory) as open_file:
            if type(self.hf.model).__name__ != "WordPiece":
                return self._save_fast(open_file, max_length)
            vocab = self.hf.get_vocab(with_added_tokens=True)
            by_id = [""] * self.vocab_size
            for token, i in vocab.items():
                by_id[i] = token
            with open_file("vocab.txt", encoding="utf-8") as f:
                f.write("".join(t + "\n" for t in by_id))
            with open_file("tokenizer.json", encoding="utf-8") as f:
                f.write(self.hf.to_str())
            config = {
                "tokenizer_class": "BertTokenizer",
                "do_lower_case": self.do_lower_case,
                "strip_accents": None if self.do_lower_case else False,
                "tokenize_chinese_chars": True,
                "model_max_length": max_length,
                "unk_token": UNK,
                "sep_token": SEP,
                "pad_token": PAD,
                "cls_token": CLS,
                "mask_token": MASK,
            }
            with open_file("tokenizer_config.json", encoding="utf-8") as f:
                json.dump(config, f, indent=2)
            specials = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS, "mask_token": MASK}
            with open_file("special_tokens_map.json", encoding="utf-8") as f:
                json.dump(specials, f, indent=2)

    def _save_fast(self, open_file: Callable[..., Any], max_length: int = 512) -> None:
        with open_file("tokenizer.json", encoding="utf-8") as f:
            f.write(self.hf.to_str())
        names = {"unk_token": UNK, "pad_token": PAD}
        for key, token in (("bos_token", "<s>"), ("eos_token", "</s>"), ("sep_token", "<sep>")):
            if self.hf.token_to_id(token) is not None:
                names[key] = token
        if "sep_token" not in names:  # BERT's framing (ModernBERT's vocabulary): [CLS] a [SEP]
            names.update(cls_token=CLS, sep_token=SEP, mask_token=MASK)
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length, **names}
        with open_file("tokenizer_config.json", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        with open_file("special_tokens_map.json", encoding="utf-8") as f:
            json.dump(names, f, indent=2)

    # ------------------------------------------------------------------ vocabulary
    def token_to_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.hf.id_to_token(int(i))

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.hf.id_to_token(int(i)) for i in ids]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        """Token -> id, added tokens included."""
        return self.hf.get_vocab(with_added_tokens=True)

    def with_added_tokens(self, tokens: Sequence[str]) -> Tokenizer:
        """A copy with ``tokens`` added as special tokens (never split, never lower-cased), e.g. the entity
        markers of relation extraction; existing tokens keep their ids. This tokenizer is unchanged."""
        t = _hf()
        hf_tok = t.Tokenizer.from_str(self.hf.to_str())
        hf_tok.add_special_tokens(list(tokens))
        out = Tokenizer(hf_tok, self.do_lower_case, model_max_length=self.model_max_length)
        out.cls_id, out.mid_id, out.sep_id = self.cls_id, self.mid_id, self.sep_id  # the family's framing stays
        return out

    def word_starts_of(self, ids: np.ndarray) -> np.ndarray:
        """(N,) bool word-start flags of token ids (True unless the token begins with ``##``)."""
        return ~self._is_continuation[np.asarray(ids)]

    def special_ids(self) -> np.ndarray:
        """Ids of the special tokens ([PAD], [UNK], [CLS], [SEP], [MASK])."""
        return np.array([self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id], dtype=np.int64)

    # ------------------------------------------------------------------ encoding
    def _wrap(self, enc, with_word_ids: bool = False) -> Encoded:
        ids = np.asarray(enc.ids, dtype=np.int32)  # (N,)
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)  # (N, 2)
        word_ids = None
        if with_word_ids:
            word_ids = np.asarray([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
        starts = self.word_starts_of(ids)
        if len(starts):
            starts[0] = True  # a text's first token starts a word (byte-level: it has no leading space)
            if word_ids is not None:  # pre-split words: each one's first token, whatever its bytes
                starts[1:] |= (word_ids[1:] != word_ids[:-1]) & (word_ids[1:] >= 0)
        return Encoded(ids, offsets, starts, word_ids)

    def encode(self, text: str) -> Encoded:
        """Tokenize one text; no special tokens. Offsets are character positions in ``text``."""
        return self._wrap(self.hf.encode(text, add_special_tokens=False))

    def encode_batch(self, texts: Sequence[str]) -> list[Encoded]:
        """`encode` for many texts at once (HF tokenizers parallelises over them)."""
        return [self._wrap(e) for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def encode_words(self, words: Sequence[str]) -> Encoded:
        """Tokenize pre-split words (NER, coreference, TACRED); ``word_ids`` maps tokens to word indices.

        Every word yields at least one token: a word that would vanish (empty, only whitespace or
        control characters) becomes ``[UNK]``, so labels on words always have a token to sit on.
        Offsets are character positions inside each word.
        """
        safe = [w if w.strip() else UNK for w in words]
        out = self._encode_words(safe)
        if len(words):
            present = np.zeros(len(words), dtype=bool)
            present[out.word_ids[out.word_ids >= 0]] = True
            if not present.all():  # e.g. a word made only of characters the normalizer removes
                out = self._encode_words([w if ok else UNK for w, ok in zip(safe, present)])
        return out

    def _encode_words(self, words: list[str]) -> Encoded:
        if not self.byte_level:
            return self._wrap(self.hf.encode(words, is_pretokenized=True, add_special_tokens=False), True)
        # Byte-level BPE: every word after the first is encoded with the space that precedes it in running
        # text (``the man`` -> ``the Ġman``, as RoBERTa/fairseq encode); alone, ``man`` would become ids the
        # model never saw in pre-training. Offsets stay positions inside each word (the space is not in it).
        spaced = [w if i == 0 or w in SPECIAL_TOKENS else " " + w for i, w in enumerate(words)]
        out = self._wrap(self.hf.encode(spaced, is_pretokenized=True, add_special_tokens=False), True)
        shift = np.asarray([0 if i == 0 or w in SPECIAL_TOKENS else 1 for i, w in enumerate(words)], dtype=np.int64)
        if len(out.ids):
            s = shift[np.maximum(out.word_ids, 0)][:, None] * (out.word_ids >= 0)[:, None]
            out.offsets[:] = np.maximum(out.offsets - s, 0)
        return out

    # tok(texts, text_pair, padding=..., truncation=..., max_length=..., return_tensors="pt"): the model
    # inputs a transformers tokenizer gives (`spanbert.model_inputs.model_inputs`, whose first argument is this)
    __call__ = model_inputs

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, do_lower_case={self.do_lower_case})"


def load_tokenizer_for(model_dir: str | Path, tokenizer_dir: str | Path | None = None):
    """The tokenizer saved with a checkpoint, or the one given; a clear error when there is none. A hub
    name that is no local folder is read from its hub snapshot (`spanbert.hub.resolve_model`)."""

    model_dir = resolve_model(model_dir)
    if not Path(model_dir).is_dir():
        raise SpanBertError(f"{model_dir}: model folder not found")
    source = Path(tokenizer_dir) if tokenizer_dir else Path(model_dir)
    if source.is_file() and source.name.endswith(".txt"):
        source = source.parent
    if not ((source / "tokenizer.json").exists() or (source / "vocab.txt").exists()):
        if tokenizer_dir:
            raise SpanBertError(f"{source}: no tokenizer.json or vocab.txt")
        raise SpanBertError(
            f"{model_dir}: the checkpoint has no vocabulary (tokenizer.json or vocab.txt). The official "
            f"SpanBERT release ships none: it uses the cased BERT vocabulary (bert-base-cased / bert-large-cased, "
            f"28,996 tokens). Pass --tokenizer DIR pointing at a folder with that vocab.txt."
        )
    tok = Tokenizer.from_dir(source)
    if tokenizer_dir and os.path.realpath(source) != os.path.realpath(model_dir):
        check_given_tokenizer(model_dir, tok, source)
    return tok


def check_given_tokenizer(model_dir: str | os.PathLike, tok: Tokenizer, source: str | os.PathLike) -> None:
    """A ``--tokenizer`` given for the checkpoint ``model_dir`` must be its vocabulary (issue 58.1): where the
    checkpoint has a tokenizer of its own, a token ``tok`` gives another id is refused (its embedding rows
    are learned per id); a casing that disagrees with it, or with ``tok``'s own vocabulary, is a warning."""
    own_dir = Path(model_dir)
    own = None
    if (own_dir / "tokenizer.json").is_file() or (own_dir / "vocab.txt").is_file():
        own = Tokenizer.from_dir(own_dir)
        vocab_match.check_same_ids(
            own.get_vocab(), tok.get_vocab(), "--tokenizer", str(source), f"{model_dir}'s own tokenizer",
            "the one its embedding rows were learned under: drop --tokenizer to use it",
        )  # fmt: skip
    warning = vocab_match.casing_warning(tok, f"{source} (--tokenizer)", own, str(model_dir))
    if warning:
        eprint0(warning)


def load_tokenizer(path: str | os.PathLike, do_lower_case: bool | None = None) -> Tokenizer:
    """`Tokenizer.from_dir` with a clear error when the path does not exist."""
    p = Path(path)
    if not p.exists():
        raise SpanBertError(f"tokenizer path {p} does not exist; expected a directory with tokenizer.json or vocab.txt")
    return Tokenizer.from_dir(p, do_lower_case=do_lower_case)


_BYTE_LEVEL_STARTS = frozenset("ĠĊĉčĂ") | frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
"""First characters of a byte-level token that starts a word: whitespace bytes as the byte-level
alphabet writes them (space Ġ, newline Ċ, tab ĉ, carriage return č, vertical tab Ă) and ASCII
punctuation, which BERT's pre-tokenizer makes a word of its own."""


def _is_byte_level(hf_tokenizer) -> bool:
    """A byte-level pre-tokenizer, alone or in a sequence (ModernBERT's tokenizer.json has a sequence)."""
    pre = hf_tokenizer.pre_tokenizer
    spec = json.loads(pre.__getstate__()) if pre is not None else {}  # its own JSON, not the whole vocabulary's
    parts = spec.get("pretokenizers", [spec]) if spec.get("type") == "Sequence" else [spec]
    return any(isinstance(p, dict) and p.get("type") == "ByteLevel" for p in parts)


def byte_level_bpe(lines: Iterable[str], vocab_size: int, specials: Sequence[str]):
    """A byte-level BPE `tokenizers.Tokenizer` trained on ``lines`` (NFC-normalised, no prefix space,
    every byte in the alphabet), ``specials`` first: ids 0..len(specials)-1."""
    t = _hf()
    hf = t.Tokenizer(t.models.BPE(unk_token=UNK))
    hf.normalizer = t.normalizers.NFC()
    hf.pre_tokenizer = t.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = t.decoders.ByteLevel()
    trainer = t.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        show_progress=False,
        initial_alphabet=t.pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(lines, trainer=trainer)
    hf.add_special_tokens(list(specials))
    if MASK in specials:
        # [MASK] takes the space before it (lstrip), as ModernBERT's and RoBERTa's mask tokens do: a mask
        # stands for a whole word with its leading space (``Ġcapital``), so "the [MASK] of" must be
        # ``Ġthe [MASK] Ġof``, not ``Ġthe Ġ [MASK] Ġof`` with a space token pre-training never showed
        hf.add_special_tokens([t.AddedToken(MASK, lstrip=True, special=True, normalized=False)])
    return hf


def train_byte_level_tokenizer(
    files: Sequence[str | os.PathLike] | None,
    vocab_size: int,
    output_dir: str | os.PathLike | None = None,
    texts: Iterable[str] | None = None,
) -> Tokenizer:
    """A byte-level BPE vocabulary with BERT's five special tokens ([PAD] = 0, [UNK], [CLS], [SEP],
    [MASK]) and BERT's framing (``[CLS] a [SEP] (b [SEP])``): the kind of vocabulary ModernBERT uses
    (OLMo's byte-level BPE with BERT's special tokens), trained on the corpus. HF's BPE trainer is not
    bit-reproducible across processes (docs/tokenizer.md): pre-training trains it once, on rank 0."""
    if vocab_size < len(SPECIAL_TOKENS) + 257:
        raise SpanBertError(
            f"--vocab_size: found {vocab_size}, expected at least {len(SPECIAL_TOKENS) + 257} "
            f"({len(SPECIAL_TOKENS)} special tokens + the 256 bytes + 1 merge)"
        )
    if output_dir is not None:
        check_output(output_dir, folder=True, ours=lambda d: (d / "tokenizer.json").is_file())
    if texts is None:
        lines = list(_iter_training_lines(corpus_files(files or [])))
        if not lines:
            raise SpanBertError(f"{', '.join(map(str, files or []))}: found no text, expected a corpus to train the vocabulary on")
    else:
        lines = list(texts)
    hf = byte_level_bpe(lines, vocab_size, SPECIAL_TOKENS)
    _add_post_processor(hf)
    tok = Tokenizer(hf)
    if output_dir is not None:
        tok.save(output_dir)
    return tok


# ---------------------------------------------------------------------- training
TEXT_SUFFIXES = (".txt", ".txt.gz", ".text", ".jsonl", ".jsonl.gz")


def corpus_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expand directories into their text files (``*.txt``, ``*.jsonl``, optionally ``.gz``; sorted, hidden
    files skipped, so a README or a manifest beside the data is not read); check every path exists.
    A file named explicitly is always used."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(
                f for f in p.rglob("*") if f.is_file() and not f.name.startswith(".") and f.name.endswith(TEXT_SUFFIXES)
            )
        elif p.is_file():
            out.append(p)
        else:
            raise SpanBertError(f"corpus path {p} does not exist")
    if not out:
        raise SpanBertError(
            "the corpus is empty: no files ("
            + ", ".join(f"*{x}" for x in TEXT_SUFFIXES)
            + ") found in "
            + ", ".join(map(str, paths))
        )
    return out


# A line longer than this is read in pieces (`iter_lines`' max_bytes): preprocessing and vocabulary
# training hold at most this much of a line, so their memory does not grow with the line length.
MAX_LINE_BYTES = 100_000


def iter_lines(path: Path, max_bytes: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text without the newline) of a UTF-8 text file, gzipped if it ends in ``.gz``.

    Decodes line by line so that a byte that is not UTF-8 is reported with its file and line.
    With ``max_bytes``, memory stays bounded whatever the line length: a longer line comes in pieces
    of at most ``max_bytes`` bytes (at least 4, one character), several pairs with the same line
    number, each cut before a space or tab (`cut_before_space`); pieces that are only whitespace are
    left out, and a long line that is only whitespace comes as one blank line.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        f = opener(path, "rb")
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        lineno = 0
        try:
            if max_bytes is None:
                for lineno, raw in enumerate(f, 1):
                    yield lineno, _decode_line(path, lineno, raw).rstrip("\n").rstrip("\r")
                return
            if max_bytes < 1:
                raise ValueError(f"max_bytes={max_bytes}; expected at least 1")
            limit = max(max_bytes, 4)  # a piece holds at least one whole character (up to 4 bytes)
            pending = b""  # the rest of a long line after the piece last yielded
            open_line = False  # the line of the piece last yielded goes on
            column = 0  # byte offset of ``pending`` in its line
            shown = False  # a piece of the current line was yielded
            while True:
                raw = pending + f.readline(limit + 1 - len(pending))  # never more than limit + 1 bytes
                if not raw:
                    break
                if not open_line:
                    lineno, column, shown = lineno + 1, 0, False
                whole = not open_line
                if raw.endswith(b"\n") or len(raw) <= limit:  # the rest of the line (or of the file)
                    piece, pending, open_line = raw, b"", False
                else:
                    cut = cut_before_space(raw, limit)
                    piece, pending, open_line = raw[:cut], raw[cut:], True
                whole = whole and not open_line
                text = _decode_line(path, lineno, piece, column)
                column += len(piece)
                if not open_line:
                    text = text.rstrip("\n").rstrip("\r")
                if whole or text.strip():
                    yield lineno, text
                    shown = True
                elif not open_line and not shown:
                    yield lineno, ""
        except (OSError, EOFError) as e:  # truncated or corrupt gzip
            raise DataError(path, f"cannot read after line {lineno}: {e}") from None


def _decode_line(path: Path, lineno: int, raw: bytes, column: int = 0) -> str:
    """``raw`` (bytes ``column``.. of line ``lineno``) as text, or a DataError naming the byte and its column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            path,
            f"not UTF-8 text: byte 0x{raw[e.start]:02x} at column {column + e.start + 1}; expected UTF-8",
            line=lineno,
        ) from None


def cut_before_space(raw: bytes, limit: int, start: int = 0) -> int:
    """Where to end the piece of ``raw`` (UTF-8) that starts at ``start``, when more than ``limit`` bytes
    follow: ``raw[start:cut]`` has at most ``limit`` bytes and ``raw[cut:]`` starts with the last space
    or tab that allows, so both the WordPiece and a byte-level BPE pre-tokenizer (whose ``Ġ`` marks the
    space before a word) see the same words as in the whole line. Without a space or tab in reach, a
    word is cut at the last character boundary (only a word of ``limit`` bytes or more is)."""
    end = start + limit
    cut = max(raw.rfind(b" ", start + 1, end + 1), raw.rfind(b"\t", start + 1, end + 1))
    if cut > start:
        return cut
    cut = end
    while cut > start and raw[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte is no character boundary
        cut -= 1
    if cut == start:  # a limit shorter than the first character: take the whole character
        cut = start + 1
        while cut < len(raw) and raw[cut] & 0xC0 == 0x80:
            cut += 1
    return cut


def parse_jsonl_text(path: Path, lineno: int, line: str) -> str:
    """The ``text`` field of one JSONL line, or a DataError naming file and line."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(
            path, f"not valid JSON ({e.msg} at column {e.colno}); expected one JSON object per line", line=lineno
        ) from None
    if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
        found = f"keys {sorted(rec)}" if isinstance(rec, dict) else type(rec).__name__
        raise DataError(path, f"expected a JSON object with a string field 'text', found {found}", line=lineno)
    return rec["text"]


def is_jsonl(path: Path) -> bool:
    return path.name.endswith((".jsonl", ".jsonl.gz"))


def _iter_training_lines(files: list[Path]) -> Iterator[str]:
    for path in files:
        jsonl = is_jsonl(path)
        # a long plain-text line comes in pieces cut before a space: the same words, bounded memory
        for lineno, line in iter_lines(path, None if jsonl else MAX_LINE_BYTES):
            if not line.strip():
                continue
            yield parse_jsonl_text(path, lineno, line) if jsonl else line


def count_words(texts: Iterable[str], normalizer, pre_tokenizer) -> Counter[str]:
    """How often each pre-tokenized word occurs in ``texts`` (after BERT normalization and splitting).

    BERT's pre-tokenizer splits on whitespace, then isolates every punctuation character. Splitting
    on whitespace first in Python (`str.split`, C speed; after normalization, Python's whitespace and
    the pre-tokenizer's agree because the normalizer has already mapped every other space character
    to " " and removed control characters) and pre-tokenizing each distinct chunk once gives the same
    counts ~3x faster than pre-tokenizing every line.
    """
    chunks: Counter[str] = Counter()
    for text in texts:
        chunks.update(normalizer.normalize_str(text).split())
    words: Counter[str] = Counter()
    for chunk, n in chunks.items():
        for word, _ in pre_tokenizer.pre_tokenize_str(chunk):
            words[word] += n
    return words


def learn_wordpiece_vocab(
    word_counts: dict[str, int],
    vocab_size: int,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    prefix: str = "##",
    show_progress: bool = False,
) -> list[str]:
    """A WordPiece vocabulary (tokens in id order) learned from word counts, deterministically.

    The algorithm of HF `tokenizers`' WordPieceTrainer (BPE merges over characters, with ``##`` on
    every piece that does not start a word), with every tie broken by a fixed rule, because upstream
    breaks ties in hash-map order, which changes with every process (huggingface/tokenizers#1794):
    - alphabet: the ``limit_alphabet`` most frequent characters, ties by code point; characters
      outside it are dropped from the words (as upstream);
    - ids: special tokens, the alphabet by code point, its ``##`` forms by code point, then the merged
      pieces in merge order;
    - merges: the most frequent adjacent pair; ties go to the smaller left id, then the smaller right
      id (upstream's rule, over ids that are now the same in every run). Merging stops at
      ``vocab_size`` tokens or when the best pair occurs fewer than ``min_frequency`` times.
    """
    words = sorted(word_counts)  # a fixed order for everything that follows
    char_counts: Counter[str] = Counter()
    for w in words:
        n = word_counts[w]
        for ch in w:
            char_counts[ch] += n
    alphabet = sorted(sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))[:limit_alphabet])
    vocab: list[str] = []
    ids: dict[str, int] = {}

    def add(token: str) -> int:
        if token not in ids:
            ids[token] = len(vocab)
            vocab.append(token)
        return ids[token]

    for token in [*special_tokens, *alphabet]:
        add(token)
    kept = set(alphabet)
    for ch in sorted({ch for w in words for ch in w[1:] if ch in kept}):
        add(prefix + ch)
    shift = max(len(vocab), vocab_size).bit_length()  # a pair (a, b) is the one int a << shift | b
    low = (1 << shift) - 1
    seqs: list[list[int]] = []  # each word as token ids
    freqs: list[int] = []
    for w in words:
        seq = [ids[ch if k == 0 else prefix + ch] for k, ch in enumerate(w) if ch in kept]
        if len(seq) > 1:
            seqs.append(seq)
            freqs.append(word_counts[w])
    pair_count: dict[int, int] = {}
    where: dict[int, set[int]] = {}  # pair -> indices of the words that contain it
    for i, seq in enumerate(seqs):
        n = freqs[i]
        for a, b in zip(seq, seq[1:]):
            pair = a << shift | b
            pair_count[pair] = pair_count.get(pair, 0) + n
            where.setdefault(pair, set()).add(i)
    # max-heap on (count, -pair): the smallest pair wins a tie. Entries go stale when a count drops;
    # a popped entry whose count is out of date is pushed back with the current one.
    heap = [(-n, pair) for pair, n in pair_count.items()]
    heapq.heapify(heap)
    bar = None
    if show_progress:

        bar = progress_bar(total=max(0, vocab_size - len(vocab)), desc="merges", unit=" tokens", dynamic_ncols=True)
    while len(vocab) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        n = pair_count.get(pair, 0)
        if n != -neg:
            if n > 0:
                heapq.heappush(heap, (-n, pair))
            continue
        if n < min_frequency:
            break
        a, b = pair >> shift, pair & low
        size = len(vocab)
        new = add(vocab[a] + vocab[b][len(prefix) :])
        if bar is not None:
            bar.update(len(vocab) - size)
        touched: set[int] = set()  # pairs with `new`: the only ones whose counts grow

        def bump(old: int, now: int, i: int, f: int) -> None:
            pair_count[old] -= f
            pair_count[now] = pair_count.get(now, 0) + f
            where.setdefault(now, set()).add(i)
            touched.add(now)  # noqa: B023 - called only inside this iteration

        for i in where.pop(pair):  # int sets iterate in a fixed order (no hash seed)
            seq, f = seqs[i], freqs[i]
            out: list[int] = []
            j, length = 0, len(seq)
            while True:  # left to right, as upstream: "a a a" with pair (a, a) gives "aa a"
                try:
                    k = seq.index(a, j)
                except ValueError:
                    out += seq[j:]
                    break
                if k + 1 < length and seq[k + 1] == b:
                    out += seq[j:k]
                    if out:  # (prev, a) becomes (prev, new); prev may be the previous merge's `new`
                        bump(out[-1] << shift | a, out[-1] << shift | new, i, f)
                    if k + 2 < length:  # (b, next) becomes (new, next)
                        bump(b << shift | seq[k + 2], new << shift | seq[k + 2], i, f)
                    out.append(new)
                    j = k + 2
                else:
                    out += seq[j : k + 1]
                    j = k + 1
            if len(out) < length:  # (a word listed for a pair it no longer has is left alone)
                seqs[i] = out
        pair_count.pop(pair, None)
        for q in touched:
            if pair_count.get(q, 0) > 0:
                heapq.heappush(heap, (-pair_count[q], q))
    if bar is not None:
        bar.close()
    return vocab


def count_corpus_words(files: Sequence[str | os.PathLike], lowercase: bool = False) -> Counter[str]:
    """The words `train_tokenizer` learns a vocabulary from, with their counts: every pre-tokenized word of
    the corpus files. Its first pass, on its own: a study's dry run times it and counts the distinct words
    (what the second pass, `learn_wordpiece_vocab`, takes time in proportion to)."""
    pipeline = _hf().Tokenizer(_hf().models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    _build_pipeline(pipeline, lowercase)
    return count_words(_iter_training_lines(corpus_files(files)), pipeline.normalizer, pipeline.pre_tokenizer)


def train_tokenizer(
    files: Sequence[str | os.PathLike] | None,
    vocab_size: int,
    output_dir: str | os.PathLike | None = None,
    texts: Iterable[str] | None = None,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    lowercase: bool = False,
    show_progress: bool = True,
) -> Tokenizer:
    """Train a cased WordPiece vocabulary with BERT's special tokens ([PAD]=0, [UNK], [CLS], [SEP], [MASK]).

    ``files``: text (blank-line separated or one document per line), ``.jsonl`` (``text`` field),
    optionally gzipped, or directories of them. ``texts``: strings to train on in memory instead (tests).
    ``limit_alphabet`` keeps the 1,000 most frequent characters, as Google's BERT vocabulary builder.
    Saves to ``output_dir`` when given (a file there, or a folder of other files, is refused first).

    Deterministic: the same text, size and options give byte-identical files in every process and
    run (`learn_wordpiece_vocab`; upstream's trainer does not, see docs/tokenizer.md).
    ``show_progress``: progress bars (lines read, merges) on stderr.
    """
    t = _hf()
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise SpanBertError(f"vocab_size={vocab_size} is too small; expected at least {len(SPECIAL_TOKENS) + 1}")
    if output_dir is not None:  # before any work: an earlier vocabulary may be replaced, nothing else
        check_output(output_dir, folder=True, ours=lambda d: (d / "vocab.txt").is_file())
    pipeline = t.Tokenizer(t.models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    _build_pipeline(pipeline, lowercase)
    if texts is None:
        if not files:
            raise SpanBertError("train_tokenizer needs corpus files or texts")
        paths = corpus_files(files)
        total = sum(p.stat().st_size for p in paths)
        lines: Iterable[str] = _iter_training_lines(paths)
        if show_progress:

            lines = progress_bar(lines, desc="counting words", unit=" lines", dynamic_ncols=True)
        counts = count_words(lines, pipeline.normalizer, pipeline.pre_tokenizer)
        if not counts:
            raise SpanBertError(f"the corpus ({len(paths)} files, {total} bytes) has no text to train on")
    else:
        counts = count_words(texts, pipeline.normalizer, pipeline.pre_tokenizer)
    vocab = learn_wordpiece_vocab(
        counts, vocab_size, SPECIAL_TOKENS, min_frequency, limit_alphabet, show_progress=show_progress and texts is None
    )
    hf_tok = t.Tokenizer(
        t.models.WordPiece(vocab={tok: i for i, tok in enumerate(vocab)}, unk_token=UNK, continuing_subword_prefix="##")
    )
    _build_pipeline(hf_tok, lowercase)
    hf_tok.add_special_tokens(SPECIAL_TOKENS)
    _add_post_processor(hf_tok)
    tok = Tokenizer(hf_tok, lowercase)
    if output_dir is not None:
        tok.save(output_dir)
    return tok


# ---------------------------------------------------------------------- CLI
def main(argv: list[str], prog: str = "spanbert tokenizer") -> int:
    """``spanbert tokenizer train --corpus FILES --vocab-size N --output_dir DIR``."""
    parser = ArgumentParser(prog=prog, description="Train a cased WordPiece vocabulary (BERT special tokens).")
    sub = parser.add_subparsers(dest="action", metavar="train", required=True)
    p = sub.add_parser("train", help="train a WordPiece vocabulary on a text corpus",
                       description="Train a cased WordPiece vocabulary with BERT's special tokens on a text corpus "
                       "(the same text and size give byte-identical files); `spanbert preprocess --tokenizer DIR` "
                       "then tokenizes the corpus with it.")  # fmt: skip
    p.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        metavar="PATH",
        help="text / .jsonl files (optionally .gz) or directories of them",
    )
    p.add_argument(
        "--vocab-size",
        "--vocab_size",
        dest="vocab_size",
        type=int,
        default=28996,
        help="vocabulary size including the special tokens (default: 28996, cased BERT)",
    )
    p.add_argument(
        "--output_dir",
        "--output-dir",
        dest="output_dir",
        required=True,
        help="directory for vocab.txt, tokenizer.json and tokenizer_config.json",
    )
    p.add_argument(
        "--min-frequency",
        "--min_frequency",
        dest="min_frequency",
        type=int,
        default=2,
        help="least count of a merged piece (default: 2)",
    )
    p.add_argument(
        "--limit-alphabet",
        "--limit_alphabet",
        dest="limit_alphabet",
        type=int,
        default=1000,
        help="keep this many most frequent characters (default: 1000, as Google's BERT)",
    )
    p.add_argument("--lowercase", action="store_true", help="train an uncased vocabulary (default: cased)")
    p.add_argument("--disable_tqdm", "--disable-tqdm", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    train_tokenizer_folder(args.corpus, args.vocab_size, args.output_dir, min_frequency=args.min_frequency,
                           limit_alphabet=args.limit_alphabet, lowercase=args.lowercase,
                           progress=not args.disable_tqdm, prog=f"{prog} train")  # fmt: skip
    return 0


def train_tokenizer_folder(
    corpus: Sequence[str | os.PathLike], vocab_size: int, output_dir: str | os.PathLike, *, min_frequency: int = 2,
    limit_alphabet: int = 1000, lowercase: bool = False, progress: bool = True, prog: str = "spanbert tokenizer train",
) -> Tokenizer:  # fmt: skip
    """What ``spanbert tokenizer train`` does (``prog`` names it in the folder's manifest), from Python: the
    vocabulary trained on ``corpus`` (`train_tokenizer`) into a folder of its own, refused first when that
    folder is another command's or lies in the corpus; returns the tokenizer."""
    # before any work: a vocabulary folder of this command's (its manifest) or a new one, apart from the
    # corpus (inside a corpus folder it would be read back as a document), then held while it is written
    check_output(output_dir, folder=True, owner="tokenizer", inputs=input_paths({"corpus": list(corpus)}, ("corpus",)))
    with folders.Claim(output_dir, "tokenizer", prog):
        tok = train_tokenizer(corpus, vocab_size, output_dir, min_frequency=min_frequency,
                              limit_alphabet=limit_alphabet, lowercase=lowercase, show_progress=progress)  # fmt: skip
    print0(f"wrote {tok.vocab_size} tokens to {output_dir} (vocab.txt, tokenizer.json, tokenizer_config.json)")
    return tok
