"""What the tests share: doubles of the servers ragpulse talks to (an LLM judge, Langfuse),
the real servers they start (Kafka, llama.cpp, Phoenix, MLflow), apps that send traces,
and helpers. Tests import them as ``support.<module>`` (``pythonpath`` in pyproject.toml)."""
