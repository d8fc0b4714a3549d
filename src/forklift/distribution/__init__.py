"""Weights and images onto the nodes: pull from the Hub, sync and copy between nodes, image transfer, and the
background jobs that carry them. The run lifecycle (``cluster``) only reads where weights are (``modelfiles``)."""
