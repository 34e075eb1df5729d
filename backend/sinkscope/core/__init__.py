"""The measurement: tokens, models and their families, the attention kernel and its reducer, the capture, metrics."""
