"""``answer_correctness/<method>``: the answer against a test-set row's reference answers."""
