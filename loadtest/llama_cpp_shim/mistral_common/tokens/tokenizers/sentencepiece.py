class SentencePieceTokenizer: pass
