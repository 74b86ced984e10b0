"""The image tier: loadgen's image built from this tree with podman (scripts/build-image) and run as containers."""
