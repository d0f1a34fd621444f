"""Training data: corpora, tokenizers, a model's own pipeline, the resumable sampling order."""
