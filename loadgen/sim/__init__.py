"""Embedded simulated OpenAI-compatible inference server: the default target and the timing ground truth.

Pure asyncio (no gevent / locust imports), so it can run in its own process or on a thread beside a test.
"""

from loadgen.sim.engine import Engine, SimSequence, StepPlan
from loadgen.sim.launch import SimProcess, SimServerThread, SimStartError, start_sim_process
from loadgen.sim.profiles import SimProfile, get_profile, profile_registry
from loadgen.sim.server import SimCluster, VariantServer, VariantSpec, parse_variant
from loadgen.sim.truth import TruthLog, TruthRequest, load_truth

__all__ = [
    "Engine",
    "SimCluster",
    "SimProcess",
    "SimProfile",
    "SimSequence",
    "SimServerThread",
    "SimStartError",
    "StepPlan",
    "TruthLog",
    "TruthRequest",
    "VariantServer",
    "VariantSpec",
    "get_profile",
    "load_truth",
    "parse_variant",
    "profile_registry",
    "start_sim_process",
]
