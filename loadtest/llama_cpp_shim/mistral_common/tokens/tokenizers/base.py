class TokenizerVersion: pass
