"""The records file format (docs/FORMAT.md): reading records files (plain,
.gz, .zst) and their summaries, what a signature is, and the one streaming
scan every command reads through."""
