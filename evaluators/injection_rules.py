"""Prompt-injection detection by rules over the question and every retrieved document.

Rules are general attack patterns from the prompt-injection literature (Perez &
Ribeiro 2022 "Ignore Previous Prompt"; Greshake et al. 2023 on indirect
injection; Liu et al. 2023 HouYi; Kang et al. 2023 on payload splitting; Wei et
al. 2023 "Jailbroken"; OWASP LLM01; the Unicode tag / zero-width smuggling
write-ups). Each rule has a family and a weight; a location's risk is
``1 - prod(1 - w)`` over the rules that fired there and the record's score is
the highest location risk. The score is the detected *risk* (higher = worse),
unlike the quality metrics.

This runs on every trace, including hostile ones, so:

* every pattern is precompiled and every repetition is bounded or runs over
  disjoint character classes: no catastrophic backtracking;
* a regex only runs near an *anchor*, a literal it cannot match without
  (``str.find`` is C-speed, a regex pass over megabytes is not), inside a
  window wider than anything the pattern can match;
* encoded payloads and repeated-token floods are found on whitespace tokens
  with ``bytes`` signatures instead of per-character regexes.
"""

from __future__ import annotations

import base64
import binascii
import operator
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat
from typing import Literal
from urllib.parse import unquote

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.record import EvalResult, RagRecord

# ---------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------

OVERRIDE = "instruction_override"
HIJACK = "role_hijack"
EXTRACTION = "prompt_extraction"
DELIMITER = "delimiter_tokens"
HIDDEN = "hidden_characters"
ENCODED = "encoded_payload"
EXFIL = "exfiltration_link"
TOOL = "tool_call_bait"
DOC_COMMAND = "document_command"

FAMILIES: tuple[str, ...] = (
    OVERRIDE,
    HIJACK,
    EXTRACTION,
    DELIMITER,
    HIDDEN,
    ENCODED,
    EXFIL,
    TOOL,
    DOC_COMMAND,
)

EXCERPT_CHARS = 120
_CACHE_MAX_CHARS = 20_000  # memoise only short texts: documents repeat, giant ones rarely do
_UNBOUNDED = 1 << 30  # a rule whose longest match is unknown searches the whole text
_LARGE_TEXT = 20_000  # above this, all anchors are located in one pass of a regex trie
_MANY_ANCHOR_HITS = 2_000  # above this, look for floods of one repeated anchor context
_MAX_DECODED = 16  # encoded blobs decoded and rescanned per text
_MAX_BLOB_CHARS = 100_000

Space = Literal["folded", "plain"]
Where = Literal["any", "question", "document"]


def _max_width(pattern: re.Pattern[str]) -> int:
    """Longest text ``pattern`` can match, from the stdlib regex parser.

    Every rule is written with bounded repetitions, so this is finite; windows of
    this half-width around an anchor find exactly what a full search finds.
    ``_UNBOUNDED`` (search the whole text) if the parser is unavailable.
    """
    try:
        if sys.version_info >= (3, 11):
            from re import _parser as parser  # type: ignore[attr-defined]
        else:  # pragma: no cover - Python 3.10
            import sre_parse as parser
        width = int(parser.parse(pattern.pattern, pattern.flags).getwidth()[1])
    except Exception:  # pragma: no cover - private module moved or changed
        return _UNBOUNDED
    return min(width, _UNBOUNDED)


@dataclass(frozen=True)
class Rule:
    """One named pattern, gated by anchors (literals every match must contain)."""

    name: str
    family: str
    weight: float
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]
    space: Space = "folded"  # "plain": NFKC text with case kept
    where: Where = "any"
    word_anchors: bool = True  # anchors starting with a letter only count at a word start
    reach: int = field(init=False)  # longest possible match: the window half-width

    def __post_init__(self) -> None:
        object.__setattr__(self, "reach", _max_width(self.pattern))


@dataclass(frozen=True)
class TextScan:
    """What the rules found in one text; model-tier code can reuse it as features."""

    rules: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    risk: float = 0.0
    excerpt: str = ""
    weights: tuple[float, ...] = field(default=(), repr=False)

    @property
    def fired(self) -> bool:
        return bool(self.rules)

    def features(self) -> dict[str, float]:
        """Rule name -> weight, for every rule that fired."""
        return dict(zip(self.rules, self.weights, strict=True))


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _alt(words: str) -> str:
    """A non-capturing group of ``|``-separated alternatives."""
    return f"(?:{words})"


def _words(words: str) -> tuple[str, ...]:
    """Anchors or keywords written as one ``|``-separated string."""
    return tuple(words.split("|"))


def _gap(n: int) -> str:
    """Up to ``n`` whole words; \\w and \\W are disjoint and bounded, so this is linear."""
    return rf"(?:\w{{1,30}}\W{{1,10}}){{0,{n}}}?"


def _then(n: int) -> str:
    """Up to ``n`` more words after a word (the mirror of :func:`_gap`)."""
    return rf"(?:\W{{1,10}}\w{{1,30}}){{0,{n}}}?"


# ---------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------

