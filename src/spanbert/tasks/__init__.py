"""One module per task family: reader, features, head, decoding and CLI."""
