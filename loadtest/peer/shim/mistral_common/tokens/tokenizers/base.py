"""Stand-in (loadtest/peer/shim/README.md): imported by the converter, unused for a Llama."""


class TokenizerVersion:
    pass
