"""``faithfulness/<method>``: is the answer supported by the documents? One module per method."""
