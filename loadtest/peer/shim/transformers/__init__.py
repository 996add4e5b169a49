"""Stand-in (loadtest/peer/shim/README.md): makes the converter fall back to config.json."""


class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise RuntimeError("transformers is not installed (loadtest/peer shim)")


class AutoTokenizer:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise RuntimeError("transformers is not installed (loadtest/peer shim)")
