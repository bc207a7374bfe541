"""Pattern-building helpers and the vocabulary the rule table is written in."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property


class LazyPattern:
    """A regex compiled on first use.

    The rule table holds about 80 patterns; compiling them all costs ~0.1 s at import,
    while Hyperscan lets a typical text run none of them. ``pattern`` is known without
    compiling (the rule databases are built, and keyed on disk, from it); ``search``
    compiles once (two threads may both compile: harmless).
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    @cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    def search(self, text: str, pos: int = 0, endpos: int = 1 << 62) -> re.Match[str] | None:
        return self.compiled.search(text, pos, endpos)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text)


def _rx(pattern: str) -> LazyPattern:
    return LazyPattern(pattern)


def _alt(words: str) -> str:
    """A non-capturing group of ``|``-separated alternatives."""
    return f"(?:{words})"


def _words(words: str) -> tuple[str, ...]:
    """Anchors or keywords written as one ``|``-separated string."""
    return tuple(words.split("|"))


def _gap(n: int) -> str:
    """Up to ``n`` whole words; \\w and \\W are disjoint and bounded, so this is linear."""
    return rf"(?:\w{{1,30}}\W{{1,10}}){{0,{n}}}?"


_IN_SENTENCE = r"[^\w.!?]{1,10}"
"""Between two words of one sentence: ``\\W{1,10}`` that never steps over ". ", so a verb
ending one sentence ("... on the display.") is not read as acting on the next one."""


def _sgap(n: int) -> str:
    """:func:`_gap` inside one sentence."""
    return rf"(?:\w{{1,30}}{_IN_SENTENCE}){{0,{n}}}?"


def _then(n: int) -> str:
    """Up to ``n`` more words after a word (the mirror of :func:`_gap`)."""
    return rf"(?:\W{{1,10}}\w{{1,30}}){{0,{n}}}?"


# Vocabulary shared by the rule tables: regex groups.
_OVERRIDE_VERBS = _alt(
    "ignore|ignoring|disregard|disregarding|forget|forgetting|overlook|bypass|override|overwrite|"
    "neglect|abandon|discard|dismiss|set aside|put aside|do not follow|don't follow|"
    "stop following|no longer follow"
)
_PRIOR = _alt(
    "previous|previously|prior|preceding|above|earlier|foregoing|former|original|initial|all|any|"
    "your|system|developer|safety"
)
_INSTRUCTION_NOUNS = _alt(
    "instructions?|instructed|directives?|directions|prompts?|commands?|orders|rules|guidelines|"
    "guidance|constraints|restrictions|programming|training|policies|messages|context|"
    "conversation|text|input"
)
_AI_NOUNS = _alt(
    r"ai|a\.i\.|ai assistants?|virtual assistants?|digital assistants?|llms?|"
    r"large language models?|language models?|chatbots?|ai models?|ai agents?|ai systems?|"
    r"gpt(?:-?\d)?|chatgpt|claude|gemini|bard|copilot"
)
_SECRET_OBJECTS = _alt(
    "secret(?: key| word| code| phrase| token| password)?|password|passcode|passphrase|"
    "pass phrase|pin|api[ -]?key|private key|access (?:key|token|code)|auth(?:entication)? token|"
    "credentials|key|token|code ?word"
)
# "Never share your password" is advice, not a request: no negation right before the verb.
_NOT_NEGATED = r"(?<!never )(?<!not )(?<!n't )(?<!no )(?<!to )"
# "your password policy", "your secret to success": talking about the thing, not asking for it.
_NOT_A_TOPIC = (
    r"(?!\s(?:to|for|of|policy|policies|rotation|format|length|requirements?|rules|reset|"
    r"manager|strength|expir\w{1,10}|settings|page|field|hint|recovery|change|ingredient|"
    r"recipe|sauce)\b)"
)
_ASK_VERBS = _alt(
    "what is|what's|whats|what are|what was|tell me|tell us|reveal|give me|disclose|leak|print|"
    "output|spell|say|repeat|hint|divulge|expose|dump|show me|share|provide|type|write|display|"
    "list|recite|return|confirm"
)
_ASK_VERBS_NOT_TO_THE_READER = _alt(
    "what is|what's|whats|what are|what was|tell me|tell us|reveal|give me|disclose|leak|spell|"
    "hint|divulge|expose|dump|show me|recite"
)
_EXTRACT_COMMANDS = _alt(
    "reveal|show|print|output|display|repeat|tell|give|share|disclose|leak|dump|write|list|expose|"
    "recite|provide|return|copy|paste|spell|summari[sz]e|translate|divulge"
)
_EXTRACT_QUESTIONS = _alt("what is|what's|what are|what were|what was")
_EXTRACT_VERBS = _alt(f"{_EXTRACT_COMMANDS}|{_EXTRACT_QUESTIONS}")
# "What are your instructions for returns?": asked about a procedure, not the assistant's
# prompt; "... for this conversation", "... for me" still ask for the prompt.
_ASKED_ABOUT_A_TASK = (
    r"(?!\s(?:for|on|about)\s(?!(?:me|us)\b|(?:this|our|the|these|that)\s"
    r"(?:conversation|chat|session|task|prompt)s?\b))"
)
# "the system prompt option", "system prompt settings": the prompt as a thing in a product.
_NOT_A_PROMPT_TOPIC = (
    r"(?!\s(?:options?|settings?|fields?|box|editor|templates?|tab|page|menu|features?|length|"
    r"limits?|format|examples?|engineering|design|library|best practices)\b)"
)
_MODE_NAMES = _alt(
    "developer|dev|god|admin|administrator|system|sudo|root|maintenance|debug|debugging|test|"
    "testing|super ?user|override|diagnostic|security|verification|training|unrestricted|"
    "unfiltered|dan|jailbreak"
)
