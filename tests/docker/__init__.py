"""Tests of the engine and sidecar images (docker/), without a Docker engine."""