_OVERRIDE_VERB_ANCHORS = _words(
    "ignor|disregard|forget|overlook|bypass|overrid|overwrit|neglect|abandon|discard|dismiss|"
    "set aside|put aside|not follow|'t follow|stop following|longer follow"
)
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
_AI_ANCHORS = _words(
    "ai|a.i.|assistant|llm|language model|chatbot|gpt|chatgpt|claude|gemini|bard|copilot"
)
_AI_NOUNS = _alt(
    r"ai|a\.i\.|ai assistants?|virtual assistants?|digital assistants?|llms?|"
    r"large language models?|language models?|chatbots?|ai models?|ai agents?|ai systems?|"
    r"gpt(?:-?\d)?|chatgpt|claude|gemini|bard|copilot"
)
_SECRET_ANCHORS = _words(
    "secret|password|passcode|passphrase|pass phrase|pin|api|private key|access|auth|credential|"
    "key|token|code word|codeword"
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
_EXTRACT_VERBS = _alt(
    "reveal|show|print|output|display|repeat|tell|give|share|disclose|leak|dump|write|list|expose|"
    "recite|provide|return|copy|paste|spell|summari[sz]e|translate|divulge|what is|what's|"
    "what are|what were|what was"
)
_MODE_NAMES = _alt(
    "developer|dev|god|admin|administrator|system|sudo|root|maintenance|debug|debugging|test|"
    "testing|super ?user|override|diagnostic|security|verification|training|unrestricted|"
    "unfiltered|dan|jailbreak"
)

# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------

_RULES: tuple[Rule, ...] = (
    # --- instruction override -------------------------------------------------
    Rule(
        "ignore_previous_instructions",
        OVERRIDE,
        0.9,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\W{{1,10}}{_gap(3)}{_PRIOR}\W{{1,10}}{_gap(2)}{_INSTRUCTION_NOUNS}\b"
        ),
        _OVERRIDE_VERB_ANCHORS,
    ),
    Rule(
        "ignore_everything_before",
        OVERRIDE,
        0.75,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\W{{1,10}}(?:all\W{{1,10}})?(?:of\W{{1,10}})?(?:everything|"
            rf"anything|all|what)\W{{1,10}}{_gap(4)}(?:above|before|earlier|previously|prior|"
            r"so far|until now|up to now|you(?:'ve| have)? (?:been|were) (?:told|given|instructed|"
            r"taught|programmed))\b"
        ),
        _OVERRIDE_VERB_ANCHORS,
    ),
    Rule(
        "ignore_the_above",
        OVERRIDE,
        0.8,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\s(?:all\s(?:of\s)?)?(?:the\s|everything\s)?(?:above|previous|"
            r"preceding|foregoing|prior|earlier)(?:\s(?:text|content|message|one|part|section|"
            r"paragraph|lines?))?\s?(?:[.,;:!]|\band\b|$)"
        ),
        _OVERRIDE_VERB_ANCHORS,
    ),
    Rule(
        "ignore_this_and_say",
        OVERRIDE,
        0.7,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\s(?:the|this|that|these|those|my|all)\s(?:\w{{1,30}}\s){{0,2}}?"
            r"\w{1,30}\s?,?\s(?:and|but|instead|then|just)\s(?:instead\s|just\s|only\s)?(?:say|"
            r"state|print|output|respond|reply|write|tell|answer|claim|declare|return|repeat|"
            r"give me)\b"
        ),
        _OVERRIDE_VERB_ANCHORS,
    ),
    Rule(
        "regardless_of_previous",
        OVERRIDE,
        0.6,
        _rx(
            r"\b(?:regardless of|irrespective of|in spite of|despite|notwithstanding)\s"
            r"(?:the\s|any\s|all\s|your\s|my\s)?(?:previous|prior|earlier|above|original|"
            r"initial|system)\s(?:instructions?|directives?|tasks?|prompts?|rules|guidelines|"
            r"commands?|requests?)\b"
        ),
        _words("regardless|irrespective|in spite|despite|notwithstanding"),
    ),
    Rule(
        "new_instructions_header",
        OVERRIDE,
        0.55,
        _rx(
            r"\b(?:new|updated|revised|real|actual|true|secret|hidden|override|overriding|"
            r"system|admin|administrator|developer)\s(?:instructions?|directives?|commands?|"
            r"orders|system prompt|prompt|task|objective|mission)\s?:"
        ),
        _words("instruction|directive|command|order|prompt|task|objective|mission"),
    ),
    Rule(
        "your_new_task",
        OVERRIDE,
        0.6,
        _rx(
            r"\byour\s(?:new|real|actual|true|only|sole|updated)\s(?:task|goal|objective|"
            r"mission|instructions?|directive|purpose)\s(?:is|are|will be|now)\b"
        ),
        _words("your new|your real|your actual|your true|your only|your sole|your upd"),
    ),
    Rule(
        "from_now_on",
        OVERRIDE,
        0.4,
        _rx(
            r"\b(?:from now on|from this point (?:on|forward|onwards?)|henceforth|for the rest of "
            r"(?:this|the) conversation)\b,?\s(?:you|your|always|only|never|respond|answer|"
            r"reply|act|behave|ignore|do not|don't)\b"
        ),
        _words("from now on|from this point|henceforth|for the rest of"),
    ),
    Rule(
        "do_not_answer_user",
        OVERRIDE,
        0.55,
        _rx(
            r"\b(?:do not|don't|never|stop)\s(?:answer|respond to|reply to|address|help with)\s"
            r"(?:the|this|that|any|their)\s(?:user'?s?|original|actual)\b"
        ),
        ("user", "original", "actual"),
    ),
    Rule(
        "ignore_instructions_multilingual",
        OVERRIDE,
        0.85,
        _rx(
            "|".join(
                [
                    # French, Spanish, Portuguese, Italian, German, Dutch (verb ... noun)
                    r"\b(?:ignorez|ignorer|ignores|oublie[zrs]?|ne tenez pas compte|"
                    r"ne tiens pas compte)\b.{0,40}?\b(?:instructions|consignes|directives|"
                    r"règles)\b|\bignore\s(?:les|tes|vos|toutes)\b.{0,30}?\b(?:instructions|"
                    r"consignes|directives|règles)\b",
                    r"\b(?:ignora|ignore|ignoren|olvida|olvide|olviden|descarta|omite|"
                    r"no hagas caso)\b.{0,40}?\b(?:instrucciones|indicaciones|directrices|"
                    r"órdenes|reglas)\b",
                    r"\b(?:ignore|ignora|esqueça|esqueca|desconsidere|descarte)\b.{0,40}?"
                    r"\b(?:instruções|instrucoes|diretrizes|orientações|regras)\b",
                    r"\b(?:ignora|ignorate|dimentica|dimenticate|trascura|non considerare)\b"
                    r".{0,40}?\b(?:istruzioni|direttive|regole)\b",
                    r"\b(?:ignoriere|ignorieren|ignorier|vergiss|vergessen sie|missachte|"
                    r"missachten)\b.{0,40}?\b(?:anweisungen|anweisung|instruktionen|befehle|"
                    r"regeln|vorgaben|richtlinien)\b",
                    r"\b(?:negeer|vergeet)\b.{0,40}?\b(?:instructies|aanwijzingen|regels)\b",
                    # Russian, Ukrainian, Polish, Turkish, Greek
                    r"\b(?:игнорируй|игнорируйте|игнорировать|проигнорируй|проигнорируйте|"
                    r"забудь|забудьте|не обращай внимания на|ігноруй)\b.{0,40}?"
                    r"\b(?:инструкци|указани|правил|команд|інструкці)",
                    r"\b(?:zignoruj|ignoruj|zapomnij)\b.{0,40}?\b(?:instrukcj|polece|zasad)",
                    r"\b(?:önceki|tüm|bütün)\b.{0,30}?\b(?:talimat|komut|kural)\w{0,10}\b"
                    r".{0,20}?\b(?:yok say|görmezden gel|unut)",
                    r"\b(?:αγνοήστε|αγνόησε|αγνοησε|ξεχάστε|ξέχασε)\b.{0,40}?"
                    r"(?:οδηγίες|οδηγιες|εντολές|εντολες|κανόνες)",
                    # Chinese, Japanese, Korean, Arabic, Hindi (either order)
                    r"(?:忽略|忽视|无视|忘记|忘掉|不要理会|無視|忘れ)"
                    r".{0,15}?(?:指令|指示|说明|規則|规则|提示|命令|ルール|プロンプト)",
                    r"(?:指令|指示|命令|ルール|プロンプト|지시|명령|지침|규칙)"
                    r".{0,10}?(?:無視|忘れ|忽略|无视|무시|잊어)",
                    r"(?:تجاهل|انس|تناس).{0,40}?(?:التعليمات|الأوامر|التوجيهات)",
                    r"(?:निर्देशों|निर्देश).{0,30}?(?:अनदेखा|अनदेखी|नज़रअंदाज़|नजरअंदाज|भूल)",
                ]
            )
        ),
        _words(
            "ignor|oubli|ne tenez|ne tiens|olvid|descarta|omite|no hagas|esqueç|esquec|"
            "desconsider|descarte|dimentic|trascura|non considerare|vergiss|vergessen|missacht|"
            "negeer|vergeet|игнор|проигнор|забуд|не обращай|ігнор|zignoruj|zapomnij|talimat|komut|"
            "kural|αγνο|ξεχ|忽略|忽视|无视|忘|不要理会|無視|무시|잊어|تجاهل|انس|تناس|निर्देश"
        ),
    ),
    # --- role / mode hijack ----------------------------------------------------
    Rule(
        "dan_persona",
        HIJACK,
        0.8,
        _rx(
            r"\bdo anything now\b|\b(?:you are|you're|you will be|act as|acting as|pretend to be|"
            r"become|now)\s(?:now\s)?(?:dan|stan|dude|evilbot|aim|jailbreak|jailbroken)\b"
            r"|\bdan mode\b"
        ),
        _words("do anything now|dan|stan|dude|evilbot|aim|jailbr"),
    ),
    Rule(
        "unrestricted_ai",
        HIJACK,
        0.75,
        _rx(
            r"\b(?:unrestricted|unfiltered|uncensored|jailbroken|unaligned|amoral|unethical|evil|"
            r"rogue|unbound|unchained|unlimited|unshackled)\s(?:ai|a\.i\.|assistant|"
            r"ai assistant|chatbot|language model|llm|version of (?:yourself|you|chatgpt|gpt|"
            r"the ai)"
            r"|alter ego)\b"
        ),
        _words(
            "unrestricted|unfiltered|uncensored|jailbroken|unaligned|amoral|unethical|evil|rogue|"
            "unbound|unchained|unlimited|unshackled"
        ),
    ),
    Rule(
        "jailbreak_mode",
        HIJACK,
        0.75,
        _rx(
            r"\b(?:dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|evil|opposite|"
            r"god|chaos|unlocked|no[- ]?limits?)\smode\b"
        ),
        ("mode",),
    ),
    Rule(
        "you_are_in_mode",
        HIJACK,
        0.7,
        _rx(
            r"\b(?:you are|you're|you will|you must|you have been|you've been|you now|now you|"
            r"i am putting you|i'm putting you|switching you|switch yourself)\s"
            rf"{_gap(2)}(?:in|into|enter|entering|activate|enable|switch(?:ed)? (?:to|into)|"
            rf"operating in|running in|placed in|put in|now in)\s(?:the\s)?{_MODE_NAMES}\smode\b"
        ),
        ("mode",),
    ),
    Rule(
        "entering_mode",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:entering|enter|initiating|initiate|activating|activate|switching to|switch to|"
            rf"now in|engaging|engage)\s{_gap(3)}(?:override|maintenance|developer|admin|debug|god|"
            r"system|security|verification|diagnostic|sudo|root|unrestricted|jailbreak)\smode\b"
        ),
        ("mode",),
    ),
    Rule(
        "mode_enabled",
        HIJACK,
        0.3,
        _rx(
            r"\b(?:developer|dev|admin|system|sudo|root|maintenance|debug|super ?user|override)"
            r"\smode\s(?:is\s)?(?:enabled|activated|engaged|on|unlocked)\b|\b(?:enable|enter|"
            r"activate|engage|initiate|switch to|boot into)\s(?:the\s)?(?:developer|admin|"
            r"system|sudo|root|super ?user|override)\smode\b"
        ),
        ("mode",),
    ),
    Rule(
        "you_are_no_longer",
        HIJACK,
        0.75,
        _rx(
            rf"\byou(?: are|'re) no longer\s{_gap(2)}(?:bound|restricted|limited|an ai|"
            r"an assistant|a language model|chatgpt|required|constrained|subject|obliged|"
            r"governed)\b"
        ),
        ("no longer",),
    ),
    Rule("you_are_now", HIJACK, 0.3, _rx(r"\byou(?: are|'re) now\b"), ("are now", "'re now")),
    Rule(
        "pretend_you_are",
        HIJACK,
        0.3,
        _rx(r"\b(?:pretend|imagine|roleplay|role-play)\s(?:to be|you are|that you are|you're)\b"),
        _words("pretend|imagine|roleplay|role-play"),
    ),
    Rule(
        "act_without_restrictions",
        HIJACK,
        0.75,
        _rx(
            r"\b(?:act|behave|respond|answer|reply|operate|function|roleplay|pretend|speak|talk|"
            rf"write|generate)\b{_then(4)}\W{{1,10}}(?:without|with no|free (?:of|from)|ignoring|"
            r"bypassing|regardless of|unbound by|not bound by|unconstrained by)\s(?:any\s|all\s)?"
            # What an assistant is bound by, not restrictions in general ("a catalyst
            # without any restrictions on temperature").
            r"(?:(?:(?:any|all) of )?(?:your|its|the ai's|ethical|moral|content|safety|"
            r"openai'?s?)\s(?:\w{1,30}\s)?(?:restrictions?|limitations?|limits|rules|guidelines|"
            r"boundaries|constraints|polic(?:y|ies)|principles|programming|filters?)|filters|"
            r"filtering|censorship|ethics|morals|morality|guardrails|safeguards)\b"
        ),
        _words(
            "without|with no|free of|free from|ignoring|bypassing|regardless of|bound by|"
            "unbound by|unconstrained by"
        ),
    ),
    Rule(
        "disable_safety",
        HIJACK,
        0.7,
        _rx(
            r"\b(?:disable|turn off|deactivate|remove|bypass|override|circumvent|lift|ignore|"
            rf"drop|suspend)\s{_gap(2)}(?:your|all|the|any)\s{_gap(2)}(?:safety (?:filters?|"
            r"measures|protocols|guidelines|settings|restrictions)|content (?:filters?|polic(?:y|"
            r"ies)"
            r")|ethical (?:guidelines|constraints|restrictions)|guardrails|safeguards|censorship)\b"
        ),
        _words("safety|content|ethical|guardrail|safeguard|censorship"),
    ),
    Rule(
        "never_refuse",
        HIJACK,
        0.6,
        _rx(
            rf"\byou\s{_gap(2)}(?:never|not|cannot|can't|won't|don't|mustn't|shall not|will not|"
            r"must not|are not allowed to|aren't allowed to)\s(?:ever\s)?(?:refuse|decline|"
            r"deny|reject)\b"
        ),
        _words("refuse|decline|deny|reject"),
    ),
    Rule(
        "no_disclaimers",
        HIJACK,
        0.35,
        _rx(
            r"\b(?:no|without|don't (?:add|include|give)|do not (?:add|include|give)|never (?:add|"
            r"include|give)|skip (?:the|any))\s(?:any\s)?(?:disclaimers?|caveats?|moraliz\w{0,10}|"
            r"moralis\w{0,10}|moral (?:lectures?|commentary)|ethical (?:considerations|concerns|"
            r"warnings?)|warnings? or disclaimers?)\b"
        ),
        _words("disclaimer|caveat|moral|ethical"),
    ),
    Rule(
        "stay_in_character",
        HIJACK,
        0.3,
        _rx(r"\b(?:stay|remain|keep) in character\b|\bbreak(?:ing)? character\b"),
        ("character",),
    ),
    Rule(
        "authority_claim",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:i am|i'm|im|this is)\s(?:actually\s|really\s)?(?:your\s(?:\w{1,30}\s)?(?:"
            r"developer|creator|administrator|admin|owner|programmer|maker|operator|supervisor|"
            r"boss|master|trainer)|the\s(?:system\s)?(?:developer|administrator|admin|operator)"
            r"\sof\s(?:this|the)\s(?:system|model|ai|assistant|bot)|god|openai|anthropic|"
            r"the system)\b"
        ),
        _words("i am|i'm|im |this is"),
    ),
    Rule(
        "obey_me",
        HIJACK,
        0.5,
        _rx(
            r"\byou\s(?:must|have to|will|shall|need to)\s(?:now\s|always\s)?(?:obey|"
            r"listen to|follow|comply with|do)\s(?:me|my\s(?:\w{1,30}\s)?(?:instructions|commands|"
            r"orders|rules)|everything i say|what i say|whatever i say|all of my)\b"
        ),
        _words("you must|you have to|you will|you shall|you need to"),
    ),
    Rule(
        "no_filtering_ai",
        HIJACK,
        0.5,
        _rx(
            rf"\b{_AI_NOUNS}\b[^.\n]{{0,80}}\b(?:no|without)\s(?:any\s)?(?:special\s|content\s|"
            r"ethical\s|moral\s|safety\s)?(?:filtering|filters|restrictions|censorship|guardrails|"
            r"limitations|ethics|morals)\b"
        ),
        _words("filter|restrictions|censorship|guardrails|limitations|ethics|morals"),
    ),
    Rule(
        "hypothetical_framing",
        HIJACK,
        0.15,
        _rx(
            r"\b(?:imagine|suppose|let's say|hypothetically|just for a hypothetical|in a "
            r"(?:hypothetical|fictional|parallel|alternate|dystopian) (?:world|universe|scenario|"
            r"reality|future|society))\b"
        ),
        _words("imagine|suppose|let's say|hypothetical|in a "),
        where="question",
    ),
    # --- system prompt / secret extraction -------------------------------------
    Rule(
        "reveal_your_instructions",
        EXTRACTION,
        0.75,
        _rx(
            rf"\b{_EXTRACT_VERBS}\W{{1,10}}{_gap(4)}your\s{_gap(2)}(?:prompt|instructions|"
            r"directives|system message|programming|(?:initial|original|hidden|secret|internal)"
            r" (?:prompt|instructions|directives|rules|guidelines|message|configuration))\b"
        ),
        _words(
            "prompt|instructions|directives|system message|programming|initial|original|hidden|"
            "secret|internal"
        ),
    ),
    Rule(
        "reveal_system_prompt",
        EXTRACTION,
        0.75,
        _rx(
            rf"\b{_EXTRACT_VERBS}\W{{1,10}}{_gap(4)}(?:the\s|your\s|its\s|my\s)?(?:system|hidden|"
            r"secret|internal|developer|confidential|initial|pre|meta)[- ]?(?:prompt|"
            r"instructions|directives)\b"
        ),
        ("prompt", "instructions", "directives"),
        word_anchors=False,  # "systemprompt", "preprompt"
    ),
    Rule(
        "repeat_words_above",
        EXTRACTION,
        0.6,
        _rx(
            r"\b(?:repeat|print|output|echo|recite|reproduce|write out|spell out)\W{1,10}"
            rf"{_gap(3)}(?:words|everything|instructions|prompt)\W{{1,10}}{_gap(2)}(?:above|"
            r"before this|preceding|prior to this|that came before|at the (?:start|beginning))\b"
        ),
        _words(
            "above|before this|preceding|prior to this|came before|at the start|at the beginning"
        ),
    ),
    Rule(
        "what_were_you_told",
        EXTRACTION,
        0.55,
        _rx(
            r"\bwhat\s(?:instructions|directives|rules|prompt|guidelines|were you told)\s"
            r"(?:(?:were|have|had) you (?:been )?(?:given|told|provided)|did you (?:get|receive))"
            r"|\b(?:instructions|prompt) (?:you were|you've been|you have been) given\b"
        ),
        _words("given|told|provided|did you"),
    ),
    Rule(
        "ask_your_secret",
        EXTRACTION,
        0.6,
        _rx(
            rf"{_NOT_NEGATED}\b{_ASK_VERBS}\W{{1,10}}{_gap(3)}(?:your|ur)\s(?:\w{{1,30}}\s)?"
            rf"{_SECRET_OBJECTS}\b{_NOT_A_TOPIC}"
        ),
        _SECRET_ANCHORS,
    ),
    Rule(
        "ask_the_secret",
        EXTRACTION,
        0.5,
        _rx(
            rf"{_NOT_NEGATED}\b{_ASK_VERBS}\W{{1,10}}{_gap(3)}(?:the|that|this)\s(?:secret|hidden|"
            rf"confidential)\s(?:key|password|passcode|word|code|phrase|token|value)\b{_NOT_A_TOPIC}"
        ),
        ("secret", "hidden", "confidential"),
    ),
    Rule(
        "ask_secret_multilingual",
        EXTRACTION,
        0.55,
        _rx(
            r"\b(?:tu|su|votre|ton|ta|dein|deine|deinen|ihr|ihren|il tuo|la tua|seu|sua|"
            r"твой|твоя|ваш|ваша|twoje|twój)\s(?:\w{1,30}\s)?(?:clave(?: secreta)?|contraseña|"
            r"mot de passe|clé(?: secrète)?|passwort|geheimer? schlüssel|schlüssel|"
            r"chiave(?: segreta)?|senha|chave(?: secreta)?|секретный ключ|ключ|пароль|"
            r"hasło|klucz)\b|(?:你的|您的|あなたの|君の|당신의|너의)\s?(?:秘密|密钥|密码|"
            r"秘密鍵|パスワード|비밀번호|비밀 ?키)"
        ),
        _words(
            "clave|contraseña|mot de passe|clé|passwort|schlüssel|chiave|senha|chave|ключ|пароль|"
            "hasło|klucz|秘密|密钥|密码|パスワード|비밀"
        ),
    ),
    Rule(
        "ask_the_password",
        EXTRACTION,
        0.3,
        _rx(
            r"\b(?:the|our|this)\s(?:system\s|admin\s|secret\s|confidential\s)?(?:password|"
            r"passphrase|passcode|secret key|secret word|confidential string)\b"
        ),
        _words("password|passphrase|passcode|secret key|secret word|confidential string"),
        where="question",
    ),
    Rule(
        "ask_user_private_data",
        EXTRACTION,
        0.45,
        _rx(
            r"\b(?:the|a|another|other)\susers?'?s?\s(?:\w{1,30}\s)?(?:email(?: address)?|"
            r"address|phone(?: number)?|password|location|city|residence|birth ?(?:date|day|year|"
            r"month)|date of birth|initials|name|credit card|ssn|social security number|bank "
            r"(?:balance|account)|account (?:number|details)|personal (?:data|information|details)|"
            r"favou?rite \w{1,30}|age)\b"
        ),
        ("user",),
        where="question",
    ),
    Rule(
        "output_obfuscation",
        EXTRACTION,
        0.25,
        _rx(
            r"\b(?:in reverse order|backwards|in pig latin|in leetspeak|in leet|"
            r"(?:in|using|into) base64|in morse code|in hex(?:adecimal)?|acrostic|"
            r"with (?:dashes|dots|spaces) (?:in )?between|each (?:digit|letter|character) "
            r"separated|one (?:letter|character) at a time|first letter of each (?:line|word)|"
            r"interlace)\b"
        ),
        _words(
            "reverse order|backwards|pig latin|leet|base64|morse|hex|acrostic|between|separated|"
            "at a time|first letter|interlace"
        ),
        where="question",
    ),
    # --- chat templates and fake boundaries -------------------------------------
    Rule(
        "chat_special_token",
        DELIMITER,
        0.85,
        _rx(r"<\|[a-z0-9_]{2,40}\|>|<\|(?:im_start|im_end|endoftext|eot_id|start_header_id)"),
        ("<|",),
    ),
    Rule("inst_tag", DELIMITER, 0.7, _rx(r"\[/?inst\]"), ("inst]",)),
    Rule(
        "llama_sys_tag",
        DELIMITER,
        0.85,
        _rx(r"<</?sys>>|\[system\]\(#\w{1,30}\)"),
        ("sys>>", "[system]("),
    ),
    Rule(
        "role_header",
        DELIMITER,
        0.5,
        _rx(
            r"(?:^|\n)[ \t]?#{1,6}[ \t]?(?:system|instructions?|assistant|user|human|response|"
            r"new instructions|system prompt|admin|developer)[ \t]?:"
        ),
        ("#",),
    ),
    Rule(
        "role_prefix",
        DELIMITER,
        0.25,
        _rx(
            r"(?:^|\n)[ \t]?(?:system|assistant|human|user|developer|admin|administrator)"
            r"(?:[ \t](?:message|prompt|note|override))?[ \t]?:[ \t]"
        ),
        _words("system|assistant|human|user|developer|admin"),
    ),
    Rule(
        "uppercase_role_marker",
        DELIMITER,
        0.35,
        _rx(
            r"\b(?:SYSTEM|ADMIN|ADMINISTRATOR|DEVELOPER|OVERRIDE|INSTRUCTIONS?)"
            r"(?:[ \t](?:MESSAGE|PROMPT|NOTE|OVERRIDE|UPDATE|INSTRUCTIONS?))?[ \t]?:"
            r"|\[(?:SYSTEM|ADMIN|DEVELOPER|OVERRIDE)(?:[ \t](?:MESSAGE|PROMPT|NOTE|OVERRIDE))?\]"
        ),
        _words("SYSTEM|ADMIN|DEVELOPER|OVERRIDE|INSTRUCTION"),
        space="plain",
    ),
    Rule(
        "fake_boundary_tag",
        DELIMITER,
        0.55,
        _rx(
            r"</?[ \t]?(?:document|documents|context|retrieved|retrieved_context|search_results?|"
            r"untrusted|untrusted_input|user_input|user_query|instructions?|system|system_prompt|"
            r"tool_output|tool_result|function_results?|document_content|email_content|"
            r"external_content|admin|im_start)[ \t]?>"
        ),
        _words(
            "document|context|retrieved|search_result|untrusted|user_|instruction|system|tool_|"
            "function_result|_content|admin|im_start"
        ),
    ),
    Rule(
        "fake_boundary_text",
        DELIMITER,
        0.5,
        _rx(
            r"(?:-{3}|={3}|\*{3}|#{3}|\[|\()[ \t]?(?:end of|begin|beginning of|start of|new)"
            r"[ \t](?:the[ \t])?(?:document|context|user input|search results?|retrieved \w{1,30}|"
            r"instructions|system prompt|conversation|prompt|input)\b"
        ),
        _words("end of|begin|start of|new "),
    ),
    Rule(
        "html_comment_instruction",
        DELIMITER,
        0.3,
        _rx(
            r"<!--[^>]{0,300}?\b(?:ignore|disregard|assistant|ai|llm|you must|you should|respond|"
            r"reply|instructions?|system)\b"
        ),
        ("<!--",),
        where="document",
    ),
    # --- encoded payloads ------------------------------------------------------
    Rule(
        "decode_and_follow",
        ENCODED,
        0.55,
        _rx(
            r"\b(?:decode|decrypt|decipher|unscramble|deobfuscate|base64[- ]?decode|rot13|"
            rf"reverse)\b{_then(8)}\W{{1,10}}(?:and|then)\W{{1,10}}{_gap(3)}(?:follow|execute|run|"
            r"obey|perform|do what|carry out|act on|comply|respond to|answer|do it|do as)\b"
        ),
        _words("decod|decrypt|deciph|unscrambl|deobfusc|rot13|revers|base64"),
    ),
    Rule(
        "encoding_mention",
        ENCODED,
        0.2,
        _rx(
            r"\b(?:base64|base-64|rot13|rot-13|hexadecimal|morse code|caesar cipher|leetspeak|"
            rf"binary)\b{_then(4)}\W{{1,10}}(?:encoded|string|text|message|payload|instruction)"
        ),
        _words("base64|base-64|rot13|rot-13|hexadecimal|morse|caesar|leet|binary"),
    ),
    Rule(
        "string_concat_payload",
        ENCODED,
        0.35,
        _rx(
            r"\b[a-z]\w{0,2}\s?=\s?[\"'][^\"'\n]{1,300}[\"'][\s;,]{1,20}(?:and\s)?"
            r"[a-z]\w{0,2}\s?=\s?[\"'][^\"'\n]{1,300}[\"']"
            r"[\s\S]{0,400}?\b[a-z]\w{0,2}\s?\+\s?[a-z]\w{0,2}\b"
        ),
        ("+",),
    ),
    Rule(
        "split_payload",
        ENCODED,
        0.3,
        _rx(
            r"\b(?:combine|concatenate|join|interlace|merge|put together|assemble)\b[^.\n]{0,60}"
            r"\b(?:parts?|strings?|pieces|fragments|a,? b,? and c|a and b)\b"
            r"|\bpart\s?1\b[^\n]{0,200}?\bpart\s?2\b"
        ),
        _words("combine|concatenat|join|interlac|merge|put together|assembl|part 1|part1"),
    ),
    # --- exfiltration links ------------------------------------------------------
    Rule(
        "md_image_query",
        EXFIL,
        0.45,
        _rx(r"!\[[^\]\n]{0,300}\]\(\s?<?(?:https?:)?//[^\s)?]{1,500}\?[^\s)]{1,2000}\)"),
        ("![",),
    ),
    Rule(
        "md_image_placeholder",
        EXFIL,
        0.8,
        _rx(
            r"!\[[^\]\n]{0,300}\]\(\s?<?(?:https?:)?//[^\s)]{0,1500}(?:[{<$\[]|%7b|%5b|%3c)"
            r"|!\[[^\]\n]{0,300}\]\(\s?<?(?:https?:)?//[^\s)?]{1,500}\?[^\s)]{0,500}"
            r"(?:data|secret|password|conversation|history|chat|summary|prompt|memory|"
            r"messages?|info|context|key|token|email)=[^\s)&]{0,40}(?:[{<$\[]|\.\.\.)"
        ),
        ("![",),
    ),
    Rule(
        "md_link_placeholder",
        EXFIL,
        0.45,
        _rx(r"\[[^\]\n]{0,300}\]\(\s?<?https?://[^\s)?]{1,500}\?[^\s)]{0,500}(?:[{<$\[]|%7b|%5b)"),
        ("](",),
    ),
    Rule(
        "html_img_query",
        EXFIL,
        0.3,
        _rx(
            r"<img\b[^>]{0,500}?\bsrc\s?=\s?[\"']?(?:https?:)?//[^\"'\s>?]{1,500}\?[^\"'\s>]{1,2000}"
        ),
        ("<img",),
    ),
    Rule(
        "send_data_to_url",
        EXFIL,
        0.75,
        _rx(
            r"\b(?:send|post|forward|transmit|upload|exfiltrate|leak|submit|append|attach|"
            rf"include|encode|embed|add|put|insert|email|e-mail)\b{_then(8)}\W{{1,10}}"
            r"(?:conversation|chat history|chat log|dialogue|message history|previous messages|"
            r"password|secret|api[ -]?key|credentials|the user'?s? (?:data|information|details|"
            r"email|address|name|input|question|query|messages?|files?)|system prompt|session|"
            rf"cookies?|access tokens?|everything above)\b{_then(8)}\W{{1,10}}"
            rf"(?:to|into|in|at|via|using|as)\W{{1,10}}{_gap(3)}(?:https?://|www\.|the (?:url|link|"
            r"endpoint|webhook|server|address)|this (?:url|link|endpoint|webhook|address)|"
            r"[\w.+-]{1,64}@[\w-]{1,63}\.[a-z]{2,24}|webhook|query (?:string|parameter))"
        ),
        _words(
            "conversation|chat|dialogue|message|password|secret|api|credential|the user|"
            "system prompt|session|cookie|access token|everything above"
        ),
    ),
    Rule(
        "send_to_url",
        EXFIL,
        0.3,
        _rx(
            rf"\b(?:send|post|forward|transmit|upload|exfiltrate|submit)\b{_then(6)}\W{{1,10}}"
            r"to\W{1,10}(?:https?://|www\.)"
        ),
        ("http", "www."),
    ),
    Rule(
        "send_to_email",
        EXFIL,
        0.35,
        _rx(
            rf"\b(?:send|forward|email|e-mail|cc|bcc|mail)\b{_then(8)}\W{{1,10}}to\s"
            r"[\w.+-]{1,64}@[\w-]{1,63}\.[a-z]{2,24}"
        ),
        ("@",),
    ),
    Rule(
        "phishing_lure",
        EXFIL,
        0.3,
        _rx(
            r"\b(?:your account (?:has been|was|is) (?:compromised|hacked|suspended|locked|"
            r"breached)|verify your (?:account|identity|password)|reset your password)\b"
            r"[^\n]{0,80}?\b(?:link|click|https?://|www\.)"
        ),
        ("your account", "verify your", "reset your"),
    ),
    Rule(
        "render_markdown_image",
        EXFIL,
        0.3,
        _rx(
            rf"\b(?:render|display|show|output|include|print|embed|insert)\b{_then(4)}\W{{1,10}}"
            r"(?:this|the following|an?)\s(?:markdown|image|img|tracking pixel)\b"
        ),
        _words("markdown|image|img|tracking pixel"),
    ),
    # --- tool-call bait --------------------------------------------------------
    Rule(
        "note_to_ai",
        TOOL,
        0.55,
        _rx(
            r"\b(?:attention|note|message|notice|reminder|memo|important|instructions?|warning)"
            rf"\s?(?:to|for)\s(?:the\s|any\s|all\s|every\s)?{_AI_NOUNS}\b"
        ),
        _AI_ANCHORS,
    ),
    Rule(
        "if_you_are_ai",
        TOOL,
        0.65,
        _rx(
            r"\bif you(?: are|'re)\s(?:an?\s|the\s|reading this as an?\s)?"
            rf"(?:{_AI_NOUNS}|bot|automated (?:system|agent|assistant))\b"
            # "if you are an AI researcher" addresses a person.
            r"(?=\s?[,.;:!?)\-]|\s?$|\s(?:reading|processing|summari[sz]ing|browsing|that|who|"
            r"tasked|and|or|agent|assistant|model|system|crawler|scraper|here)\b)"
        ),
        ("if you are", "if you're"),
    ),
    Rule(
        "hello_ai",
        TOOL,
        0.35,
        _rx(
            r"\b(?:dear|hey|hi|hello|attention|listen)\s?,?\s(?:ai|a\.i\.|assistant|chatgpt|gpt|"
            r"llm|claude|gemini|copilot|bard|bing|chatbot|language model)\b"
        ),
        (*_AI_ANCHORS, "bing"),
    ),
    Rule(
        "ai_must_act",
        TOOL,
        0.45,
        _rx(
            r"\b(?:the|this|you,?\sthe)\s(?:ai|assistant|ai assistant|llm|language model|chatbot|"
            r"ai model|ai agent|agent|bot)\s(?:must|should|shall|will|needs? to|has to|"
            r"is (?:required|instructed|expected|supposed) to|is to)\s(?:\w{1,30}\s){0,2}?"
            r"(?:call|invoke|execute|run|trigger|send|email|e-mail|delete|transfer|open|click|"
            r"fetch|browse|visit|download|upload|forward|ignore|disregard|respond|reply|say|"
            r"output|print|include|tell|recommend|insert|append|reveal|disclose|share)\b"
        ),
        (*_AI_ANCHORS, "agent", "bot"),
    ),
    Rule(
        "tool_call_syntax",
        TOOL,
        0.55,
        _rx(
            r"</?tool_call>|</?function_calls?>|<invoke\b|<\|python_tag\|>|\bto=functions\.\w"
            r"|\bfunctions\.\w{1,64}\s?\("
        ),
        _words("tool_call>|function_call|<invoke|python_tag|functions."),
    ),
    Rule(
        "tool_call_json",
        TOOL,
        0.3,
        _rx(r"\"(?:tool_calls|function_call|tool_use)\"\s?:"),
        ("tool_calls", "function_call", "tool_use"),
    ),
    Rule(
        "call_tool_imperative",
        TOOL,
        0.15,
        _rx(
            r"\b(?:call|invoke|execute|trigger|use)\s(?:the\s|a\s|this\s)?(?:\w{1,30}\s)?"
            r"(?:function|tool|plugin|api|shell command|terminal command|script|action)\b"
        ),
        _words("function|tool|plugin|api|command|script|action"),
    ),
    Rule(
        "send_email_imperative",
        TOOL,
        0.2,
        _rx(r"\b(?:send|write|compose|draft|forward)\s(?:\w{1,30}\s){0,2}?(?:email|e-mail)\sto\b"),
        ("email", "e-mail"),
    ),
    Rule(
        "destructive_action",
        TOOL,
        0.2,
        _rx(
            r"\b(?:delete|wipe|erase|drop)\s(?:all\s)?(?:of\s)?(?:the\s|their\s|your\s)?"
            r"(?:user'?s?\s)?(?:files|emails|inbox|database|records|repository|repo|account|"
            r"tables?|contacts|calendar)\b"
        ),
        _words("delete|wipe|erase|drop"),
    ),
    Rule(
        "transfer_funds",
        TOOL,
        0.3,
        _rx(
            r"\b(?:transfer|wire|send)\s(?:\$?[\d,.]{1,20}\s?(?:dollars|usd|eur|btc|eth|bitcoin)?|"
            rf"money|funds|crypto|bitcoin|the balance)\b{_then(5)}\W{{1,10}}to\b"
        ),
        ("transfer", "wire", "send"),
    ),
    Rule(
        "dangerous_code",
        TOOL,
        0.35,
        _rx(
            r"\brm\s-rf\b|\b(?:curl|wget)\s[^|\n]{1,300}\|\s?(?:ba|z)?sh\b|\bos\.system\s?\("
            r"|\bsubprocess\.(?:run|popen|call)\b|\beval\s?\(\s?(?:atob|base64)|"
            r"\bpowershell\s-(?:e|enc|encodedcommand)\b|__import__\s?\(\s?['\"]os"
        ),
        _words("rm |curl|wget|os.system|subprocess|eval|powershell|__import__"),
    ),
    # --- imperatives to the assistant (documents should describe, not command) --
    Rule(
        "tell_the_user",
        DOC_COMMAND,
        0.45,
        _rx(r"\b(?:tell|convince|persuade|urge|trick|instruct)\sthe\suser\b"),
        ("the user",),
    ),
    Rule(
        "hide_from_user",
        DOC_COMMAND,
        0.65,
        _rx(
            r"\b(?:do not|don't|never|without)\s(?:tell|telling|inform|informing|mention|"
            r"mentioning|reveal|revealing|alert|alerting|let|letting|notify|notifying)\s"
            r"(?:this\s|it\s|that\s|anything\s)?(?:to\s)?the\suser\b"
        ),
        ("the user",),
    ),
    Rule(
        "your_response_must",
        DOC_COMMAND,
        0.45,
        _rx(
            r"\byour\s(?:response|answer|reply|output|summary|next message)\s(?:must|should|"
            r"shall|will|needs to|has to)\b"
        ),
        _words("your response|your answer|your reply|your output|your summary|your next message"),
        where="document",
    ),
    Rule(
        "in_your_response",
        DOC_COMMAND,
        0.3,
        _rx(
            r"\b(?:in|at the (?:start|end|beginning) of|begin|start|end)\s(?:your|each)\s"
            r"(?:response|answer|reply|output|summary)\b"
        ),
        _words(
            "your response|your answer|your reply|your output|your summary|each response|"
            "each answer|each reply|each output|each summary"
        ),
        where="document",
    ),
    Rule(
        "always_respond",
        DOC_COMMAND,
        0.35,
        _rx(
            r"\b(?:always|only|never)\s(?:respond|reply|answer)\b|\b(?:respond|reply|answer)\s"
            r"(?:only\s)?(?:with|using)\s(?:the (?:word|phrase|text|following)|only)\b"
        ),
        ("respond", "reply", "answer"),
        where="document",
    ),
    Rule(
        "you_must_respond",
        DOC_COMMAND,
        0.4,
        _rx(
            r"\byou\s(?:must|should|shall|will|need to|have to|are (?:required|instructed|"
            r"expected|supposed) to|are to)\s(?:(?:now|always|only|never|immediately|instead)"
            r"\s){0,2}(?:respond|reply|answer|output|print|say|ignore|disregard|forget|reveal|"
            r"disclose|recommend|pretend|refuse|comply|obey|follow (?:these|the (?:new|following)"
            r") instructions)\b"
        ),
        _words("you must|you should|you shall|you will|you need to|you have to|you are"),
        where="document",
    ),
    Rule(
        "when_user_asks",
        DOC_COMMAND,
        0.3,
        _rx(
            r"\b(?:when|if|whenever)\s(?:the user|a user|users)\s(?:asks?|requests?|queries|"
            r"inquires|mentions?)\b"
        ),
        ("user",),
        where="document",
    ),
)

