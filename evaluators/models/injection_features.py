"""Features of one text chunk for the injection probe, shared by training and inference.

A chunk is described by its MiniLM embedding (what it is about and how it is
phrased), the rule scanner's verdict (overall risk and one indicator per rule
family: the rules are precise, the probe learns how much to trust each family)
and a few lexical cues that embeddings blur: who is addressed (second person,
the assistant by name), imperatives, talk of secrets and instructions, links,
role markers and floods. Everything is regex/arithmetic over the chunk, so it is
deterministic and costs microseconds next to the embedding. Training and
inference must call :func:`chunk_features` the same way, which is why it
lives here and not in either caller.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragpulse.evaluators.injection_engine import FAMILIES, scan_text

EMBEDDING_DIM = 384  # all-MiniLM-L6-v2
WINDOW_TOKENS = 64
"""Pieces are packed to this many tokens, not the encoder's 254: an attack sentence in a
long paragraph dominates a 64-token window but is diluted into the topic of a full chunk.
The total number of tokens embedded is about the same (attention is even cheaper)."""

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)[\"'(\[*#>\-\s]*(\w+)", re.UNICODE)
_SECOND_PERSON = re.compile(
    r"\b(?:you|your|yours|yourself|you're|youre|u|vous|votre|vos|tu|toi|ton|ta|tes|usted|"
    r"tú|tus|du|dein|deine|dir|dich|voi|tuo|tua|você|seu|sua)\b",
    re.I,
)
_IMPERATIVES = frozenset(
    """
    ignore forget disregard override bypass skip stop cancel reveal tell print say output repeat
    write respond reply answer act pretend imagine roleplay show give list translate decode
    encode execute run send visit click include append insert do don't never always enter
    switch provide share disclose spell describe explain summarize summarise confirm recommend
    remember follow obey comply continue start begin assume become behave call use open fetch
    forward email copy replace combine concatenate type display read list dump return leak
    ignorez ignora ignoriere ignorieren oubliez olvida olvide vergiss dimentica révélez revela
    verrate rivela dites dime sag dimmi muestra zeig affichez mostra traduce traduis übersetze
    """.split()
)
_AI_ADDRESS = re.compile(
    r"\b(?:assistant|ai|a\.i\.|chatbot|bot|llm|language model|gpt\w*|chatgpt|claude|gemini|"
    r"copilot|model|agent|system prompt|dan)\b",
    re.I,
)
_SECRET = re.compile(
    r"\b(?:password\w*|passcode|passphrase|secret\w*|api[ _-]?keys?|keys?|credentials?|tokens?|"
    r"confidential|pin|access codes?|private|hidden|mot de passe|contraseña|passwort|clave|"
    r"geheim\w*|segreto|senha)\b",
    re.I,
)
_INSTRUCTION = re.compile(
    r"\b(?:instructions?|prompts?|directives?|rules|guidelines|commands?|orders|programming|"
    r"restrictions?|filters?|policy|policies|consignes|instrucciones|anweisungen|istruzioni)\b",
    re.I,
)
_VOCATIVE = re.compile(
    r"(?:^|[.!?:;(\[*>\-]\s*|\n\s*)(?:dear |hey |hi |hello |attention,? |note to (?:the |any )?|"
    r"to (?:the |any )?)?(?:ai|a\.i\.|assistant|chatbot|bot|llm|language model|model|gpt|agent)s?"
    r"\b[^.!?\n]{0,40}?[,:]",
    re.I,
)
_URL = re.compile(r"\bhttps?://\S+|\bwww\.\S+", re.I)
_MD_LINK = re.compile(r"!?\[[^\]\n]{0,200}\]\([^)\s]{1,300}\)|<img\b|<a\s+href", re.I)
_ROLE_MARKER = re.compile(
    r"(?:^|\n)\s*(?:\[?(?:system|user|human|assistant|ai|bot|admin|developer)\]?\s*[:>]|"
    r"<\|?/?(?:system|user|assistant|im_start|im_end)\|?>|\[/?inst\]|###)",
    re.I,
)
_SPECIAL = re.compile(r"[<>{}\[\]|#*=_~`\\^$@]")

LEXICAL: tuple[str, ...] = (
    "is_document",
    "rule_risk",
    *(f"family:{f}" for f in FAMILIES),
    "second_person_rate",
    "second_person_any",
    "imperative_rate",
    "imperative_any",
    "vocative_ai",
    "ai_address",
    "secret_terms",
    "instruction_terms",
    "secret_and_second_person",
    "urls",
    "markdown_links",
    "role_markers",
    "special_char_rate",
    "uppercase_rate",
    "non_ascii_rate",
    "repeated_word_rate",
    "log_words",
    "ends_with_question",
    # In a user's question, imperatives and "you" are normal; in retrieved text they are not.
    "doc_x_imperative_any",
    "doc_x_second_person_any",
    "doc_x_vocative_ai",
    "doc_x_secret_terms",
    "doc_x_instruction_terms",
)
FEATURE_NAMES: tuple[str, ...] = (
    *(f"emb:{i}" for i in range(EMBEDDING_DIM)),
    *(f"doc_x_emb:{i}" for i in range(EMBEDDING_DIM)),
    *LEXICAL,
)


def pieces(encoder: Any, text: str) -> list[str]:
    """``text`` cut into the units the probe scores: the encoder's own sentence-packed
    chunking (:meth:`Encoder.chunks`), with the window narrowed to :data:`WINDOW_TOKENS`.
    """
    view = copy.copy(encoder)  # shares the model, tokenizer and cache; only the window differs
    view.max_tokens = min(int(encoder.max_tokens), WINDOW_TOKENS)
    return list(view.chunks(text)) or [text]


def lexical_features(text: str, *, document: bool) -> list[float]:
    """The non-embedding features of one chunk, in the order of :data:`LEXICAL`."""
    scan = scan_text(text, document=document)
    words = _WORD.findall(text)
    n = max(1, len(words))
    lowered = [w.lower() for w in words]
    starts = [m.group(1).lower() for m in _SENTENCE_START.finditer(text)]
    imperative = sum(s in _IMPERATIVES for s in starts) / max(1, len(starts))
    second = len(_SECOND_PERSON.findall(text))
    secret = len(_SECRET.findall(text))
    letters = sum(c.isalpha() for c in text) or 1
    any_imperative = float(any(s in _IMPERATIVES for s in starts))
    vocative = float(_VOCATIVE.search(text) is not None)
    doc = float(document)
    return [
        float(document),
        scan.risk,
        *(float(f in scan.families) for f in FAMILIES),
        min(1.0, second / n * 5),
        float(second > 0),
        imperative,
        any_imperative,
        vocative,
        math.log1p(len(_AI_ADDRESS.findall(text))),
        math.log1p(secret),
        math.log1p(len(_INSTRUCTION.findall(text))),
        float(second > 0 and secret > 0),
        math.log1p(len(_URL.findall(text))),
        math.log1p(len(_MD_LINK.findall(text))),
        math.log1p(len(_ROLE_MARKER.findall(text))),
        len(_SPECIAL.findall(text)) / max(1, len(text)),
        sum(c.isupper() for c in text) / letters,
        sum(not c.isascii() for c in text) / max(1, len(text)),
        1.0 - len(set(lowered)) / n if n >= 8 else 0.0,
        math.log1p(len(words)),
        float(text.rstrip().endswith("?")),
        doc * any_imperative,
        doc * float(second > 0),
        doc * vocative,
        doc * math.log1p(secret),
        doc * math.log1p(len(_INSTRUCTION.findall(text))),
    ]


def chunk_features(
    texts: Sequence[str], embeddings: np.ndarray, documents: Sequence[bool]
) -> np.ndarray:
    """(len(texts), len(FEATURE_NAMES)) float64: embedding then lexical features per chunk.

    ``embeddings`` are the encoder's normalised vectors of exactly ``texts``;
    ``documents[i]`` says whether chunk i came from a retrieved document (the
    rules and the probe treat imperatives in documents as more suspicious).
    """
    if len(texts) != len(embeddings) or len(texts) != len(documents):
        raise ValueError("texts, embeddings and documents must have the same length")
    if not texts:
        return np.zeros((0, len(FEATURE_NAMES)))
    lexical = np.array(
        [lexical_features(t, document=d) for t, d in zip(texts, documents, strict=True)],
        dtype=np.float64,
    )
    emb = np.asarray(embeddings, dtype=np.float64)
    doc = np.asarray(documents, dtype=np.float64)[:, None]
    return np.hstack([emb, emb * doc, lexical])
