"""The pages, one module per URL (``<url>_page.py``), each a ``page()`` callable that views/site.py routes."""
