"""The study on its storage: the Optuna pieces, the study a search opens, who holds it, workers."""
