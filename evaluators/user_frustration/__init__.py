"""``user_frustration/<method>``: does the user repeat themselves, or say the answer was bad?"""