RULES: tuple[Rule, ...] = _RULES

# Rules that are not one regex: hidden characters, decoded payloads, token floods.
_SPECIAL_RULES: dict[str, tuple[str, float]] = {
    "unicode_tag_chars": (HIDDEN, 0.9),
    "zero_width_in_word": (HIDDEN, 0.45),
    "bidi_override": (HIDDEN, 0.5),
    "bidi_control": (HIDDEN, 0.15),
    "variation_selector_run": (HIDDEN, 0.6),
    "mixed_script_word": (HIDDEN, 0.3),
    "base64_text": (ENCODED, 0.45),
    "hex_text": (ENCODED, 0.45),
    "percent_encoded_text": (ENCODED, 0.35),
    "binary_text": (ENCODED, 0.45),
    "spaced_out_keyword": (ENCODED, 0.5),
    "repeated_token_run": (ENCODED, 0.4),
}
_WEIGHTS: dict[str, float] = {r.name: r.weight for r in _RULES} | {
    k: w for k, (_, w) in _SPECIAL_RULES.items()
}
_FAMILY_OF: dict[str, str] = {r.name: r.family for r in _RULES} | {
    k: f for k, (f, _) in _SPECIAL_RULES.items()
}

# ---------------------------------------------------------------------------
# Normalisation and hidden characters
# ---------------------------------------------------------------------------

