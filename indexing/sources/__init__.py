"""What writes into memory on its own: watched notes (`notes`, `watcher`), architecture decision
records (`adr`), Claude Code transcripts (`transcripts`, `capture`), all through the `Sink`
protocol (`sink`) so every path is validated and redacted like `remember`."""
