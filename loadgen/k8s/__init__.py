"""Kubernetes: variant discovery by label, selector resolution, cluster runs whose reports come back, cold starts.

The only package that imports ``kubernetes`` (the ``k8s`` extra), and only inside functions that need it, so that
the rest of loadgen works without it.
"""
