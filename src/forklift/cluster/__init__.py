"""Running commands on hosts, starting and stopping deployments, run records."""
