"""Stand-in (loadtest/peer/shim/README.md)."""


class Tekkenizer:
    pass
