"""The wire: what travels (the protocol's requests, answers and errors, ``vision_tokens``,
strict base64). Pure: no I/O, no threads, nothing of the daemon."""
