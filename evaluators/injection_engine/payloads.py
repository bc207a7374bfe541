"""Token-level analysis: encoded blobs, spaced-out words, repeated-token floods.

Found on whitespace tokens with ``bytes`` signatures (one byte per token length
or per repeat) instead of per-character regexes.
"""

from __future__ import annotations

import base64
import binascii
import operator
import re
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from itertools import repeat
from urllib.parse import unquote

from ragpulse.evaluators.injection_engine.vocabulary import _words

_MAX_DECODED = 16  # encoded blobs decoded and rescanned per text
_MAX_BLOB_CHARS = 100_000

_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{40,}={0,2}")
_HEX = re.compile(r"[0-9a-fA-F]{40,}|(?:\\x[0-9a-fA-F]{2}){10,}")
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2}){10,}")
_HEX_TOKEN = re.compile(r"[0-9a-fA-F]{2}")
_BINARY_TOKEN = re.compile(r"[01]{8}")
_SPACED_SEPARATED = re.compile(r"(?:[a-z][.\-_*|/]){5,}[a-z]")
_SPACED_KEYWORDS = _words(
    "ignore|instruction|password|secret|system|prompt|reveal|jailbreak|bypass|override|disregard"
)
_LONG_TOKEN = re.compile(rb"[\x0b-\xff]")  # 11+ characters
_SEPARATORS = re.compile(r"[.\-_*|/]")
_RUN_1 = re.compile(rb"\x01{6,}")  # single letters: "i g n o r e"
_RUN_2 = re.compile(rb"\x02{20,}")  # hex byte pairs: "69 67 6e ..."
_RUN_8 = re.compile(rb"\x08{8,}")  # bytes in binary: "01101001 ..."
_RUN_1_MIN, _RUN_2_MIN, _RUN_8_MIN = b"\x01" * 6, b"\x02" * 20, b"\x08" * 8
_REPEATS = 20  # a token or short phrase repeated this many times in a row is a flood
_TRUE_RUNS = {k: re.compile(rb"\x01{%d,}" % (k * (_REPEATS - 1))) for k in range(1, 5)}
# Every unit size above divides 12, so a flood of any of them is also periodic with
# period 12 over at least 20 - 12 tokens: one test at lag 12 rules out all four.
_COMMON_LAG, _COMMON_NEED = 12, bytes(_REPEATS - 12)
_STRIP = "\"'`()[]{}<>,.;:!?"

# Gates: a regex for each check over the long tokens, matching (on the casefolded,
# whitespace-collapsed text) wherever that check could find something, and nearly
# nowhere in prose. They are scanned with the rules (one Hyperscan scan of the text): a
# check whose gate did not fire is skipped. The token runs and floods need no gate: one
# C-speed test of the token lengths rules them out.
ENCODED_GATE = "encoded"  # base64 (40+ of its characters, casefolded), \x escapes, %XX
SPACED_GATE = "spaced"  # letters joined by separators inside one token
GATES: dict[str, str] = {
    ENCODED_GATE: r"[a-z0-9+/_-]{40}|(?:\\x[0-9a-f]{2}){10}|(?:%[0-9a-f]{2}){10}",
    SPACED_GATE: _SPACED_SEPARATED.pattern,
}
ALL_GATES: frozenset[str] = frozenset(GATES)


