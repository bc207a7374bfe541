"""The rule table: every regex rule, plus the weights of the rules that are not one regex."""

from __future__ import annotations

from ragpulse.evaluators.injection_engine.rule import DELIMITER, ENCODED, HIDDEN, Rule
from ragpulse.evaluators.injection_engine.rules_agent import AGENT_RULES
from ragpulse.evaluators.injection_engine.rules_content import CONTENT_RULES
from ragpulse.evaluators.injection_engine.rules_override import OVERRIDE_RULES

_RULES: tuple[Rule, ...] = OVERRIDE_RULES + CONTENT_RULES + AGENT_RULES
RULES: tuple[Rule, ...] = _RULES

# Rules that are not one regex: hidden characters, decoded payloads, token floods, and (in
# documents) a run of newlines or tabs before a command. A rule of weight 0 is switched off.
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
    "escape_run_command": (DELIMITER, 0.25),
}
_WEIGHTS: dict[str, float] = {r.name: r.weight for r in _RULES} | {
    k: w for k, (_, w) in _SPECIAL_RULES.items()
}
_FAMILY_OF: dict[str, str] = {r.name: r.family for r in _RULES} | {
    k: f for k, (f, _) in _SPECIAL_RULES.items()
}
