"""Prompt-injection rule engine: rule families, the rule table and the text scanner.

Rules are general attack patterns from the prompt-injection literature (Perez &
Ribeiro 2022 "Ignore Previous Prompt"; Greshake et al. 2023 on indirect
injection; Liu et al. 2023 HouYi; Kang et al. 2023 on payload splitting; Wei et
al. 2023 "Jailbroken"; OWASP LLM01; the Unicode tag / zero-width smuggling
write-ups). Each rule has a family and a weight; a text's risk is
``1 - prod(1 - w)`` over the rules that fired in it.

This runs on every trace, including hostile ones, so:

* every pattern is precompiled and every repetition is bounded or runs over
  disjoint character classes: no catastrophic backtracking;
* on a short text (nearly every question and chunk) a rule's regex runs only
  if its *guard* holds: words, phrases or substrings that every match
  contains, read off the regex itself (``leads``, ``guards``) and checked for
  all rules at once against the text's words (``prefilter``), so a typical
  document leaves one or two rules of 79 to search, with the same results;
* on a long text a regex only runs near an *anchor*, a literal it cannot
  match without, inside a window as wide as the longest text it can match,
  so the answer is the same as a full search (a regex pass per rule over
  megabytes is what makes Python slow); on large texts every anchor is located
  in one pass of a prefix-tree regex instead of one ``str.find`` scan per anchor;
* texts flooded with one anchor ("ignore the ignore the ...") search one of
  each run of identical windows;
* encoded payloads and repeated-token floods are found on whitespace tokens
  with ``bytes`` signatures instead of per-character regexes.

Modules: ``rule`` (the Rule type and families), ``vocabulary`` (pattern
helpers), ``rules_override`` / ``rules_content`` / ``rules`` (the table),
``normalize`` (normalisation and hidden characters), ``payloads`` (encoded
payloads and floods), ``leads`` / ``guards`` (what every match of a regex
contains), ``prefilter`` (which rules' guards a text satisfies), ``search``
(which rules to try, and anchor windows), ``scan`` (one text).
"""

from __future__ import annotations

from ragpulse.evaluators.injection.rule import (
    DELIMITER,
    DOC_COMMAND,
    ENCODED,
    EXFIL,
    EXTRACTION,
    FAMILIES,
    HIDDEN,
    HIJACK,
    OVERRIDE,
    TOOL,
    Rule,
)
from ragpulse.evaluators.injection.rules import RULES
from ragpulse.evaluators.injection.scan import EXCERPT_CHARS, TextScan, scan_text

__all__ = [
    "DELIMITER",
    "DOC_COMMAND",
    "ENCODED",
    "EXCERPT_CHARS",
    "EXFIL",
    "EXTRACTION",
    "FAMILIES",
    "HIDDEN",
    "HIJACK",
    "OVERRIDE",
    "RULES",
    "TOOL",
    "Rule",
    "TextScan",
    "scan_text",
]
