"""``gen_ai.provider.name`` when the app does not say it (required on inference spans).

Best knowledge, as the GenAI conventions ask: first the requested model's family
(known at span start, where sampling can use it), then the client library the
response object comes from; :data:`ragpulse.semconv.PROVIDER_UNKNOWN` otherwise.
Values are the conventions' well-known ones.
"""

from __future__ import annotations

from typing import Any

# Model-name prefix -> provider. Checked on the name after any "vendor/" path.
_MODEL_PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt-", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("claude", "anthropic"),
    ("gemini", "gcp.gemini"),
    ("mistral", "mistral_ai"),
    ("mixtral", "mistral_ai"),
    ("codestral", "mistral_ai"),
    ("ministral", "mistral_ai"),
    ("command", "cohere"),
    ("deepseek", "deepseek"),
    ("grok", "x_ai"),
    ("sonar", "perplexity"),
    ("kimi", "moonshot_ai"),
)

# Top-level package of the response object's type -> provider.
_CLIENT_PACKAGES: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "mistralai": "mistral_ai",
    "cohere": "cohere",
    "groq": "groq",
    "google": "gcp.gen_ai",  # google-genai: the backend (Gemini API or Vertex) is unknown
}


def provider_of_model(model: str | None) -> str | None:
    """The provider a model name belongs to (``gpt-4o`` -> ``openai``), or None."""
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    for prefix, provider in _MODEL_PREFIXES:
        if name.startswith(prefix):
            return provider
    return None


def provider_of_response(response: Any) -> str | None:
    """The provider whose client library made ``response`` (an OpenAI
    ``ChatCompletion`` -> ``openai``), or None (a str, a dict, an unknown type)."""
    module = getattr(type(response), "__module__", None)
    if not isinstance(module, str):
        return None
    return _CLIENT_PACKAGES.get(module.split(".", 1)[0])
