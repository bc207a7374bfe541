"""Example third-party ragpulse plug-ins: an evaluator and a sink."""