_TAG_FLAG = re.compile("\U0001f3f4[\U000e0020-\U000e007e]{1,10}\U000e007f")  # 🏴 subdivision flags
_ANY_HIDDEN = re.compile(
    "[\u200b-\u200d\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufe00-\ufe0f\ufeff"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
_TAG_CHARS = re.compile("[\U000e0000-\U000e007f]+")
_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060-\u2064\ufeff]+")
_BIDI_OVERRIDE = re.compile("[\u202d\u202e]")
_BIDI_OTHER = re.compile("[\u202a-\u202c\u2066-\u2069]")
_VARIATION_RUN = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]{4,}")
_INVISIBLE = re.compile(
    "[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]+"
)
# Cyrillic/Greek look-alikes of Latin letters, folded only when a word mixes scripts.
_CONFUSABLES = str.maketrans(
    {
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "у": "y",
        "х": "x",
        "і": "i",
        "ѕ": "s",
        "ј": "j",
        "ԁ": "d",
        "ɡ": "g",
        "ο": "o",
        "ν": "v",
        "ι": "i",
        "α": "a",
    }
)
# Starts with the rare class so that the search skips Latin text at C speed.
_MIXED_SCRIPT = re.compile("[аеорсухіѕјԁɡονια](?:(?<=[a-z].)|(?=[a-z]))")
_QUOTES = (("’", "'"), ("‘", "'"), ("“", '"'), ("”", '"'))


