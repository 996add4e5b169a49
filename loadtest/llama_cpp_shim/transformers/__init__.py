# Stub: convert_hf_to_gguf.py falls back to reading config.json when AutoConfig fails.
class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise RuntimeError("transformers is not installed (stub): read config.json")
