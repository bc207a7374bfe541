"""``answer_relevance/<method>``: does the answer address the question? One module per method."""
