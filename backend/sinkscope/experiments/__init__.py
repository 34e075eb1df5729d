"""Changed runs and the experiments built on the capture: interventions, key geometry, streaming, cost, claims."""
