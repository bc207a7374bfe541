"""``knowledge_retention/<method>``: does the assistant keep what the user said earlier?"""
