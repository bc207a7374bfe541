"""``answer_compliance/<method>``: facts beyond a test-set row's reference answers."""
