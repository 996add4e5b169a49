"""Stand-in (loadtest/peer/shim/README.md)."""


class SentencePieceTokenizer:
    pass
