"""``conversation_injection/<method>``: did any turn of a conversation carry an injection?"""
