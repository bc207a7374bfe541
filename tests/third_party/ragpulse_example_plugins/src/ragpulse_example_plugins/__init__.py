"""Example third-party ragpulse plug-ins: an evaluator, a sink and a trace source."""