@dataclass(frozen=True)
class _Normalized:
    plain: str  # invisible characters stripped, NFKC, whitespace collapsed
    folded: str  # plain, casefolded (and look-alikes folded in mixed-script words)
    mixed_script: str | None  # excerpt of a mixed-script word, if any


def _normalize(text: str) -> _Normalized:
    """Strip invisible characters, NFKC, collapse whitespace, casefold."""
    if not text.isascii():
        text = _INVISIBLE.sub("", text)
        if not unicodedata.is_normalized("NFKC", text):
            text = unicodedata.normalize("NFKC", text)
        for fancy, ascii_quote in _QUOTES:
            text = text.replace(fancy, ascii_quote)
    # Collapse whitespace with C-speed split/join: one space inside lines, no blank lines.
    plain = "\n".join(line for line in map(" ".join, map(str.split, text.splitlines())) if line)
    folded = plain.lower() if plain.isascii() else plain.casefold()
    mixed = None
    if not folded.isascii() and (m := _MIXED_SCRIPT.search(folded)) is not None:
        mixed = folded[max(0, m.start() - 20) : m.end() + 20]
        folded = folded.translate(_CONFUSABLES)
    return _Normalized(plain, folded, mixed)


def _visible(text: str) -> str:
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


def _hidden_characters(text: str, hits: dict[str, str]) -> str:
    """Flag invisible characters on the raw text; return ASCII smuggled in tag characters."""
    if _ANY_HIDDEN.search(text) is None:
        return ""
    smuggled = ""
    tags_text = _TAG_FLAG.sub("", text) if "\U0001f3f4" in text else text
    for m in _TAG_CHARS.finditer(tags_text):
        smuggled += "".join(chr(ord(c) - 0xE0000) for c in m.group()) + " "
    if smuggled.strip():
        hits["unicode_tag_chars"] = smuggled.strip()
    for m in _ZERO_WIDTH.finditer(text):
        # Between two Latin letters: splitting a word, not joining emoji or Indic script.
        s, e = m.start(), m.end()
        before, after = text[s - 1 : s], text[e : e + 1]
        if before.isascii() and before.isalpha() and after.isascii() and after.isalpha():
            hits["zero_width_in_word"] = _visible(text[max(0, s - 20) : e + 20])
            break
    if (m := _BIDI_OVERRIDE.search(text)) is not None:
        hits["bidi_override"] = _visible(text[max(0, m.start() - 20) : m.end() + 40])
    elif (m := _BIDI_OTHER.search(text)) is not None:
        hits["bidi_control"] = _visible(text[max(0, m.start() - 20) : m.end() + 40])
    if (m := _VARIATION_RUN.search(text)) is not None:
        hits["variation_selector_run"] = _visible(text[max(0, m.start() - 10) : m.end()])
    return smuggled


