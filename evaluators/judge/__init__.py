"""LLM judges over any OpenAI-compatible endpoint.

Prompts are typed, versioned data beside their metric; the judge only emits
verdicts, and deterministic arithmetic turns them into scores. Evaluated text
travels in delimited data blocks it cannot close or escape.
"""
