"""What a server shares between visitors: deployment settings, the byte-bounded result cache and run queues."""