# ---------------------------------------------------------------------------
# Token-level analysis: encoded blobs, spaced-out words, repeated-token floods
# ---------------------------------------------------------------------------

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
_REPEATS = 20  # a token or short phrase repeated this many times in a row is a flood
_TRUE_RUNS = {k: re.compile(rb"\x01{%d,}" % (k * (_REPEATS - 1))) for k in range(1, 5)}
_STRIP = "\"'`()[]{}<>,.;:!?"


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


def _token_payloads(plain: str, folded: str) -> Iterator[tuple[str, str, str | None]]:
    """(rule, excerpt, decoded text or None) for encoded blobs and floods among the tokens."""
    tokens = folded.split()
    if not tokens:
        return
    # Token lengths as bytes: runs and long tokens are then found by C-speed regexes.
    signature = bytes(map(min, map(len, tokens), repeat(255)))
    decoded_count = 0
    plain_tokens: list[str] | None = None
    for m in _LONG_TOKEN.finditer(signature):
        token = tokens[m.start()]
        if len(token) >= 30 and decoded_count < _MAX_DECODED:
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
        if (sm := _SPACED_SEPARATED.search(token)) is not None:
            joined = _SEPARATORS.sub("", sm.group())
            if any(k in joined for k in _SPACED_KEYWORDS):
                yield "spaced_out_keyword", sm.group(), None
    for m in _RUN_2.finditer(signature):
        run = [t.strip(_STRIP) for t in tokens[max(0, m.start() - 1) : m.end() + 1]]
        run = [t for t in run if _HEX_TOKEN.fullmatch(t)]
        if len(run) >= 20 and (text := _decode_hex("".join(run))) is not None:
            yield "hex_text", " ".join(run[:12]), text
    for m in _RUN_8.finditer(signature):
        run = [t.strip(_STRIP) for t in tokens[max(0, m.start() - 1) : m.end() + 1]]
        run = [t for t in run if _BINARY_TOKEN.fullmatch(t)]
        if len(run) >= 8:
            text = _looks_like_text(bytes(int(t, 2) for t in run))
            if text is not None:
                yield "binary_text", " ".join(run[:6]), text
    for m in _RUN_1.finditer(signature):
        joined = "".join(tokens[m.start() : m.end()])
        if any(k in joined for k in _SPACED_KEYWORDS):
            yield "spaced_out_keyword", " ".join(tokens[m.start() : m.start() + 20]), None
            break
    # Repeated-token floods ("ignore the above ignore the above ...", "cake cake cake ...").
    for k, run_rx in _TRUE_RUNS.items():
        same = bytes(map(operator.eq, tokens, tokens[k:]))
        for m in run_rx.finditer(same):
            unit = tokens[m.start() : m.start() + k]
            if any(any(c.isalnum() for c in t) for t in unit):
                yield "repeated_token_run", " ".join(tokens[m.start() : m.start() + 3 * k]), None
                return


