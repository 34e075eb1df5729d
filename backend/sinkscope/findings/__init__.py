"""Every fact a page, the course, the scoreboard, the handout or a caption states about the user's model, computed
once. Each function returns data (and, where a sentence states it, ``Message`` keys filled from that data); the
words these sentences use ("most", "reads nothing", "rises a lot") have their thresholds in ``findings.words``.
No module here imports torch: the arrays come from a Trace.
"""
