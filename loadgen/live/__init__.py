"""Live views of a run: the master's Prometheus exporter and the servers' own metrics (pure: no Locust, no gevent)."""