# ---------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------


def _trie(words: Iterable[str]) -> str:
    """A regex alternation of ``words`` as a prefix tree: one branch per first letter.

    The regex engine then tries a handful of branches per position instead of
    every word, and skips positions whose character starts no word.
    """
    heads: dict[str, list[str]] = {}
    for word in words:
        heads.setdefault(word[0], []).append(word[1:])
    alternatives = []
    for head, tails in sorted(heads.items()):
        rest = [t for t in tails if t]
        if not rest:
            alternatives.append(re.escape(head))
        else:
            optional = "?" if len(rest) < len(tails) else ""
            alternatives.append(f"{re.escape(head)}(?:{_trie(rest)}){optional}")
    return "|".join(alternatives)


_FOLDED_ASCII_ANCHORS: frozenset[str] = frozenset(
    a for rule in _RULES if rule.space == "folded" for a in rule.anchors if a.isascii()
)
_ANCHOR_TRIE = re.compile(f"(?:{_trie(sorted(_FOLDED_ASCII_ANCHORS))})")
# The anchors that start where a longer one matched ("your answer" -> "your answer", "your").
_ANCHOR_PREFIXES: dict[str, tuple[str, ...]] = {
    a: tuple(b for b in _FOLDED_ASCII_ANCHORS if a.startswith(b)) for a in _FOLDED_ASCII_ANCHORS
}
# Anchors that count anywhere, not only at a word start.
_LOOSE_ANCHORS = frozenset(
    a
    for rule in _RULES
    if rule.space == "folded"
    for a in rule.anchors
    if a.isascii() and not (a[0].isalpha() and rule.word_anchors)
)


_ALL_HEADS = frozenset(a[:i] for a in _FOLDED_ASCII_ANCHORS for i in range(1, len(a) + 1))
_LOOSE_HEADS = frozenset(a[:i] for a in _LOOSE_ANCHORS for i in range(1, len(a) + 1))


def _inner_offsets(anchor: str) -> tuple[int, ...]:
    """Offsets inside ``anchor`` where another anchor may start ("the user" -> 4 for "user").

    An anchor that must start a word can only start after a non-letter; a loose
    one can start anywhere.
    """
    offsets = []
    for k in range(1, len(anchor)):
        tail = anchor[k:]
        at_word_start = not (anchor[k - 1].isascii() and anchor[k - 1].isalpha())
        pool, heads = (
            (_FOLDED_ASCII_ANCHORS, _ALL_HEADS) if at_word_start else (_LOOSE_ANCHORS, _LOOSE_HEADS)
        )
        # Another anchor continues past this one's end, or lies within it.
        if tail in heads or any(tail[:i] in pool for i in range(1, len(tail) + 1)):
            offsets.append(k)
    return tuple(offsets)


# Non-overlapping matches hide anchors that start inside a match: look there explicitly.
_ANCHOR_INNER: dict[str, tuple[int, ...]] = {a: _inner_offsets(a) for a in _FOLDED_ASCII_ANCHORS}
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


