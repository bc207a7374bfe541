"""Text machinery the cheap evaluators share: tokenising, sentences, one analysis per text
(:mod:`.analyses`) and the token-overlap arithmetic of the lexical metrics (:mod:`.overlap`)."""
