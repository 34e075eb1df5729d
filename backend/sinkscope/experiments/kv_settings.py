"""The KV lab's settings, without torch: what the command line checks before it loads a model."""

GROUP = 32  # KIVI's group: 32 tokens per key channel range, 32 channels per value range
RESIDUAL = 32  # KIVI's residual window R (its default, R = GROUP); 0 keeps nothing in full precision
RESIDUALS = (0, 32, 64, 128)  # the page's choices: whole groups, so a key block holds whole groups
BITS = (2, 3, 4, 8)
PROTECTIONS = ("none", "first4", "sinks")
