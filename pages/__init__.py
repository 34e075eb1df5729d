"""Streamlit pages; ``common`` holds the glue they share."""
