"""``conversation_completeness/<method>``: were the user's requests in a conversation met?"""
