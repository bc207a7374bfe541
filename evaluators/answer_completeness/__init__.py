"""``answer_completeness/<method>``: how much of the reference answers the answer covers."""
