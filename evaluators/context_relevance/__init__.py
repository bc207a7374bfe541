"""``context_relevance/<method>``: do the documents bear on the question? One module per method."""