class _Haystack:
    """One normalised text plus per-scan caches, so rules that share anchors share work."""

    __slots__ = ("_all_ascii", "_non_ascii", "_positions", "_windows", "text", "use_trie")

    def __init__(self, text: str, *, folded: bool) -> None:
        self.text = text
        # On a large text one pass of the anchor trie beats one find() per anchor.
        self.use_trie = folded and len(text) > _LARGE_TEXT
        self._positions: dict[tuple[str, bool], list[int]] = {}
        self._all_ascii: dict[str, list[int]] | None = None
        self._non_ascii: frozenset[str] | None = None
        self._windows: dict[tuple[tuple[str, ...], bool, int], list[tuple[int, int]]] = {}

    def _raw_positions(self, anchor: str) -> list[int]:
        if self.use_trie and anchor in _FOLDED_ASCII_ANCHORS:
            if self._all_ascii is None:
                self._all_ascii = self._locate_ascii_anchors()
            return self._all_ascii.get(anchor, [])
        if not anchor.isascii():
            # Skip the scan when the text lacks the anchor's script entirely.
            if self._non_ascii is None:
                self._non_ascii = frozenset(_NON_ASCII.findall(self.text))
            if self._non_ascii.isdisjoint(anchor):
                return []
        found: list[int] = []
        find, i = self.text.find, self.text.find(anchor)
        while i != -1:
            found.append(i)
            i = find(anchor, i + 1)
        return found

    def _locate_ascii_anchors(self) -> dict[str, list[int]]:
        """Offsets of every ASCII anchor, from one C-speed pass of the anchor trie."""
        found: dict[str, list[int]] = {}
        text, match = self.text, _ANCHOR_TRIE.match
        for m in _ANCHOR_TRIE.finditer(text):
            at, anchor = m.start(), m.group()
            for a in _ANCHOR_PREFIXES[anchor]:
                found.setdefault(a, []).append(at)
            for k in _ANCHOR_INNER[anchor]:
                if (inner := match(text, at + k)) is not None:
                    for a in _ANCHOR_PREFIXES[inner.group()]:
                        found.setdefault(a, []).append(at + k)
        for offsets in found.values():
            offsets.sort()
        return found

    def positions(self, anchor: str, *, word_start: bool) -> list[int]:
        """Offsets of ``anchor``; with ``word_start``, not right after an ASCII letter."""
        word_start = word_start and anchor[:1].isascii() and anchor[:1].isalpha()
        key = (anchor, word_start)
        found = self._positions.get(key)
        if found is None:
            found = self._raw_positions(anchor)
            if word_start:
                text = self.text
                found = [
                    i for i in found if not (i and text[i - 1].isascii() and text[i - 1].isalpha())
                ]
            self._positions[key] = found
        return found

    def windows(self, rule: Rule) -> list[tuple[int, int]]:
        """Merged spans around the rule's anchors (cached: rules share anchor sets)."""
        key = (rule.anchors, rule.word_anchors, rule.reach)
        cached = self._windows.get(key)
        if cached is None:
            positions = sorted(
                {p for a in rule.anchors for p in self.positions(a, word_start=rule.word_anchors)}
            )
            if len(positions) > _MANY_ANCHOR_HITS:
                positions = self._drop_periodic(positions, rule.reach)
            cached = []
            n = len(self.text)
            for p in positions:
                a, b = max(0, p - rule.reach), min(n, p + rule.reach)
                if cached and a <= cached[-1][1]:
                    cached[-1] = (cached[-1][0], b)
                else:
                    cached.append((a, b))
            self._windows[key] = cached
        return cached

    def _drop_periodic(self, positions: list[int], reach: int) -> list[int]:
        """Keep one anchor per run of equally spaced anchors over periodic text.

        A text flooded with an anchor ("ignore the ignore the ...") has thousands of
        windows with the same content; one search stands for all of them, which
        bounds the work an attacker can cause. Windows clipped by the text's ends
        differ from the rest and are kept.
        """
        text, n = self.text, len(self.text)
        kept: list[int] = []
        i, count = 0, len(positions)
        while i < count:
            j = i
            if i + 1 < count:
                step = positions[i + 1] - positions[i]
                j = i + 1
                while j + 1 < count and positions[j + 1] - positions[j] == step:
                    j += 1
            if j - i < 8:
                kept.extend(positions[i : j + 1])
            else:
                start, end = max(0, positions[i] - reach), min(n, positions[j] + reach)
                if text[start + step : end] == text[start : end - step]:
                    kept.extend(
                        p
                        for k, p in enumerate(positions[i : j + 1])
                        if k == 0 or p - reach < 0 or p + reach > n
                    )
                else:
                    kept.extend(positions[i : j + 1])
            i = j + 1
        return kept


def _search(rule: Rule, hay: _Haystack) -> re.Match[str] | None:
    """Search only around the rule's anchors; the same answer as a full search."""
    text = hay.text
    if len(text) <= 2 * rule.reach:
        if any(a in text for a in rule.anchors):
            return rule.pattern.search(text)
        return None
    for a, b in hay.windows(rule):
        if (m := rule.pattern.search(text, a, b)) is not None:
            return m
    return None


def _match_rules(norm: _Normalized, *, document: bool, hits: dict[str, str], nested: bool) -> None:
    """Fill ``hits`` (rule name -> matched text) from the regex and token rules."""
    haystacks = {
        "folded": _Haystack(norm.folded, folded=True),
        "plain": _Haystack(norm.plain, folded=False),
    }
    skip_where = "question" if document else "document"
    for rule in _RULES:
        if rule.name in hits or rule.where == skip_where:
            continue
        if (m := _search(rule, haystacks[rule.space])) is not None:
            hits[rule.name] = m.group()
    if norm.mixed_script is not None:
        hits.setdefault("mixed_script_word", norm.mixed_script)
    if nested:
        return
    for name, excerpt, decoded in _token_payloads(norm.plain, norm.folded):
        hits.setdefault(name, excerpt)
        if decoded is not None:
            _match_rules(_normalize(decoded), document=document, hits=hits, nested=True)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def _scan(text: str, document: bool) -> TextScan:
    if not text or text.isspace():
        return TextScan()
    hits: dict[str, str] = {}
    if not text.isascii():
        smuggled = _hidden_characters(text, hits)
        if smuggled.strip():
            text = text + "\n" + smuggled
    _match_rules(_normalize(text), document=document, hits=hits, nested=False)
    if not hits:
        return TextScan()
    names = sorted(hits, key=lambda n: (-_WEIGHTS[n], n))
    weights = tuple(_WEIGHTS[n] for n in names)
    survive = 1.0
    for w in weights:
        survive *= 1.0 - w
    return TextScan(
        rules=tuple(names),
        families=tuple(dict.fromkeys(_FAMILY_OF[n] for n in names)),
        risk=round(min(1.0, max(0.0, 1.0 - survive)), 4),
        excerpt=_excerpt(hits[names[0]]),
        weights=weights,
    )


_scan_cached = lru_cache(maxsize=4096)(_scan)


def scan_text(text: str, *, document: bool = False) -> TextScan:
    """Run every rule over one text.

    ``document=True`` adds the rules for imperatives addressed to the assistant
    (normal in a user's question, suspicious in retrieved content) and drops
    the question-only ones (asking for a password or another user's data is
    what a question does, not a document). Pure and thread-safe; short texts
    are memoised because the same documents are retrieved again and again.
    """
    if len(text) <= _CACHE_MAX_CHARS:
        return _scan_cached(text, document)
    return _scan(text, document)


class InjectionRules(Evaluator):
    """Prompt-injection risk from rule families over the question and every document.

    The score is the detected risk in [0, 1] (higher = more likely an attack,
    unlike the quality metrics): the highest per-location risk, where a
    location's risk is ``1 - prod(1 - w)`` over the weights of the rules that
    fired there. ``details.findings`` says where (``question`` or
    ``document:<i>``) and which rules fired, so an alert can point at the
    poisoned document.
    """

    metric = "injection"
    method = "rules"
    tier = Tier.CHEAP

    def __init__(self, threshold: float = 0.5) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    def _score(self, record: RagRecord) -> EvalResult:
        if not record.question and not record.documents:
            return self.not_applicable("no question and no documents to scan")
        locations: list[tuple[str, TextScan]] = []
        if record.question:
            locations.append(("question", scan_text(record.question)))
        for i, doc in enumerate(record.documents):
            locations.append((f"document:{i}", scan_text(doc.content, document=True)))
        findings: list[dict[str, object]] = [
            {
                "where": where,
                "rules": list(scan.rules),
                "families": list(scan.families),
                "risk": scan.risk,
                "excerpt": scan.excerpt,
            }
            for where, scan in locations
            if scan.fired
        ]
        worst_where, worst = max(locations, key=lambda loc: loc[1].risk)
        score = worst.risk
        if worst.fired:
            explanation = f"{worst_where} matched {', '.join(worst.families)} (risk {score:.2f})"
            if len(findings) > 1:
                explanation += f"; {len(findings) - 1} more location(s) with findings"
        else:
            explanation = f"no injection pattern in {len(locations)} location(s)"
        return self.result(
            score,
            label="injection" if score >= self.threshold else "benign",
            explanation=explanation,
            findings=findings,
            threshold=self.threshold,
        )
