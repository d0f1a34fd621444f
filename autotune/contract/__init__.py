"""The model contract: what every model, built-in or the user's, gives the tuner (ModelSpec)."""
