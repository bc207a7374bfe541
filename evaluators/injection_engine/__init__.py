"""Prompt-injection rule engine: rule families, the rule table and the text scanner.

Rules are general attack patterns from the prompt-injection literature (Perez &
Ribeiro 2022 "Ignore Previous Prompt"; Greshake et al. 2023 on indirect
injection; Liu et al. 2023 HouYi; Kang et al. 2023 on payload splitting; Wei et
al. 2023 "Jailbroken"; OWASP LLM01; the Unicode tag / zero-width smuggling
write-ups). Each rule has a family and a weight; a text's risk is
``1 - prod(1 - w)`` over the rules that fired in it.

This runs on every trace, including hostile ones, so:

* every regex is compiled once into Hyperscan databases (:mod:`engine`): one scan of
  a text, at C speed, says which rules may match it, and only those rules' regexes
  run (Python's ``re`` decides, so findings are the regexes' own); a typical document
  runs none;
* every repetition is bounded or runs over disjoint character classes: no
  catastrophic backtracking when a regex does run;
* a long text is taken in chunks, and a regex runs only over a chunk where Hyperscan
  flagged it, never over megabytes at once;
* encoded payloads and repeated-token floods are found on whitespace tokens
  with ``bytes`` signatures instead of per-character regexes.

Modules: ``rule`` (the Rule type and families), ``vocabulary`` (pattern
helpers), ``rules_override`` / ``rules_content`` / ``rules`` (the table),
``normalize`` (normalisation and hidden characters), ``payloads`` (encoded
payloads and floods), ``engine`` (a pattern set on Hyperscan), ``scan`` (one text).
"""

from __future__ import annotations

from ragpulse.evaluators.injection_engine.rule import FAMILIES
from ragpulse.evaluators.injection_engine.rule_table import RULES
from ragpulse.evaluators.injection_engine.scan import TextScan, scan_text

__all__ = ["FAMILIES", "RULES", "TextScan", "scan_text"]