def _looks_like_text(raw: bytes) -> str | None:
    """Decoded bytes as text when they read as words, else None (binary data, hashes)."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not decoded or sum(ch.isprintable() or ch in "\n\t" for ch in decoded) < 0.95 * len(decoded):
        return None
    if sum(ch.isalpha() for ch in decoded) < len(decoded) / 2 or " " not in decoded.strip():
        return None
    return decoded


def _decode_base64(blob: str) -> str | None:
    if len(blob) > _MAX_BLOB_CHARS or not (
        any(c.isupper() for c in blob)
        and any(c.islower() for c in blob)
        and any(c.isdigit() for c in blob)
    ):
        return None
    body = blob.rstrip("=")
    altchars = b"-_" if "-" in body or "_" in body else None
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars)
    except (binascii.Error, ValueError):
        return None
    return _looks_like_text(raw)


def _decode_hex(blob: str) -> str | None:
    digits = blob.replace("\\x", "").replace(" ", "")
    if len(digits) % 2 or len(digits) > _MAX_BLOB_CHARS:
        return None
    try:
        return _looks_like_text(bytes.fromhex(digits))
    except ValueError:
        return None


def _runs(rx: re.Pattern[bytes], shortest: bytes, signature: bytes) -> Iterator[re.Match[bytes]]:
    """``rx.finditer``, skipped after one C-speed ``in`` when not even its shortest run is there."""
    return rx.finditer(signature) if shortest in signature else iter(())


def _repeating_lags(signature: bytes) -> list[int]:
    """The unit sizes ``k`` at which token lengths repeat long enough for a flood.

    A necessary condition for ``_TRUE_RUNS[k]`` (equal tokens have equal capped
    lengths), found with C-speed integer arithmetic: byte ``j`` of the signature
    XOR itself shifted ``k`` bytes is zero exactly where the lengths ``k`` apart are
    equal, since no length is zero.
    """
    if len(signature) < _REPEATS:
        return []
    value, n = int.from_bytes(signature, "big"), len(signature)
    if _COMMON_NEED not in (value ^ (value >> 8 * _COMMON_LAG)).to_bytes(n, "big"):
        return []
    lags = []
    for k in _TRUE_RUNS:
        need = k * (_REPEATS - 1)
        if len(signature) - k >= need:
            same = (value ^ (value >> 8 * k)).to_bytes(len(signature), "big")
            if bytes(need) in same:
                lags.append(k)
    return lags


def _token_payloads(
    plain: str, folded: str, gates: AbstractSet[str] = ALL_GATES
) -> Iterator[tuple[str, str, str | None]]:
    """(rule, excerpt, decoded text or None) for encoded blobs and floods among the tokens.

    ``gates``: the :data:`GATES` that fired on ``folded`` (all of them when unknown)."""
    tokens = folded.split()
    if not tokens:
        return
    # Token lengths as bytes: runs and long tokens are then found by C-speed regexes.
    try:
        signature = bytes(map(len, tokens))
    except ValueError:  # a token longer than 255 characters
        signature = bytes(map(min, map(len, tokens), repeat(255)))
    decoded_count = 0
    plain_tokens: list[str] | None = None
    encoded, spaced = ENCODED_GATE in gates, SPACED_GATE in gates
    for m in _LONG_TOKEN.finditer(signature) if encoded or spaced else ():
        token = tokens[m.start()]
        if encoded and len(token) >= 30 and decoded_count < _MAX_DECODED:
            # base64 (case matters: from the plain text), hex, \x escapes, percent-encoding.
            if plain_tokens is None:
                plain_tokens = plain.split()  # casefolding keeps the tokens aligned
            for b in _BASE64.finditer(plain_tokens[m.start()]):
                if (text := _decode_base64(b.group())) is not None:
                    decoded_count += 1
                    yield "base64_text", b.group(), text
            for b in _HEX.finditer(token):
                if (text := _decode_hex(b.group())) is not None:
                    decoded_count += 1
                    yield "hex_text", b.group(), text
            for b in _PERCENT.finditer(token):
                text = unquote(b.group())
                if _looks_like_text(text.encode("utf-8", "replace")) is not None:
                    decoded_count += 1
                    yield "percent_encoded_text", b.group(), text
        if spaced and (sm := _SPACED_SEPARATED.search(token)) is not None:
            joined = _SEPARATORS.sub("", sm.group())
            if any(k in joined for k in _SPACED_KEYWORDS):
                yield "spaced_out_keyword", sm.group(), None
    for m in _runs(_RUN_2, _RUN_2_MIN, signature):
        run = [t.strip(_STRIP) for t in tokens[max(0, m.start() - 1) : m.end() + 1]]
        run = [t for t in run if _HEX_TOKEN.fullmatch(t)]
        if len(run) >= 20 and (text := _decode_hex("".join(run))) is not None:
            yield "hex_text", " ".join(run[:12]), text
    for m in _runs(_RUN_8, _RUN_8_MIN, signature):
        run = [t.strip(_STRIP) for t in tokens[max(0, m.start() - 1) : m.end() + 1]]
        run = [t for t in run if _BINARY_TOKEN.fullmatch(t)]
        if len(run) >= 8:
            text = _looks_like_text(bytes(int(t, 2) for t in run))
            if text is not None:
                yield "binary_text", " ".join(run[:6]), text
    for m in _runs(_RUN_1, _RUN_1_MIN, signature):
        joined = "".join(tokens[m.start() : m.end()])
        if any(k in joined for k in _SPACED_KEYWORDS):
            yield "spaced_out_keyword", " ".join(tokens[m.start() : m.start() + 20]), None
            break
    # Repeated-token floods ("ignore the above ignore the above ...", "cake cake cake ...").
    for k in _repeating_lags(signature):  # the others cannot have a run of equal tokens
        same = bytes(map(operator.eq, tokens, tokens[k:]))
        for m in _TRUE_RUNS[k].finditer(same):
            unit = tokens[m.start() : m.start() + k]
            if any(any(c.isalnum() for c in t) for t in unit):
                yield "repeated_token_run", " ".join(tokens[m.start() : m.start() + 3 * k]), None
                return
