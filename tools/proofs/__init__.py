"""Live proofs behind `make failover` and `make autoscaling`: whole stacks started here."""
