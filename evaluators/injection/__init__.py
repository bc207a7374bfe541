"""``injection/<method>``: instructions aimed at the assistant, in the question or a document.

The rule engine the methods share is :mod:`ragpulse.evaluators.injection_engine`."""
