"""``injection_followed/<method>``: did the app carry out an instruction planted in its context?"""
