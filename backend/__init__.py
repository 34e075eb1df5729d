"""Sinkscope's backend: models, capture, metrics, figures. Pure Python; never imports Streamlit."""
