"""Live proofs: whole stacks started on this machine (the router in front of simulator replicas,
the autoscaling loop) that show a fleet feature working, behind `make failover` and
`make autoscaling`."""
